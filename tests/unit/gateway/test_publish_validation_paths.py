"""The short validation path for {key, value} messages agrees with the full one wherever it answers."""

from __future__ import annotations

import dataclasses
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.errors import Problem
from gateway.validation import PublishLimits, _parse_message, _parse_simple_message, parse_publish_body

LIMITS = PublishLimits(max_value_bytes=64, max_key_bytes=8, max_headers=4, max_header_bytes=64,
                       max_batch_messages=50, max_batch_bytes=1 << 16)

_json = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6)
_fields = st.fixed_dictionaries({}, optional={
    "key": st.none() | st.text(max_size=12) | st.integers(),
    "value": _json,
    "value_b64": st.just("aGk="),
    "headers": st.just({"a": "b"}),
    "partition": st.integers(0, 3),
    "idempotency_key": st.just("i"),
    "unknown": st.just(1),
})
_messages = _fields | st.lists(st.integers(), max_size=2) | st.text(max_size=3)


def _full(raw: Any) -> Any:
    try:
        return _parse_message(raw, 0, LIMITS, None, 0)
    except Problem as problem:
        return problem.status


@settings(max_examples=600, deadline=None)
@given(raw=_messages)
def test_short_path_answers_like_the_full_path_or_defers(raw: Any) -> None:
    short = _parse_simple_message(raw, LIMITS)
    if short is not None:
        assert short == _full(raw)


@given(value=_json, key=st.none() | st.text(max_size=8).filter(lambda k: len(k.encode()) <= 8))
def test_short_path_takes_every_acceptable_plain_key_value_message(value: Any, key: str | None) -> None:
    raw = {"value": value} if key is None else {"key": key, "value": value}
    accepted = not isinstance(_full(raw), int)
    assert (_parse_simple_message(raw, LIMITS) is not None) == accepted


@pytest.mark.parametrize(("raw", "pointer"), [({"key": "k" * 9, "value": 1}, "/messages/0/key"),
                                               ({"key": "k", "value": "v" * 80}, "/messages/0/value")])
def test_oversized_key_or_value_still_gets_the_full_paths_error(raw: dict[str, Any], pointer: str) -> None:
    with pytest.raises(Problem) as caught:
        parse_publish_body(orjson.dumps({"messages": [raw]}), LIMITS, None)
    assert (caught.value.status, caught.value.pointer) == (413, pointer)


def _rss_kib() -> int:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS"))


def test_validated_json_values_hold_their_size_not_orjsons_growth_buffer() -> None:
    """Queued acks=0 batches hold validated values: ~4 KiB each if orjson's buffer came along (20,000 here)."""
    body = orjson.dumps({"messages": [{"key": f"k{i}", "value": "x" * 200} for i in range(100)]})
    limits = dataclasses.replace(LIMITS, max_value_bytes=1024, max_batch_messages=100)
    before = _rss_kib()
    held = [parse_publish_body(body, limits, None) for _ in range(200)]
    per_message = (_rss_kib() - before) * 1024 / (200 * 100)
    assert len(held) == 200
    assert per_message < 2048, f"{per_message:.0f} B of RSS per held 200-byte value"
