"""A publish's message headers: their types, the names reserved to the gateway, the W3C trace
context a message carries, and the header limits, as parsed and as stored."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gateway.errors import invalid_field, too_large
from gateway.observe.tracing import (
    MAX_TRACESTATE_CHARS,
    TRACEPARENT,
    TRACESTATE,
    valid_traceparent,
    valid_tracestate,
)

if TYPE_CHECKING:
    from gateway.publish.validation import PublishBatch, PublishLimits

# the dead letters' own headers (gateway.delivery.dead_letters): a publisher may not forge them
DLQ_HEADER_PREFIX = "sg-dlq-"
RESERVED_PREFIX_CHARS = len(DLQ_HEADER_PREFIX)
# the schema version a validated message was checked against (gateway.schemas.validation)
SCHEMA_VERSION_HEADER = "sg-schema-version"
STORED_HEADERS = "headers as stored (with the expiry, forced headers and request's trace context)"


def parse_headers(raw: Any, pointer: str, limits: PublishLimits) -> dict[str, str]:
    """A message's ``headers``: strings, none of the gateway's own (the dead letters', the schema
    version), within the limits."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise invalid_field(f"{pointer}/headers", "'headers' must be an object of strings")
    if len(raw) <= limits.max_headers:  # too many: refused before a pass over them
        for name, value in raw.items():
            if not isinstance(value, str):
                raise invalid_field(f"{pointer}/headers/{pointer_token(name)}",
                                    "header values must be strings")
            if name[:RESERVED_PREFIX_CHARS].lower() == DLQ_HEADER_PREFIX:
                raise invalid_field(f"{pointer}/headers/{pointer_token(name)}",
                                    f"'{DLQ_HEADER_PREFIX}*' headers are the gateway's own: only "
                                    "its dead letters carry them")
            if name.lower() == SCHEMA_VERSION_HEADER:
                raise invalid_field(f"{pointer}/headers/{pointer_token(name)}",
                                    f"'{SCHEMA_VERSION_HEADER}' is the gateway's own: it stamps "
                                    "the schema version a message was checked against")
    header_size(raw, f"{pointer}/headers", limits)
    return raw


def header_size(headers: dict[str, str], pointer: str, limits: PublishLimits,
                what: str = "headers") -> int:
    """A message's header bytes (UTF-8 names and values, as stored: "é" counts 2 and an emoji 4;
    JSON strings never hold lone surrogates); 413 over the count or the byte limit."""
    if len(headers) > limits.max_headers:
        raise too_large(f"{len(headers)} {what} is over the limit of {limits.max_headers}",
                        pointer=pointer)
    size = sum(len(name.encode()) + len(value.encode()) for name, value in headers.items())
    if size > limits.max_header_bytes:
        raise too_large(f"{what} of {size} bytes are over the limit of "
                        f"{limits.max_header_bytes}", pointer=pointer)
    return size


def stored_header_bytes(batch: PublishBatch, limits: PublishLimits) -> int:
    """The batch's header bytes as stored, with what the gateway added after parsing (forced
    headers, the request's trace context): 413 for a message they take over a limit."""
    if batch.headers is None:
        return 0
    total = size = 0
    previous = None
    for index, headers in enumerate(batch.headers):
        if headers is not previous:  # the request's context alone is one object for every message
            size = header_size(headers, f"/messages/{index}/headers", limits, STORED_HEADERS)
            previous = headers
        total += size
    return total


def check_trace_context(headers: dict[str, str], pointer: str) -> None:
    """422 unless a message's own ``traceparent`` (and ``tracestate``) are W3C trace context. A
    ``tracestate`` alone is refused: it belongs to a traceparent, and the request's would be put
    beside it."""
    if TRACEPARENT not in headers:
        raise invalid_field(f"{pointer}/headers/{TRACESTATE}",
                            "'tracestate' needs the message's own 'traceparent' beside it")
    if not valid_traceparent(headers[TRACEPARENT]):
        raise invalid_field(f"{pointer}/headers/{TRACEPARENT}",
                            "'traceparent' must be W3C trace context: "
                            "00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>, ids not zero")
    if TRACESTATE in headers and not valid_tracestate(headers[TRACESTATE]):
        raise invalid_field(f"{pointer}/headers/{TRACESTATE}",
                            f"'tracestate' must be printable ASCII of at most "
                            f"{MAX_TRACESTATE_CHARS} characters")


def pointer_token(name: str) -> str:
    """Escape a JSON pointer reference token (RFC 6901)."""
    return name.replace("~", "~0").replace("/", "~1")
