"""The plain publish's codec: a batch of plain messages to columns, their offsets to the response body.

A plain message is a JSON object with a ``value`` (any JSON) and an optional string ``key``, nothing else: the
common publish, which skips the per-message objects of the general path (``gateway.validation``). Both
functions are compiled in ``gateway._plain`` (built by setup.py; the Python ones here are the reference, and
tests/unit/gateway/test_plain_codec.py pins the two to each other and fails when the compiled one is missing).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

__all__ = ["NATIVE", "PLAIN_MESSAGE_FIELDS", "parse_plain", "parse_plain_python", "plain_results_json",
           "plain_results_json_python"]

PLAIN_MESSAGE_FIELDS = frozenset({"key", "value"})


def parse_plain_python(raw_messages: list[Any], max_key_bytes: int, max_value_bytes: int,
                       dumps: Callable[[Any], bytes]) -> tuple[list[bytes | None], list[bytes], int] | None:
    """Keys, values (as stored) and the values' total size of plain messages; None if any is not plain or
    is over a limit. The reference of the compiled ``parse_plain`` (``gateway._plain``); ``dumps`` is
    ``orjson.dumps`` (what a value is stored as, copied to its own size like ``json_value_bytes``)."""
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


def plain_results_json_python(partitions: list[int], offsets: list[str]) -> bytes:
    """The publish response of plain messages: ``{"results": [{"partition", "offset", "duplicate"}...]}``, as
    orjson writes it. The reference of the compiled ``plain_results_json``."""
    return orjson.dumps({"results": [{"partition": partition, "offset": offset, "duplicate": False}
                                     for partition, offset in zip(partitions, offsets, strict=True)]})


try:
    from gateway import _plain
except ImportError:  # built without a C compiler: the reference, same results
    NATIVE = False
    parse_plain: Callable[[list[Any], int, int, Callable[[Any], bytes]],
                          tuple[list[bytes | None], list[bytes], int] | None] = parse_plain_python
    plain_results_json: Callable[[list[int], list[str]], bytes] = plain_results_json_python
else:
    NATIVE = True
    parse_plain = _plain.parse_plain
    plain_results_json = _plain.plain_results_json
