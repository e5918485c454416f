"""The plain publish path (the compiled codec and ``gateway._speedups.plain_py``) agrees with the
general one wherever it answers, and the compiled codec with its Python reference."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from types import ModuleType
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway import _speedups
from gateway._speedups import parse_plain, plain_results_json
from gateway._speedups.plain_py import parse_plain as parse_plain_python
from gateway._speedups.plain_py import plain_results_json as plain_results_json_python
from gateway.errors import Problem
from gateway.publish.validation import (
    PublishBatch,
    PublishLimits,
    _parse_message,
    parse_publish_body,
)
from storage.models import ValueFormat

LIMITS = PublishLimits(max_value_bytes=64, max_key_bytes=8, max_headers=4, max_header_bytes=64,
                       max_batch_messages=50, max_batch_bytes=1 << 16)
PARSERS = [pytest.param(parse_plain, id="installed"),
           pytest.param(parse_plain_python, id="python-reference")]
Parser = Callable[[list[Any], int, int, Callable[[Any], bytes]],
                  tuple[list[bytes | None], list[bytes], int] | None]

# JSON never holds surrogates
_text = st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=30)
_json = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False) | _text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3),
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


def test_the_compiled_codec_is_chosen_unless_switched_off(
    compiled_part: Callable[[str], ModuleType]
) -> None:
    compiled = compiled_part("gateway._speedups._plain")
    chosen = ((parse_plain_python, plain_results_json_python) if _speedups.OFF
              else (compiled.parse_plain, compiled.plain_results_json))
    assert (parse_plain, plain_results_json) == chosen


@pytest.mark.parametrize("parse", PARSERS)
@settings(max_examples=400, deadline=None)
@given(raw=_messages)
def test_plain_path_answers_like_the_general_path_or_defers(parse: Parser, raw: Any) -> None:
    plain = parse([raw], LIMITS.max_key_bytes, LIMITS.max_value_bytes, orjson.dumps)
    if plain is not None:
        full = _full(raw)
        assert (plain[0][0], plain[1][0], plain[2]) == (full.key, full.value, len(full.value))
        assert (full.headers, full.partition, full.idempotency_key,
                full.due_ms) == ({}, None, None, None)


@pytest.mark.parametrize("parse", PARSERS)
@given(value=_json, key=st.none() | st.text(max_size=8).filter(lambda k: len(k.encode()) <= 8))
def test_plain_path_takes_every_acceptable_key_value_message(parse: Parser, value: Any,
                                                             key: str | None) -> None:
    raw = {"value": value} if key is None else {"key": key, "value": value}
    accepted = not isinstance(_full(raw), int)
    assert (parse([raw], LIMITS.max_key_bytes, LIMITS.max_value_bytes,
                  orjson.dumps) is not None) == accepted


@settings(max_examples=300, deadline=None)
@given(raws=st.lists(_messages, max_size=6), max_key=st.integers(0, 12),
       max_value=st.integers(0, 80))
def test_compiled_parse_equals_the_reference(raws: list[Any], max_key: int, max_value: int) -> None:
    assert parse_plain(raws, max_key, max_value, orjson.dumps) == \
        parse_plain_python(raws, max_key, max_value, orjson.dumps)


@given(text=st.text(alphabet=st.characters(exclude_categories=["Cs"])))
def test_compiled_parse_writes_string_values_as_orjson_does(text: str) -> None:
    parsed = parse_plain([{"value": text}], 0, 1 << 20, orjson.dumps)
    assert parsed is not None
    assert parsed[1] == [orjson.dumps(text)]


@pytest.mark.parametrize("parse", PARSERS)
def test_an_error_from_dumps_propagates(parse: Parser) -> None:
    def failing(value: Any) -> bytes:
        raise orjson.JSONEncodeError("no")

    with pytest.raises(orjson.JSONEncodeError):
        parse([{"value": 1}], 8, 8, failing)


@given(rows=st.lists(st.tuples(st.integers(0, 2**31), st.text(max_size=24)), max_size=20))
def test_compiled_results_equal_the_reference(rows: list[tuple[int, str]]) -> None:
    partitions, offsets = [p for p, _ in rows], [o for _, o in rows]
    assert plain_results_json(partitions, offsets) == plain_results_json_python(partitions, offsets)
    assert orjson.loads(plain_results_json(partitions, offsets)) == {
        "results": [{"partition": p, "offset": o, "duplicate": False} for p, o in rows]}


def test_every_body_parses_to_columns_with_only_the_columns_its_messages_use() -> None:
    plain = parse_publish_body(orjson.dumps({"messages": [{"key": "a", "value": {"x": 1}},
                                                          {"value": "v"}]}),
                               LIMITS, None)
    assert plain == PublishBatch("1", [b"a", None], [b'{"x":1}', b'"v"'], 10)
    mixed = orjson.dumps({"messages": [{"key": "a", "value": 1},
                                       {"value_b64": "AA==", "headers": {"h": "1"},
                                        "partition": 0, "delay_ms": 0}]})
    assert parse_publish_body(mixed, LIMITS, None) == PublishBatch(
        "1", [b"a", None], [b"1", b"\0"], 2, [ValueFormat.JSON, ValueFormat.BINARY],
        [{}, {"h": "1"}], [None, 0])
    assert parse_publish_body(orjson.dumps({"messages": [{"value": 1}], "acks": 0}), LIMITS,
                              None) == PublishBatch("0", [None], [b"1"], 1)
    assert parse_publish_body(orjson.dumps({"messages": [{"value": 1}, {"value": 2}]}), LIMITS,
                              "idem") == PublishBatch(
        "1", [None, None], [b"1", b"2"], 2, batch_key="idem")


@pytest.mark.parametrize(("raw", "pointer"),
                         [({"key": "k" * 9, "value": 1}, "/messages/0/key"),
                          ({"key": "k", "value": "v" * 80}, "/messages/0/value")])
def test_oversized_key_or_value_still_gets_the_general_paths_error(raw: dict[str, Any],
                                                                   pointer: str) -> None:
    with pytest.raises(Problem) as caught:
        parse_publish_body(orjson.dumps({"messages": [raw]}), LIMITS, None)
    assert (caught.value.status, caught.value.pointer) == (413, pointer)


def _rss_kib() -> int:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS"))


# the plain path, and the general one (acks=0 batches are queued)
@pytest.mark.parametrize("acks", ["1", "0"])
def test_validated_json_values_hold_their_size_not_orjsons_growth_buffer(acks: str) -> None:
    """Parsed batches hold validated values: ~4 KiB each if orjson's buffer came along (20,000
    here)."""
    body = orjson.dumps({"acks": acks, "messages": [{"key": f"k{i}", "value": {"x": "x" * 200}}
                                                    for i in range(100)]})
    limits = dataclasses.replace(LIMITS, max_value_bytes=1024, max_batch_messages=100)
    before = _rss_kib()
    held = [parse_publish_body(body, limits, None) for _ in range(200)]
    per_message = (_rss_kib() - before) * 1024 / (200 * 100)
    assert len(held) == 200
    assert per_message < 2048, f"{per_message:.0f} B of RSS per held 200-byte value"
