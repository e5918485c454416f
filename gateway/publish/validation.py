"""Parsing and limits for publish bodies, all in one place.

The whole batch is validated before anything is written: a rejected batch writes nothing.
Errors carry an RFC 6901 pointer to the offending field.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import time
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeVar

import orjson

from gateway._speedups import parse_plain, scan_plain_body
from gateway.delivery.expiry import EXPIRES_AT
from gateway.errors import bad_request, invalid_field, too_large
from gateway.observe.tracing import TRACEPARENT, TRACESTATE
from gateway.offsets import parse_offset
from gateway.publish.headers import check_trace_context, parse_headers, pointer_token
from gateway.settings import GatewaySettings
from storage.models import NO_MESSAGE, ValueFormat

ACKS_VALUES = ("0", "1", "all")
BODY_FIELDS = frozenset({"messages", "acks", "expected_last_offset"})
MESSAGE_FIELDS = frozenset({"key", "value", "value_b64", "headers", "partition", "idempotency_key",
                            "delay_ms", "deliver_at_ms", "expected_offset", "ttl_ms"})
MAX_DELAY_MS = 366 * 24 * 3600 * 1000
MAX_IDEMPOTENCY_KEY_CHARS = 256
MAX_EPOCH_DIGITS = 16
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class PublishLimits:
    """Size limits for one publish request."""

    max_value_bytes: int
    max_key_bytes: int
    max_headers: int
    max_header_bytes: int
    max_batch_messages: int
    max_batch_bytes: int

    @classmethod
    def from_settings(cls, settings: GatewaySettings) -> PublishLimits:
        """The publish slice of the gateway settings."""
        return cls(settings.max_value_bytes, settings.max_key_bytes, settings.max_headers,
                   settings.max_header_bytes, settings.max_batch_messages, settings.max_batch_bytes)


class IncomingMessage(NamedTuple):
    """One validated message of a general body, before the batch turns into columns."""

    value: bytes
    value_format: ValueFormat
    key: bytes | None
    headers: dict[str, str]
    partition: int | None
    idempotency_key: str | None
    due_ms: int | None = None  # delayed/scheduled: when the message joins the stream (epoch ms)
    expected_offset: str | None = None  # the key's newest retained offset, or NO_MESSAGE


# Not frozen: it is built on every publish, where a frozen __init__ costs several times more.
@dataclass(slots=True)
class PublishBatch:
    """A validated publish request, as columns: message ``i`` is ``keys[i]`` and ``values[i]`` (the
    value as stored), in ``formats`` (one for all or one each). The optional columns are None when
    no message has one (the common publish): ``headers``, explicit ``partitions``,
    ``idempotency_keys`` and ``due_ms`` (when a delayed message joins the stream, epoch ms)."""

    acks: str
    keys: list[bytes | None]
    values: list[bytes]
    value_bytes: int
    formats: ValueFormat | list[ValueFormat] = ValueFormat.JSON
    headers: list[dict[str, str]] | None = None
    partitions: list[int | None] | None = None
    idempotency_keys: list[str | None] | None = None
    due_ms: list[int | None] | None = None
    batch_key: str | None = None  # a plain batch's Idempotency-Key: the batch is idempotent whole
    # a conditional append: per message its key's expected offset, the partition's last offset
    expected_offsets: list[str | None] | None = None
    expected_last_offset: str | None = None

    @property
    def conditional(self) -> bool:
        """Whether the batch expects positions (written only if they hold)."""
        return self.expected_offsets is not None or self.expected_last_offset is not None

    def __len__(self) -> int:
        return len(self.values)

    def with_headers(self) -> PublishBatch:
        """The batch with a headers column to fill (empty headers where it had none)."""
        if self.headers is not None:
            return self
        return dataclasses.replace(self, headers=[{} for _ in self.values])


def _columns(acks: str, messages: list[IncomingMessage]) -> PublishBatch:
    """Parsed messages as a batch's columns (an optional column only where some message has it)."""
    values, formats, keys, headers, partitions, idempotency_keys, due_ms, expected = map(
        list, zip(*messages, strict=True))
    return PublishBatch(acks, keys, values, sum(map(len, values)),
                        ValueFormat.JSON if formats.count(ValueFormat.JSON) == len(formats)
                        else formats,
                        headers if any(headers) else None, _unless_none(partitions),
                        _unless_none(idempotency_keys), _unless_none(due_ms),
                        expected_offsets=_unless_none(expected))


def _unless_none(column: list[T | None]) -> list[T | None] | None:
    return None if column.count(None) == len(column) else column


def _plain_batch(acks: str, keys: list[bytes | None], values: list[bytes], value_bytes: int,
                 idempotency_header: str | None) -> PublishBatch:
    """A batch of plain messages (a value and maybe a key), idempotent as a whole under the
    ``Idempotency-Key`` header when given one."""
    return PublishBatch(acks, keys, values, value_bytes, batch_key=idempotency_header)


def decode_json_object(body: bytes, max_bytes: int) -> dict[str, Any]:
    """A request body as a JSON object: 413 over ``max_bytes``, 400 if not JSON, 422 if not an
    object."""
    if len(body) > max_bytes:
        raise too_large(f"body of {len(body)} bytes is over the limit of {max_bytes}")
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise bad_request(f"body is not valid JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise invalid_field("", "body must be a JSON object")
    return doc


def reject_unknown_fields(doc: dict[str, Any], allowed: frozenset[str], prefix: str = "") -> None:
    """422 naming the first field that is not in ``allowed``."""
    unknown = sorted(doc.keys() - allowed)
    if unknown:
        raise invalid_field(f"{prefix}/{pointer_token(unknown[0])}",
                            f"unknown field {unknown[0]!r}")


def parse_publish_body(body: bytes, limits: PublishLimits,
                       idempotency_header: str | None) -> PublishBatch:
    """Parse and validate a publish body; raises ``Problem`` (400/413/422) on the first bad field.

    A plain body (each message a value and maybe a key) is read straight from its bytes by
    ``scan_plain_body``, or else, once parsed, by ``parse_plain``; anything else, or any plain
    message over a limit, message by message, which explains every rejection (the scanner answers
    None whenever it is not sure). All three give the same columns.
    """
    if len(body) <= limits.max_batch_bytes:  # an oversized body is a 413 first
        scanned = scan_plain_body(body, limits.max_batch_messages, limits.max_key_bytes,
                                  limits.max_value_bytes, orjson.loads, orjson.dumps)
        if scanned is not None:
            return _plain_batch(*scanned, idempotency_header)
    doc = decode_json_object(body, limits.max_batch_bytes)
    reject_unknown_fields(doc, BODY_FIELDS)
    return parse_publish_doc(doc, limits, idempotency_header)


def parse_publish_doc(doc: dict[str, Any], limits: PublishLimits,
                      idempotency_header: str | None) -> PublishBatch:
    """Validate a publish body already parsed (its fields checked by the caller) as
    ``parse_publish_body`` does."""
    acks = _parse_acks(doc.get("acks", "1"))
    raw_messages = doc.get("messages")
    if not isinstance(raw_messages, list) or not raw_messages:
        raise invalid_field("/messages", "'messages' must be a non-empty array")
    if len(raw_messages) > limits.max_batch_messages:
        raise too_large(f"batch of {len(raw_messages)} messages is over the limit of "
                        f"{limits.max_batch_messages}", pointer="/messages")
    expected_last = doc.get("expected_last_offset")
    plain = _parse_plain_or_none(raw_messages, limits)
    if plain is not None:
        batch = _plain_batch(acks, *plain, idempotency_header)
    else:
        now_ms = int(time.time() * 1000)
        batch = _columns(acks, [_parse_message(raw, index, limits, idempotency_header, now_ms)
                                for index, raw in enumerate(raw_messages)])
    if expected_last is not None:
        batch.expected_last_offset = parse_expected(expected_last, "/expected_last_offset")
    if batch.conditional:
        check_conditional(batch)
    return batch


def parse_expected(raw: Any, pointer: str) -> str:
    """An expected position: ``"none"`` (no message) or an offset, in canonical form."""
    if raw == NO_MESSAGE:
        return NO_MESSAGE
    if not isinstance(raw, str):
        raise invalid_field(pointer, "an expected offset must be a string: an offset or 'none'")
    ms, seq = parse_offset(raw, pointer)
    return f"{ms}-{seq}"


def check_conditional(batch: PublishBatch) -> None:
    """422 unless a conditional batch can be checked: written at once with an answer (acks 1 or
    all, nothing delayed), each key's expectation on its first message in the request."""
    if batch.acks == "0":
        raise invalid_field("/acks", "a conditional append needs acks \"1\" or \"all\": "
                                     "its answer may be a conflict")
    if batch.due_ms is not None:
        index = next(i for i, due in enumerate(batch.due_ms) if due is not None)
        raise invalid_field(f"/messages/{index}", "a conditional append cannot be delayed")
    seen: set[bytes] = set()
    for index, (key, expected) in enumerate(zip(batch.keys, batch.expected_offsets
                                                or [None] * len(batch), strict=True)):
        if expected is not None and (key is None or key in seen):
            raise invalid_field(f"/messages/{index}/expected_offset",
                                "'expected_offset' needs a key, on the key's first message in "
                                "the request (its later messages follow it)")
        if key is not None:
            seen.add(key)


def _parse_plain_or_none(
    raw_messages: list[Any], limits: PublishLimits
) -> tuple[list[bytes | None], list[bytes], int] | None:
    try:
        return parse_plain(raw_messages, limits.max_key_bytes, limits.max_value_bytes, orjson.dumps)
    except orjson.JSONEncodeError:
        # a value orjson parsed but cannot write back: the general path names it
        return None


def json_value_bytes(value: Any) -> bytes:
    """A message's JSON value as stored: ``orjson.dumps`` copied to an exact-size ``bytes``.

    orjson's result keeps its growth buffer, so a small value holds several times its size in RSS,
    and values wait in the acks=0 queue (bounded in batches, not bytes) and in scheduled writes. The
    join copies it to its own size, far cheaper than the memory it frees.
    """
    return b"".join((orjson.dumps(value), b""))


def _parse_acks(raw: Any) -> str:
    text = str(raw) if isinstance(raw, int) and not isinstance(raw, bool) else raw
    if text not in ACKS_VALUES:
        raise invalid_field("/acks", "'acks' must be one of \"0\", \"1\", \"all\"")
    return str(text)


def _parse_message(raw: Any, index: int, limits: PublishLimits, idem_header: str | None,
                   now_ms: int) -> IncomingMessage:
    pointer = f"/messages/{index}"
    if not isinstance(raw, dict):
        raise invalid_field(pointer, "each message must be a JSON object")
    if not raw.keys() <= MESSAGE_FIELDS:
        # the subset test is the per-message hot path; the error needs more
        reject_unknown_fields(raw, MESSAGE_FIELDS, pointer)
    value, value_format = _parse_value(raw, pointer, limits)
    idempotency_key = _parse_idempotency_key(raw.get("idempotency_key"), pointer)
    if idempotency_key is None and idem_header is not None:
        idempotency_key = f"{idem_header}:{index}"
    has_due = "delay_ms" in raw or "deliver_at_ms" in raw
    due_ms = _parse_due(raw, pointer, now_ms) if has_due else None
    headers = parse_headers(raw.get("headers"), pointer, limits)
    if "ttl_ms" in raw or EXPIRES_AT in headers:
        headers = _with_expiry(raw, headers, pointer, due_ms or now_ms)
    if TRACEPARENT in headers or TRACESTATE in headers:
        check_trace_context(headers, pointer)
    return IncomingMessage(
        value,
        value_format,
        _parse_key(raw.get("key"), pointer, limits),
        headers,
        _parse_partition(raw.get("partition"), pointer),
        idempotency_key,
        due_ms,
        (None if (expected := raw.get("expected_offset")) is None
         else parse_expected(expected, f"{pointer}/expected_offset")),
    )


def _with_expiry(raw: dict[str, Any], headers: dict[str, str], pointer: str,
                 start_ms: int) -> dict[str, str]:
    """The headers with the expiry a ``ttl_ms`` sets (counted from when the message joins its
    stream), or with an ``sg-expires-at`` header checked as epoch ms."""
    ttl = raw.get("ttl_ms")
    if ttl is None:
        given = headers[EXPIRES_AT]
        if not (given.isascii() and given.isdigit() and len(given) <= MAX_EPOCH_DIGITS):
            raise invalid_field(f"{pointer}/headers/{EXPIRES_AT}",
                                f"'{EXPIRES_AT}' must be epoch milliseconds (digits only)")
        return headers
    if EXPIRES_AT in headers:
        raise invalid_field(f"{pointer}/ttl_ms",
                            f"give at most one of 'ttl_ms' and the '{EXPIRES_AT}' header")
    if not isinstance(ttl, int) or isinstance(ttl, bool) or not 1 <= ttl <= MAX_DELAY_MS:
        raise invalid_field(f"{pointer}/ttl_ms",
                            f"'ttl_ms' must be an integer from 1 to {MAX_DELAY_MS}")
    return {**headers, EXPIRES_AT: str(start_ms + ttl)}


def _parse_due(raw: dict[str, Any], pointer: str, now_ms: int) -> int | None:
    """``delay_ms`` or ``deliver_at_ms`` -> the due time; None when the message is due now."""
    delay, at = raw.get("delay_ms"), raw.get("deliver_at_ms")
    if delay is not None and at is not None:
        raise invalid_field(pointer, "give at most one of 'delay_ms' and 'deliver_at_ms'")
    if delay is not None:
        if not isinstance(delay, int) or isinstance(delay, bool) or not 0 <= delay <= MAX_DELAY_MS:
            raise invalid_field(f"{pointer}/delay_ms",
                                f"'delay_ms' must be an integer from 0 to {MAX_DELAY_MS}")
        return now_ms + delay if delay > 0 else None
    if at is not None:
        if not isinstance(at, int) or isinstance(at, bool) or not 0 <= at <= now_ms + MAX_DELAY_MS:
            raise invalid_field(f"{pointer}/deliver_at_ms",
                                "'deliver_at_ms' must be epoch milliseconds at most a year ahead")
        return at if at > now_ms else None
    return None


def _parse_value(raw: dict[str, Any], pointer: str,
                 limits: PublishLimits) -> tuple[bytes, ValueFormat]:
    has_value, has_b64 = "value" in raw, "value_b64" in raw
    if has_value == has_b64:
        raise invalid_field(pointer, "exactly one of 'value' and 'value_b64' is required")
    if has_value:
        value, value_format = _json_value(raw["value"], f"{pointer}/value"), ValueFormat.JSON
    else:
        value, value_format = (_decode_b64(raw["value_b64"], f"{pointer}/value_b64"),
                               ValueFormat.BINARY)
    if len(value) > limits.max_value_bytes:
        field = "value" if has_value else "value_b64"
        raise too_large(f"value of {len(value)} bytes is over the limit of "
                        f"{limits.max_value_bytes}", pointer=f"{pointer}/{field}")
    return value, value_format


def _json_value(value: Any, pointer: str) -> bytes:
    try:
        return json_value_bytes(value)
    except orjson.JSONEncodeError as exc:
        # orjson reads deeper nesting than it writes: refuse what it cannot store
        raise invalid_field(pointer, f"'value' cannot be stored as JSON ({exc}): nest it less "
                                     "deeply") from None


def _decode_b64(raw: Any, pointer: str) -> bytes:
    if not isinstance(raw, str):
        raise invalid_field(pointer, "'value_b64' must be a base64 string")
    try:
        return base64.b64decode(raw, validate=True)
    except (binascii.Error, ValueError):
        raise invalid_field(pointer, "'value_b64' is not valid base64") from None


def _parse_key(raw: Any, pointer: str, limits: PublishLimits) -> bytes | None:
    if raw is None:
        return None
    if not isinstance(raw, str):
        raise invalid_field(f"{pointer}/key", "'key' must be a string")
    key = raw.encode()
    if len(key) > limits.max_key_bytes:
        raise too_large(f"key of {len(key)} bytes is over the limit of {limits.max_key_bytes}",
                        pointer=f"{pointer}/key")
    return key


def _parse_partition(raw: Any, pointer: str) -> int | None:
    if raw is None:
        return None
    if not isinstance(raw, int) or isinstance(raw, bool) or raw < 0:
        raise invalid_field(f"{pointer}/partition", "'partition' must be a non-negative integer")
    return raw


def _parse_idempotency_key(raw: Any, pointer: str) -> str | None:
    if raw is None:
        return None
    if not isinstance(raw, str) or not 1 <= len(raw) <= MAX_IDEMPOTENCY_KEY_CHARS:
        raise invalid_field(f"{pointer}/idempotency_key",
                            "'idempotency_key' must be a string of 1 to "
                            f"{MAX_IDEMPOTENCY_KEY_CHARS} characters")
    return raw
