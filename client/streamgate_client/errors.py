"""Errors raised by the Python client: one base, a few leaves with typed fields and a ``retriable``
flag."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson

RETRIABLE_STATUSES = frozenset({408, 429, 500, 502, 503, 504})


class ClientError(Exception):
    """Base of every error the streamgate client raises."""

    retriable = False


class ProblemError(ClientError):
    """The gateway answered with an RFC 9457 problem document (or a bare HTTP error status)."""

    def __init__(
        self, status: int, document: dict[str, Any], retry_after_s: float | None = None
    ) -> None:
        self.status = status
        self.document = document
        self.type: str = str(document.get("type", "about:blank"))
        self.title: str = str(document.get("title", ""))
        self.detail: str = str(document.get("detail", self.title or f"HTTP {status}"))
        self.pointer: str | None = document.get("pointer")
        self.retry_after_s = retry_after_s
        self.retriable = status in RETRIABLE_STATUSES
        super().__init__(self.describe())

    def describe(self) -> str:
        """One human line: status, title, detail and the offending field if any."""
        where = f" (at {self.pointer})" if self.pointer else ""
        title = f" {self.title}" if self.title else ""
        return f"{self.status}{title}: {self.detail}{where}"


class UnexpectedOffset(ProblemError):
    """409: a conditional append's expectation did not hold and nothing was written. ``index`` is
    the message whose key moved (None: the partition's last offset); ``current`` is the position
    to read from and decide again."""

    def __init__(self, status: int, document: dict[str, Any],
                 retry_after_s: float | None = None) -> None:
        super().__init__(status, document, retry_after_s)
        index = document.get("index")
        self.index: int | None = index if isinstance(index, int) else None
        self.partition: int | None = document.get("partition")
        self.expected = str(document.get("expected", ""))
        self.current = str(document.get("current", ""))


@dataclass(frozen=True, slots=True)
class SchemaChange:
    """One change that made a schema incompatible: where in the new schema (a JSON pointer), its
    name (``required_added``, ``type_narrowed``, ...) and a human line."""

    path: str
    change: str
    detail: str


class SchemaIncompatible(ProblemError):
    """409: a schema was refused by its compatibility mode; ``changes`` names each change."""

    def __init__(self, status: int, document: dict[str, Any],
                 retry_after_s: float | None = None) -> None:
        # before the base's __init__, whose message (``describe``) lists them
        self.compatibility = str(document.get("compatibility", ""))
        self.changes: tuple[SchemaChange, ...] = tuple(
            SchemaChange(str(c.get("path", "")), str(c.get("change", "")),
                         str(c.get("detail", "")))
            for c in document.get("changes") or () if isinstance(c, dict))
        super().__init__(status, document, retry_after_s)

    def describe(self) -> str:
        """The problem's line, then each change on a line of its own."""
        return "\n".join([super().describe(), *(f"  {c.path}: {c.change}: {c.detail}"
                                                 for c in self.changes)])


class SchemaMismatch(ProblemError):
    """422: a published message did not match its topic's schema and nothing of the batch was
    written; ``pointer`` is the failing place (``/messages/3/value/total``)."""

    def __init__(self, status: int, document: dict[str, Any],
                 retry_after_s: float | None = None) -> None:
        super().__init__(status, document, retry_after_s)
        version = document.get("schema_version")
        self.schema_version: int | None = version if isinstance(version, int) else None
        self.schema_error = str(document.get("schema_error", ""))


class DecodeFailed(ClientError):
    """A message's value did not decode into the type asked for (``decode_as``): names the
    message's place and why, never a silent None."""

    def __init__(self, topic: str, partition: int, offset: str, target: str,
                 reason: str) -> None:
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.target = target
        self.reason = reason
        super().__init__(f"{topic} partition {partition} offset {offset}: "
                         f"the value is not a {target}: {reason}")


class ConnectionFailed(ClientError):
    """The gateway could not be reached, or did not answer in time, after every retry."""

    retriable = True


class SubscriptionClosed(ClientError):
    """The gateway ended a subscription for a reason a reconnect cannot fix (credentials refused or
    expired, not permitted, topic deleted, group conflict)."""

    def __init__(self, code: int, reason: str) -> None:
        self.code = code
        self.reason = reason
        super().__init__(f"subscription closed with {code}: {reason or 'no reason given'}")


# the problems with a typed leaf: (status, the last segment of the problem type)
PROBLEM_KINDS: dict[tuple[int, str], type[ProblemError]] = {
    (409, "unexpected-offset"): UnexpectedOffset,
    (409, "schema-incompatible"): SchemaIncompatible,
    (422, "schema-mismatch"): SchemaMismatch,
}


def retry_after_of(headers: Any) -> float | None:
    """``Retry-After`` in seconds (the delta-seconds form; an HTTP date is ignored)."""
    raw = headers.get("Retry-After") if headers is not None else None
    if raw is None:
        return None
    try:
        return max(0.0, float(raw))
    except ValueError:
        return None


def problem_of(status: int, body: bytes, headers: Any = None) -> ProblemError:
    """Build the typed error for an error response; a body that is not a problem document still
    works."""
    try:
        document = orjson.loads(body) if body else {}
    except orjson.JSONDecodeError:
        document = {}
    if not isinstance(document, dict):
        document = {}
    if not document:
        document = {
            "status": status,
            "detail": body.decode(errors="replace")[:500] or f"HTTP {status}",
        }
    kind = PROBLEM_KINDS.get((status, str(document.get("type", "")).rsplit("/", 1)[-1]))
    return (kind or ProblemError)(status, document, retry_after_of(headers))


async def request_body(session: aiohttp.ClientSession, method: str, url: str,
                       **options: Any) -> bytes:
    """One request's response body: ``ProblemError`` for a 4xx/5xx answer, ``ConnectionFailed``
    when the server cannot be reached or the answer breaks off."""
    try:
        async with session.request(method, url, **options) as response:
            payload = await response.read()
            if response.status >= 400:
                raise problem_of(response.status, payload, response.headers)
            return payload
    except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError, TimeoutError) as exc:
        raise ConnectionFailed(f"{method} {url}: {type(exc).__name__}: {exc}") from exc


async def raise_for_problem(response: aiohttp.ClientResponse) -> None:
    """Raise ``ProblemError`` for a 4xx/5xx response (reading its body); do nothing otherwise."""
    if response.status < 400:
        return
    raise problem_of(response.status, await response.read(), response.headers)
