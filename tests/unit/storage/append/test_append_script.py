"""The Lua append script, run on fakeredis (no cluster, no WAIT: those are integration tests)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import fakeredis
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storage.append.lua import APPEND_LUA, APPEND_SHA
from storage.keys import log_key
from storage.models import AppendOptions, Record, ValueFormat
from storage.wire import errors
from storage.wire.errors import as_redis_error
from storage.wire.resp import ReplyError, encode_command
from tests.unit.storage.append_calls import append_call, append_results


@pytest.fixture
async def redis() -> AsyncIterator[Any]:
    client = fakeredis.FakeAsyncRedis()
    yield client
    await client.aclose()


async def _append(redis: Any, records: list[Record],
                  options: AppendOptions | None = None) -> list[Any]:
    call = append_call("t", records[0].partition, records, options or AppendOptions())
    reply = await redis.execute_command("EVAL", APPEND_LUA, len(call.keys), *call.keys, *call.args)
    return append_results(call.partition, reply)


def test_script_sha_matches_the_text() -> None:
    import hashlib

    assert hashlib.sha1(APPEND_LUA.encode()).hexdigest() == APPEND_SHA


def test_args_layout_per_record() -> None:
    records = [Record(partition=2, value=b"a"),
               Record(partition=2, value=b"b", idempotency_key="x")]
    call = append_call("t", 2, records, AppendOptions(max_length=50, dedup_ttl_ms=1000))
    assert call.keys == ["sg:{t/2}:log", "sg:{t/2}:dedup:x"]
    assert call.args == [50, 1000, 0, 4, b"v", b"a", b"f", b"b", 1, 4, b"v", b"b", b"f", b"b"]
    assert call.evalsha_command()[:4] == ("EVALSHA", APPEND_SHA, 2, "sg:{t/2}:log")


async def test_appends_in_order_and_returns_offsets(redis: Any) -> None:
    results = await _append(redis, [Record(partition=0, value=b"a"),
                                    Record(partition=0, value=b"b")])
    entries = await redis.xrange(log_key("t", 0))
    assert [r.offset for r in results] == [e[0].decode() for e in entries]
    assert [e[1][b"v"] for e in entries] == [b"a", b"b"]
    assert not any(r.duplicate for r in results)


async def test_idempotent_retry_returns_the_first_offset(redis: Any) -> None:
    record = Record(partition=0, value=b"a", idempotency_key="k1")
    (first,) = await _append(redis, [record])
    (again,) = await _append(redis, [record])
    assert again.offset == first.offset
    assert again.duplicate
    assert await redis.xlen(log_key("t", 0)) == 1


async def test_same_key_twice_in_one_batch_is_a_duplicate(redis: Any) -> None:
    records = [
        Record(partition=0, value=b"a", idempotency_key="k"),
        Record(partition=0, value=b"b"),
        Record(partition=0, value=b"c", idempotency_key="k"),
    ]
    results = await _append(redis, records)
    assert results[2].offset == results[0].offset
    assert results[2].duplicate
    assert await redis.xlen(log_key("t", 0)) == 2


async def test_dedup_key_expires_after_ttl(redis: Any) -> None:
    await _append(redis, [Record(partition=0, value=b"a", idempotency_key="k")],
                  AppendOptions(dedup_ttl_ms=5000))
    ttl = await redis.pttl("sg:{t/0}:dedup:k")
    assert 0 < ttl <= 5000


async def test_maxlen_trims_the_stream(redis: Any) -> None:
    options = AppendOptions(max_length=10)
    for _ in range(5):
        await _append(redis, [Record(partition=0, value=b"x")] * 50, options)
    # fakeredis trims exactly; real Redis trims by macro node (~), checked in the integration tests.
    assert await redis.xlen(log_key("t", 0)) <= 100


_records = st.builds(
    Record,
    partition=st.just(3),
    value=st.binary(max_size=300),
    value_format=st.sampled_from(list(ValueFormat)),
    key=st.none() | st.binary(max_size=40),
    headers=st.dictionaries(st.text(min_size=1, max_size=8), st.text(max_size=12), max_size=3),
    idempotency_key=st.none() | st.text(min_size=1, max_size=20),
)


@settings(max_examples=300, deadline=None)
@given(records=st.lists(_records, min_size=1, max_size=12),
       max_length=st.none() | st.integers(1, 10**9), ttl=st.integers(1, 10**9))
def test_wire_encoding_equals_generic_resp_encoding(
        records: list[Record], max_length: int | None, ttl: int) -> None:
    call = append_call("topic/é", 3, records,
                       AppendOptions(max_length=max_length, dedup_ttl_ms=ttl))
    assert call.evalsha_wire() == encode_command(call.evalsha_command())


def test_wire_encoding_of_over_a_thousand_dedup_keys() -> None:
    records = [Record(partition=0, value=b"v%d" % i, key=b"k", idempotency_key=f"i{i}")
               for i in range(1100)]
    call = append_call("t", 0, records, AppendOptions())
    assert call.evalsha_wire() == encode_command(call.evalsha_command())


async def test_wire_encoding_runs_as_the_script_expects(redis: Any) -> None:
    records = [Record(partition=0, value=b"a", key=b"k1"),
               Record(partition=0, value=b"{}", value_format=ValueFormat.JSON),
               Record(partition=0, value=b"c", headers={"h": "1"}, idempotency_key="x")]
    call = append_call("t", 0, records, AppendOptions())
    await redis.script_load(APPEND_LUA)
    connection = await redis.connection_pool.get_connection()
    try:
        await connection.send_packed_command(call.evalsha_wire())
        reply = await connection.read_response()
    finally:
        await redis.connection_pool.release(connection)
    results = append_results(0, reply)
    entries = await redis.xrange(log_key("t", 0))
    assert [r.offset for r in results] == [e[0].decode() for e in entries]
    assert [e[1] for e in entries] == [{b"Kk1": b"a", b"f": b"b"}, {b"v": b"{}"},
                                       {b"v": b"c", b"f": b"b", b"h": b'{"h":"1"}'}]


@settings(max_examples=300, deadline=None)
@given(records=st.lists(_records.map(lambda r: Record(r.partition, r.value, r.value_format, r.key,
                                                      r.headers)),
                        min_size=1, max_size=12),
       max_length=st.none() | st.integers(1, 10**9))
def test_transaction_wire_equals_generic_resp_encoding(
        records: list[Record], max_length: int | None) -> None:
    call = append_call("topic/é", 3, records, AppendOptions(max_length=max_length))
    assert not call.uses_script
    assert call.wire() == b"".join(encode_command(command)
                                   for command in call.transaction_commands())
    assert call.wire_replies == len(records) + 2


@pytest.mark.parametrize("value_format", list(ValueFormat))
def test_shared_headers_object_encodes_as_per_record_headers(value_format: ValueFormat) -> None:
    context = {"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
    records = [Record(partition=0, value=b"%d" % n, value_format=value_format,
                      key=None if n % 2 else b"k%d" % n, headers=context) for n in range(5)]
    for max_length in (None, 100):
        call = append_call("t", 0, records, AppendOptions(max_length=max_length))
        assert call.wire() == b"".join(encode_command(command)
                                       for command in call.transaction_commands())


def test_records_with_an_idempotency_key_go_through_the_script() -> None:
    records = [Record(partition=0, value=b"a"),
               Record(partition=0, value=b"b", idempotency_key="x")]
    call = append_call("t", 0, records, AppendOptions())
    assert call.uses_script
    assert call.wire() == call.evalsha_wire()
    assert call.wire_replies == 1
    assert call.fold_replies([[b"1-0", 0, b"1-1", 1]]) == [b"1-0", 0, b"1-1", 1]


def test_transaction_commands_trim_like_the_script() -> None:
    call = append_call("t", 1, [Record(partition=1, value=b"a", key=b"k")],
                       AppendOptions(max_length=50))
    assert call.transaction_commands() == [
        ("MULTI",), ("XADD", "sg:{t/1}:log", "MAXLEN", "~", 50, "*", b"Kk", b"a", b"f", b"b"),
        ("EXEC",)]


def test_executed_transaction_folds_into_the_scripts_flat_reply() -> None:
    call = append_call("t", 0, [Record(partition=0, value=b"a"), Record(partition=0, value=b"b")],
                             AppendOptions())
    folded = call.fold_replies([b"OK", b"QUEUED", b"QUEUED", [b"5-0", b"5-1"]])
    assert folded == ["5-0", 0, "5-1", 0]
    assert [(r.offset, r.duplicate) for r in append_results(0, folded)] == [("5-0", False),
                                                                            ("5-1", False)]


def test_aborted_transaction_folds_into_its_refusal() -> None:
    call = append_call("t", 0, [Record(partition=0, value=b"a"), Record(partition=0, value=b"b")],
                             AppendOptions())
    moved = as_redis_error(ReplyError("MOVED 3999 127.0.0.1:7001"))
    aborted = as_redis_error(ReplyError("EXECABORT Transaction discarded because of previous "
                                        "errors."))
    folded = call.fold_replies([b"OK", moved, moved, aborted])
    assert isinstance(folded, errors.MovedError)
    assert (folded.host, folded.port) == ("127.0.0.1", 7001)
    ask = as_redis_error(ReplyError("ASK 3999 127.0.0.1:7002"))
    assert isinstance(call.fold_replies([b"OK", ask, b"QUEUED", aborted]), errors.AskError)


def test_command_failing_inside_transaction_fails_the_call() -> None:
    call = append_call("t", 0, [Record(partition=0, value=b"a"), Record(partition=0, value=b"b")],
                             AppendOptions())
    folded = call.fold_replies([b"OK", b"QUEUED", b"QUEUED",
                                [b"5-0", ReplyError("WRONGTYPE Operation against a key holding the "
                                                    "wrong kind")]])
    assert isinstance(folded, errors.ResponseError)


async def test_transaction_wire_stores_what_the_script_stores(redis: Any) -> None:
    records = [Record(partition=0, value=b"a", key=b"k1"),
               Record(partition=0, value=b"{}", value_format=ValueFormat.JSON),
               Record(partition=0, value=b"c", headers={"h": "1"})]
    call = append_call("t", 0, records, AppendOptions())
    connection = await redis.connection_pool.get_connection()
    try:
        await connection.send_packed_command(call.wire())
        replies = [await connection.read_response() for _ in range(call.wire_replies)]
    finally:
        await redis.connection_pool.release(connection)
    results = append_results(0, call.fold_replies(replies))
    entries = await redis.xrange(log_key("t", 0))
    assert [r.offset for r in results] == [e[0].decode() for e in entries]
    assert [e[1] for e in entries] == [{b"Kk1": b"a", b"f": b"b"}, {b"v": b"{}"},
                                       {b"v": b"c", b"f": b"b", b"h": b'{"h":"1"}'}]
