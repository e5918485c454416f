"""Messages as the publish API takes them (one JSON object each) and results as it answers them."""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import orjson

Acks = Literal["0", "1", "all"]
MISSING: Any = object()  # no ``value`` given (``None`` is a value: JSON null)
_dumps = orjson.dumps


@dataclass(slots=True)
class SendResult:
    """Where a message was written. With ``acks="0"`` the gateway only queues it: partition and
    offset are None."""

    partition: int | None
    offset: str | None
    duplicate: bool = False


def encode_message(value: Any = MISSING, *, value_b64: bytes | str | None = None,
                   key: str | None = None, headers: Mapping[str, str] | None = None,
                   partition: int | None = None, expected_offset: str | None = None,
                   ttl_ms: int | None = None) -> bytes:
    """One message of a publish body as JSON; ``bytes`` values go as ``value_b64``."""
    if (value_b64 is None and headers is None and partition is None and value is not MISSING
            and expected_offset is None and ttl_ms is None
            and not isinstance(value, bytes | bytearray)):
        return _dumps({"value": value} if key is None else {"key": key, "value": value})
    doc: dict[str, Any] = {}
    if isinstance(value, bytes | bytearray):
        value, value_b64 = MISSING, bytes(value)
    if (value is MISSING) == (value_b64 is None):
        raise ValueError("give exactly one of value and value_b64")
    if value_b64 is not None:
        doc["value_b64"] = (
            value_b64 if isinstance(value_b64, str) else base64.b64encode(value_b64).decode()
        )
    else:
        doc["value"] = value
    for name, item in (("key", key), ("headers", dict(headers) if headers else None),
                       ("partition", partition), ("expected_offset", expected_offset),
                       ("ttl_ms", ttl_ms)):
        if item is not None:
            doc[name] = item
    return _dumps(doc)


def encode_mapping(message: Mapping[str, Any], *, conditional: bool = False) -> bytes:
    """``encode_message`` of a dict of its arguments: ``send_many``'s items (with ``ttl_ms``) or
    a conditional append's (with ``expected_offset``)."""
    get = message.get
    return encode_message(get("value", MISSING), value_b64=get("value_b64"), key=get("key"),
                          headers=get("headers"), partition=get("partition"),
                          ttl_ms=None if conditional else get("ttl_ms"),
                          expected_offset=get("expected_offset") if conditional else None)


def body_head(acks: Acks) -> bytes:
    """A publish body up to its first message: ``+ b",".join(messages) + b"]}"`` completes it."""
    return b'{"acks":"' + acks.encode() + b'","messages":['


def results_of(answer: dict[str, Any] | None, count: int) -> list[SendResult]:
    """The results of an answered batch of ``count`` messages (None: acks=0, nothing to read)."""
    if answer is None:
        return [SendResult(None, None) for _ in range(count)]
    return [SendResult(r["partition"], r["offset"], r["duplicate"]) for r in answer["results"]]
