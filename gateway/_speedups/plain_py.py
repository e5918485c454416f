"""The plain publish's codec in Python, the reference of the compiled ``_plain``: a plain body or
batch of plain messages ({"value": any JSON, "key": optional string}, nothing else) to columns,
their offsets to the response (test_plain_codec.py, test_plain_scan.py pin the two together)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

__all__ = ["PLAIN_BODY_FIELDS", "PLAIN_MESSAGE_FIELDS", "parse_plain", "plain_results_json",
           "scan_plain_body"]

PLAIN_BODY_FIELDS = frozenset({"acks", "messages"})
PLAIN_MESSAGE_FIELDS = frozenset({"key", "value"})
PLAIN_ACKS = ("0", "1", "all")

PlainColumns = tuple[str, list[bytes | None], list[bytes], int]


def parse_plain(
    raw_messages: list[Any], max_key_bytes: int, max_value_bytes: int, dumps: Callable[[Any], bytes]
) -> tuple[list[bytes | None], list[bytes], int] | None:
    """Keys, values (as stored) and the values' total size of plain messages; None if any is not
    plain or is over a limit. ``dumps`` is ``orjson.dumps`` (what a value is stored as, copied
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


def scan_plain_body(body: bytes, max_batch_messages: int, max_key_bytes: int,
                           max_value_bytes: int, loads: Callable[[bytes], Any],
                           dumps: Callable[[Any], bytes], /) -> PlainColumns | None:
    """``(acks, keys, values, value_bytes)`` of a plain publish body: acks 0, 1 or all and 1 to
    ``max_batch_messages`` plain messages within the limits; None for anything else
    (``parse_publish_body``'s general path then decides, errors included).

    The compiled one reads the bytes in one pass, without ``loads``: values that orjson would write
    back unchanged are copied from the body (strings without escapes, literals, integers of up to
    15 digits but -0, floats in orjson's form: ``-?I.F`` without exponent, F "0" or ending in a
    non-zero digit, at most 15 significant digits, 1e-5 <= |x| < 1e16 or 0; and objects and arrays
    of such values written compactly, as orjson writes them: no whitespace inside, names without
    escapes, no name twice in one object, at most 32 members each), others re-encoded with
    ``dumps(loads(span))``; whatever it cannot prove plain and valid (bad JSON or UTF-8, escapes in
    keys or field names, limits, other fields...) gives None, as here.
    """
    try:
        doc = loads(body)
        acks = _plain_acks(doc)
        messages = doc["messages"] if acks is not None else None
        if type(messages) is not list or not 1 <= len(messages) <= max_batch_messages:
            return None
        plain = parse_plain(messages, max_key_bytes, max_value_bytes, dumps)
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


def plain_results_json(partitions: list[int], offsets: list[str]) -> bytes:
    """The publish response of plain messages: ``{"results": [{"partition", "offset",
    "duplicate"}...]}``, as orjson writes it."""
    return orjson.dumps({"results": [
        {"partition": partition, "offset": offset, "duplicate": False}
        for partition, offset in zip(partitions, offsets, strict=True)]})
