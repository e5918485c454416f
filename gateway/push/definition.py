"""A push subscription's definition: parsed from a request (422 with a pointer on bad input), kept
in etcd as a JSON object, shown without its secrets or header values."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from gateway.delivery.filters import HeaderFilter, parse_filters
from gateway.delivery.group_config import GroupConfig
from gateway.delivery.params import parse_retry_backoff
from gateway.errors import Problem, invalid_field
from gateway.publish.validation import reject_unknown_fields
from gateway.push.endpoint import EndpointPolicy, EndpointRefused, admit_endpoint
from gateway.push.signing import new_secret, secret_key
from partitioner.group_policy import RetryBackoff

FORMATS = ("json", "cloudevents")
MAX_HEADERS = 16
MAX_HEADER_VALUE = 4096
MAX_SECRETS = 2
MAX_PREVIOUS_SECRET_S = 7 * 86_400
HEADER_NAME = re.compile(r"[A-Za-z0-9!#$%&'*+.^_`|~-]{1,100}")
# set by the gateway on every request: a definition may not replace them
RESERVED_HEADERS = frozenset({
    "host", "content-length", "content-type", "content-encoding", "transfer-encoding",
    "connection", "keep-alive", "upgrade", "te", "trailer", "proxy-authorization", "expect",
    "user-agent", "webhook-id", "webhook-timestamp", "webhook-signature"})
DEFAULT_BACKOFF = RetryBackoff(1000, 2.0, 60_000)
SETTABLE = frozenset({
    "endpoint", "format", "batch_max_messages", "batch_max_bytes", "max_in_flight", "rate_per_s",
    "timeout_ms", "key_ordered", "ack_timeout_ms", "max_deliveries", "retry_backoff_ms",
    "retry_backoff_multiplier", "retry_backoff_max_ms", "start", "headers", "filter", "secret"})


@dataclass(frozen=True, slots=True)
class Secret:
    """One signing secret: its id (shown), value (never shown) and when it stops signing."""

    id: str
    value: str
    created_at_ms: int
    expires_at_ms: int | None = None

    def live(self, at_ms: int) -> bool:
        """Whether it still signs at ``at_ms``."""
        return self.expires_at_ms is None or at_ms < self.expires_at_ms

    def view(self) -> dict[str, Any]:
        """What a reader of the definition sees of it."""
        return {"id": self.id, "created_at_ms": self.created_at_ms,
                "expires_at_ms": self.expires_at_ms}


def make_secret(value: str | None, at_ms: int) -> Secret:
    """A secret from ``value`` (a ``whsec_`` string; None: a new random one)."""
    value = value or new_secret()
    return Secret(f"s_{secret_key(value)[:4].hex()}", value, at_ms)


@dataclass(frozen=True, slots=True)
class PushDefinition:
    """How the group's endpoint is fed."""

    topic: str
    group: str
    endpoint: str
    format: str = "json"
    batch_max_messages: int = 1
    batch_max_bytes: int = 1_048_576
    max_in_flight: int = 16
    rate_per_s: float | None = None
    timeout_ms: int = 10_000
    key_ordered: bool = True
    ack_timeout_ms: int = 60_000
    max_deliveries: int = 5
    retry_backoff: RetryBackoff = DEFAULT_BACKOFF
    start: str = "latest"
    headers: Mapping[str, str] = field(default_factory=dict)
    filter: Sequence[str] = ()
    secrets: tuple[Secret, ...] = ()
    created_by: str = ""
    created_at_ms: int = 0
    updated_at_ms: int = 0
    topic_created_at_ms: int = 0
    forced_filter: Mapping[str, str] = field(default_factory=dict)

    def signing_keys(self, at_ms: int) -> list[bytes]:
        """The keys that sign a request sent at ``at_ms``, newest first."""
        live = [s for s in self.secrets if s.live(at_ms)]
        return [secret_key(s.value) for s in sorted(live, key=lambda s: -s.created_at_ms)]

    def header_filter(self) -> HeaderFilter:
        """The filter deliveries pass through: its own, ANDed with its creator's forced one."""
        return parse_filters(self.filter).and_headers(self.forced_filter)

    def group_config(self) -> GroupConfig:
        """How the hub serves the group on this gateway."""
        return GroupConfig(ack_timeout_ms=self.ack_timeout_ms, max_deliveries=self.max_deliveries,
                           filter=self.header_filter(), start=self.start, auto_ack=False,
                           exclusive=False, retry_backoff=self.retry_backoff,
                           key_ordered=self.key_ordered)

    def to_doc(self) -> dict[str, Any]:
        """The stored JSON object."""
        backoff = self.retry_backoff
        return {
            "topic": self.topic, "group": self.group, "endpoint": self.endpoint,
            "format": self.format, "batch_max_messages": self.batch_max_messages,
            "batch_max_bytes": self.batch_max_bytes, "max_in_flight": self.max_in_flight,
            "rate_per_s": self.rate_per_s, "timeout_ms": self.timeout_ms,
            "key_ordered": self.key_ordered, "ack_timeout_ms": self.ack_timeout_ms,
            "max_deliveries": self.max_deliveries, "retry_backoff_ms": backoff.initial_ms,
            "retry_backoff_multiplier": backoff.multiplier,
            "retry_backoff_max_ms": backoff.max_ms, "start": self.start,
            "headers": dict(self.headers), "filter": list(self.filter),
            "secrets": [{"id": s.id, "secret": s.value, "created_at_ms": s.created_at_ms,
                         "expires_at_ms": s.expires_at_ms} for s in self.secrets],
            "created_by": self.created_by, "created_at_ms": self.created_at_ms,
            "updated_at_ms": self.updated_at_ms, "topic_created_at_ms": self.topic_created_at_ms,
            "forced_filter": dict(self.forced_filter),
        }

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> PushDefinition:
        """The definition in a stored object (KeyError/TypeError/ValueError when it is not one)."""
        rate = doc.get("rate_per_s")
        return cls(
            topic=str(doc["topic"]), group=str(doc["group"]), endpoint=str(doc["endpoint"]),
            format=str(doc["format"]), batch_max_messages=int(doc["batch_max_messages"]),
            batch_max_bytes=int(doc["batch_max_bytes"]), max_in_flight=int(doc["max_in_flight"]),
            rate_per_s=None if rate is None else float(rate), timeout_ms=int(doc["timeout_ms"]),
            key_ordered=bool(doc["key_ordered"]), ack_timeout_ms=int(doc["ack_timeout_ms"]),
            max_deliveries=int(doc["max_deliveries"]),
            retry_backoff=RetryBackoff(int(doc["retry_backoff_ms"]),
                                       float(doc["retry_backoff_multiplier"]),
                                       int(doc["retry_backoff_max_ms"])),
            start=str(doc["start"]), headers={str(k): str(v) for k, v in doc["headers"].items()},
            filter=tuple(map(str, doc["filter"])),
            secrets=tuple(Secret(str(s["id"]), str(s["secret"]), int(s["created_at_ms"]),
                                 None if s.get("expires_at_ms") is None
                                 else int(s["expires_at_ms"])) for s in doc["secrets"]),
            created_by=str(doc.get("created_by", "")),
            created_at_ms=int(doc.get("created_at_ms", 0)),
            updated_at_ms=int(doc.get("updated_at_ms", 0)),
            topic_created_at_ms=int(doc.get("topic_created_at_ms", 0)),
            forced_filter={str(k): str(v) for k, v in doc.get("forced_filter", {}).items()},
        )

    def view(self, at_ms: int) -> dict[str, Any]:
        """What a reader sees: no secret value, no header value."""
        doc = self.to_doc()
        doc["secrets"] = [s.view() for s in self.secrets if s.live(at_ms)]
        doc["headers"] = {name: "***" for name in self.headers}
        del doc["forced_filter"]
        return doc


def parse_definition(doc: dict[str, Any], topic: str, group: str, policy: EndpointPolicy,
                     ) -> tuple[PushDefinition, str | None]:
    """The definition a PUT body asks for (no secret, no owner yet) and the secret it brings;
    422 with a pointer at the first bad field, ``push-endpoint-refused`` for a refused endpoint."""
    reject_unknown_fields(doc, SETTABLE)
    endpoint = doc.get("endpoint")
    if not isinstance(endpoint, str) or not endpoint:
        raise invalid_field("/endpoint", "'endpoint' (an https URL) is required")
    try:
        admit_endpoint(endpoint, policy)
    except EndpointRefused as exc:
        raise endpoint_refused(str(exc)) from None
    fmt = _choice(doc, "format", FORMATS, "json")
    batch = _int(doc, "batch_max_messages", 1, 1, 1000)
    if fmt == "cloudevents" and batch != 1:
        raise invalid_field("/batch_max_messages", "CloudEvents binary mode sends one message a "
                                                   "request: 'batch_max_messages' must be 1")
    timeout_ms = _int(doc, "timeout_ms", 10_000, 100, 120_000)
    ack_timeout_ms = _int(doc, "ack_timeout_ms", max(60_000, timeout_ms + 1000),
                          timeout_ms + 1000, 86_400_000)
    definition = PushDefinition(
        topic=topic, group=group, endpoint=endpoint, format=fmt, batch_max_messages=batch,
        batch_max_bytes=_int(doc, "batch_max_bytes", 1_048_576, 1024, 16_777_216),
        max_in_flight=_int(doc, "max_in_flight", 16, 1, 1000), rate_per_s=_rate(doc),
        timeout_ms=timeout_ms, key_ordered=_bool(doc, "key_ordered", True),
        ack_timeout_ms=ack_timeout_ms, max_deliveries=_int(doc, "max_deliveries", 5, 1, 1000),
        retry_backoff=_backoff(doc), start=_choice(doc, "start", ("latest", "earliest"), "latest"),
        headers=_headers(doc.get("headers")), filter=_filter(doc.get("filter")))
    return definition, _brought_secret(doc.get("secret"), "/secret")


def rotated(definition: PushDefinition, value: str | None, previous_expires_in_s: int,
            at_ms: int) -> tuple[PushDefinition, Secret]:
    """The definition signing with a new secret (``value`` or a random one) beside the newest
    current one until ``previous_expires_in_s`` from now (0: the old ones stop at once)."""
    new = make_secret(value, at_ms)
    live = sorted((s for s in definition.secrets if s.live(at_ms)), key=lambda s: -s.created_at_ms)
    kept = [] if previous_expires_in_s == 0 or not live else [
        replace(live[0], expires_at_ms=at_ms + previous_expires_in_s * 1000)]
    return replace(definition, secrets=(new, *kept), updated_at_ms=at_ms), new


def parse_rotation(doc: dict[str, Any]) -> tuple[str | None, int]:
    """The secret a rotation brings (None: make one) and how long the old one keeps signing."""
    reject_unknown_fields(doc, frozenset({"secret", "previous_expires_in_s"}))
    return (_brought_secret(doc.get("secret"), "/secret"),
            _int(doc, "previous_expires_in_s", 86_400, 0, MAX_PREVIOUS_SECRET_S))


def endpoint_refused(detail: str) -> Problem:
    """422: the endpoint is not one this gateway may call."""
    return Problem(422, "push-endpoint-refused", "Push endpoint refused", detail,
                   pointer="/endpoint")


def _brought_secret(raw: Any, pointer: str) -> str | None:
    if raw is None:
        return None
    try:
        if not isinstance(raw, str):
            raise ValueError
        secret_key(raw)
    except ValueError:
        raise invalid_field(pointer, "a secret is 'whsec_' followed by the base64 of 24 to 64 "
                                     "random bytes") from None
    return raw


def _int(doc: Mapping[str, Any], name: str, default: int, low: int, high: int) -> int:
    raw = doc.get(name, default)
    if isinstance(raw, bool) or not isinstance(raw, int) or not low <= raw <= high:
        raise invalid_field(f"/{name}", f"'{name}' must be an integer from {low} to {high}")
    return raw


def _bool(doc: Mapping[str, Any], name: str, default: bool) -> bool:
    raw = doc.get(name, default)
    if not isinstance(raw, bool):
        raise invalid_field(f"/{name}", f"'{name}' must be true or false")
    return raw


def _choice(doc: Mapping[str, Any], name: str, allowed: Sequence[str], default: str) -> str:
    raw = doc.get(name, default)
    if raw not in allowed:
        raise invalid_field(f"/{name}", f"'{name}' must be one of {', '.join(allowed)}")
    return str(raw)


def _rate(doc: Mapping[str, Any]) -> float | None:
    raw = doc.get("rate_per_s")
    if raw is None:
        return None
    if isinstance(raw, bool) or not isinstance(raw, int | float) or not 0 < raw <= 100_000:
        raise invalid_field("/rate_per_s", "'rate_per_s' must be null or a number above 0 and "
                                           "at most 100000")
    return float(raw)


def _backoff(doc: Mapping[str, Any]) -> RetryBackoff:
    given = {name: doc[name] for name in ("retry_backoff_ms", "retry_backoff_multiplier",
                                          "retry_backoff_max_ms") if name in doc}
    return parse_retry_backoff({"retry_backoff_ms": 1000, "retry_backoff_max_ms": 60_000,
                                **given})


def _headers(raw: Any) -> dict[str, str]:
    if raw is None:
        return {}
    if not isinstance(raw, dict) or len(raw) > MAX_HEADERS:
        raise invalid_field("/headers", f"'headers' must be an object of at most {MAX_HEADERS} "
                                        "header names to string values")
    for name, value in raw.items():
        pointer = f"/headers/{name.replace('~', '~0').replace('/', '~1')}"
        if not HEADER_NAME.fullmatch(name) or name.lower() in RESERVED_HEADERS \
                or name.lower().startswith(("ce-", "streamgate-")):
            raise invalid_field(pointer, "a header name must be a token the gateway does not "
                                         "set itself (no Host, Content-*, webhook-*, ce-*, ...)")
        if not isinstance(value, str) or len(value) > MAX_HEADER_VALUE \
                or any((ord(c) < 32 and c != "\t") or ord(c) == 127 for c in value):
            raise invalid_field(pointer, f"a header value must be a string of at most "
                                         f"{MAX_HEADER_VALUE} characters with no control "
                                         "character")
    return dict(raw)


def _filter(raw: Any) -> tuple[str, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list) or not all(isinstance(item, str) for item in raw):
        raise invalid_field("/filter", "'filter' must be a list of '<header>:<value>[,...]'")
    parse_filters(raw)
    return tuple(raw)
