"""The plain publish's codec: a plain body or batch of plain messages to columns, their offsets to
the response.

A plain message is a JSON object with a ``value`` (any JSON) and an optional string ``key``, nothing
else: the common publish, which skips the per-message objects of the general path
(``gateway.publish.validation``). ``scan_plain_body`` reads a whole plain body (any acks) from its
bytes in one pass, without parsing it into objects: values that orjson would write back unchanged
are copied from the body (strings without escapes, literals, integers of up to 15 digits but -0,
floats in orjson's form: ``-?I.F`` without exponent, F "0" or ending in a non-zero digit, at most 15
significant digits, 1e-5 <= |x| < 1e16 or 0; and objects and arrays of such values written
compactly, as orjson writes them: no whitespace inside, names without escapes, no name twice in one
object, at most 32 members each), others re-encoded with ``dumps(loads(span))``; whatever it cannot
prove plain and valid (bad JSON or UTF-8, escapes in keys or field names, limits, other fields...)
gives None, and the general path decides. ``parse_plain`` turns already-parsed messages into
columns. All three functions are compiled in ``gateway.publish._plain`` (built by setup.py; the
Python ones here are the references: tests/unit/gateway/
test_plain_codec.py and test_plain_scan.py pin each to its reference and to the general path, and
fail when a compiled one is missing).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from gateway.native import refuse_if_off

__all__ = ["NATIVE", "PLAIN_BODY_FIELDS", "PLAIN_MESSAGE_FIELDS", "parse_plain",
           "parse_plain_python", "plain_results_json", "plain_results_json_python",
           "scan_plain_body", "scan_plain_body_python"]

PLAIN_BODY_FIELDS = frozenset({"acks", "messages"})
PLAIN_MESSAGE_FIELDS = frozenset({"key", "value"})
PLAIN_ACKS = ("0", "1", "all")

PlainColumns = tuple[str, list[bytes | None], list[bytes], int]


def parse_plain_python(
    raw_messages: list[Any], max_key_bytes: int, max_value_bytes: int, dumps: Callable[[Any], bytes]
) -> tuple[list[bytes | None], list[bytes], int] | None:
    """Keys, values (as stored) and the values' total size of plain messages; None if any is not
    plain or is over a limit. The reference of the compiled ``parse_plain``
    (``gateway.publish._plain``); ``dumps`` is ``orjson.dumps`` (what a value is stored as, copied
    to its own size like ``json_value_bytes``)."""
    keys: list[bytes | None] = []
    values: list[bytes] = []
    size = 0
    plain_fields = PLAIN_MESSAGE_FIELDS
    for raw in raw_messages:
        if type(raw) is not dict or "value" not in raw or not raw.keys() <= plain_fields:
            return None
        key = raw.get("key")
        if key is not None:
            if type(key) is not str:
                return None
            key = key.encode()
            if len(key) > max_key_bytes:
                return None
        value = b"".join((dumps(raw["value"]), b""))
        if len(value) > max_value_bytes:
            return None
        keys.append(key)
        values.append(value)
        size += len(value)
    return keys, values, size


def scan_plain_body_python(body: bytes, max_batch_messages: int, max_key_bytes: int,
                           max_value_bytes: int, loads: Callable[[bytes], Any],
                           dumps: Callable[[Any], bytes], /) -> PlainColumns | None:
    """``(acks, keys, values, value_bytes)`` of a plain publish body: acks 0, 1 or all and 1 to
    ``max_batch_messages`` plain messages within the limits; None for anything else
    (``parse_publish_body``'s general path then decides, errors included). The reference of the
    compiled ``scan_plain_body``, which reads the bytes without ``loads``."""
    try:
        doc = loads(body)
        acks = _plain_acks(doc)
        messages = doc["messages"] if acks is not None else None
        if type(messages) is not list or not 1 <= len(messages) <= max_batch_messages:
            return None
        plain = parse_plain_python(messages, max_key_bytes, max_value_bytes, dumps)
    except (ValueError, TypeError):
        # orjson's JSONDecodeError and JSONEncodeError: the general path fails too
        return None
    return None if plain is None or acks is None else (acks, *plain)


def _plain_acks(doc: Any) -> str | None:
    """A plain body's acks ("1" when absent), None if the body is not a plain one's object or acks
    is not one."""
    if type(doc) is not dict or not doc.keys() <= PLAIN_BODY_FIELDS or "messages" not in doc:
        return None
    acks = doc.get("acks", "1")
    acks = str(acks) if type(acks) is int else acks  # bool is not an int here
    return acks if acks in PLAIN_ACKS else None


def plain_results_json_python(partitions: list[int], offsets: list[str]) -> bytes:
    """The publish response of plain messages: ``{"results": [{"partition", "offset",
    "duplicate"}...]}``, as orjson writes it. The reference of the compiled
    ``plain_results_json``."""
    return orjson.dumps({"results": [
        {"partition": partition, "offset": offset, "duplicate": False}
        for partition, offset in zip(partitions, offsets, strict=True)]})


try:
    refuse_if_off()
    from gateway.publish import _plain
except ImportError:  # built without a C compiler: the reference, same results
    NATIVE = False
    parse_plain: Callable[[list[Any], int, int, Callable[[Any], bytes]],
                          tuple[list[bytes | None], list[bytes], int] | None] = parse_plain_python
    plain_results_json: Callable[[list[int], list[str]], bytes] = plain_results_json_python
    scan_plain_body: Callable[[bytes, int, int, int, Callable[[bytes], Any],
                               Callable[[Any], bytes]],
                              PlainColumns | None] = scan_plain_body_python
else:
    NATIVE = True
    parse_plain = _plain.parse_plain
    plain_results_json = _plain.plain_results_json
    # A module built before the scanner still loads (test_plain_scan.py fails until it is rebuilt).
    scan_plain_body = getattr(_plain, "scan_plain_body", scan_plain_body_python)
