"""max_header_bytes counts the UTF-8 bytes of header names and values, not characters."""

from __future__ import annotations

import orjson
import pytest

from gateway.errors import Problem
from gateway.publish.validation import PublishLimits, parse_publish_body

LIMIT = 16


def limits(max_header_bytes: int = LIMIT) -> PublishLimits:
    return PublishLimits(
        max_value_bytes=1024, max_key_bytes=64, max_headers=8, max_header_bytes=max_header_bytes,
        max_batch_messages=10, max_batch_bytes=1 << 20
    )


def body(headers: dict[str, str]) -> bytes:
    return orjson.dumps({"messages": [{"value": 1}, {"value": 2, "headers": headers}]})


@pytest.mark.parametrize("headers", [
    {"n": "é" * 7 + "x"},           # 1 + 14 + 1 bytes (9 characters)
    {"ü": "\U0001f600" * 3 + "xy"},  # 2 + 12 + 2 bytes (6 characters)
    {"k": "€" * 5},                 # 1 + 15 bytes
], ids=["two-byte", "four-byte", "three-byte"])
def test_headers_at_the_byte_limit_are_accepted(headers: dict[str, str]) -> None:
    assert sum(len(k.encode()) + len(v.encode()) for k, v in headers.items()) == LIMIT
    batch = parse_publish_body(body(headers), limits(), None)
    assert batch.headers is not None
    assert batch.headers[1] == headers


@pytest.mark.parametrize(
    "headers",
    [
        {"n": "é" * 8},  # 17 bytes in 9 characters: under a character count, over the byte limit
        {"\U0001f600": "\U0001f600" * 3 + "a"},  # 17 bytes in 5 characters
        {"k": "€" * 5, "x": ""},  # 17 bytes across two headers
    ],
    ids=["two-byte", "four-byte", "two-headers"],
)
def test_headers_one_byte_over_the_limit_are_413(headers: dict[str, str]) -> None:
    assert sum(len(k.encode()) + len(v.encode()) for k, v in headers.items()) == LIMIT + 1
    assert sum(len(k) + len(v) for k, v in headers.items()) <= LIMIT, (
        "the case must be under a character count"
    )
    with pytest.raises(Problem) as refused:
        parse_publish_body(body(headers), limits(), None)
    assert refused.value.status == 413
    assert refused.value.pointer == "/messages/1/headers"
    assert f"headers of {LIMIT + 1} bytes" in refused.value.detail
