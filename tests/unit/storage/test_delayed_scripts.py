"""The delayed-message Lua scripts, run on fakeredis (no cluster, no WAIT: those are integration
tests)."""

from __future__ import annotations

import hashlib
import time
from collections.abc import AsyncIterator
from typing import Any

import fakeredis
import pytest

from storage.append.lua import APPEND_LUA
from storage.codec import decode_entries
from storage.delayed_scripts import (
    PROMOTE_LUA,
    PROMOTE_SCRIPT,
    SCHEDULE_LUA,
    SCHEDULE_SCRIPT,
    build_schedule_call,
    encode_delayed,
    parse_promote_reply,
    parse_schedule_reply,
    promote_keys_and_args,
)
from storage.keys import dedup_key, delayed_data_key, delayed_key, log_key
from storage.models import AppendOptions, Record, ScheduledResult, ValueFormat
from tests.unit.storage.append_calls import append_call, append_results

PAST = 1_000
FUTURE = 10**13  # year 2286


@pytest.fixture
async def redis() -> AsyncIterator[Any]:
    client = fakeredis.FakeAsyncRedis()
    yield client
    await client.aclose()


async def _schedule(redis: Any, items: list[tuple[Record, int]],
                    options: AppendOptions | None = None) -> list[Any]:
    call = build_schedule_call("t", items[0][0].partition, items, options or AppendOptions())
    reply = await redis.execute_command("EVAL", SCHEDULE_LUA, len(call.keys), *call.keys,
                                        *call.args)
    return parse_schedule_reply(call.partition, reply)


async def _promote(redis: Any, limit: int = 100, max_length: int | None = None) -> list[Any]:
    keys, args = promote_keys_and_args("t", 0, limit, max_length)
    return parse_promote_reply(0, await redis.execute_command("EVAL", PROMOTE_LUA, len(keys), *keys,
                                                              *args))


def test_script_shas_match_their_text() -> None:
    for script in (SCHEDULE_SCRIPT, PROMOTE_SCRIPT):
        assert hashlib.sha1(script.lua.encode()).hexdigest() == script.sha


def test_schedule_call_layout() -> None:
    items = [(Record(partition=3, value=b"a"), 5),
             (Record(partition=3, value=b"b", idempotency_key="x"), 7)]
    call = build_schedule_call("t", 3, items, AppendOptions(dedup_ttl_ms=1000))
    assert call.keys == ["sg:{t/3}:delayed", "sg:{t/3}:delayed:data", "sg:{t/3}:delayed:seq",
                         "sg:{t/3}:dedup:x"]
    assert call.args[:4] == [1000, 0, 5, b"0:1:v1:a1:f1:b"]
    assert call.args[4:6] == [1, 7]
    assert call.evalsha_command()[:3] == ("EVALSHA", SCHEDULE_SCRIPT.sha, 4)


async def test_encoding_is_length_prefixed_and_binary_safe(redis: Any) -> None:
    record = Record(partition=0, value=b"1:2:\x00", key=b"", idempotency_key="id:1")
    assert encode_delayed(record) == b"4:id:11:K5:1:2:\x001:f1:b"
    await _schedule(redis, [(record, PAST)])
    await _promote(redis)
    (entry,) = decode_entries(0, await redis.xrange(log_key("t", 0)))
    assert (entry.value, entry.key) == (b"1:2:\x00", b"")


async def test_scheduled_messages_wait_in_the_sorted_set(redis: Any) -> None:
    results = await _schedule(redis, [(Record(partition=0, value=b"a"), FUTURE),
                                      (Record(partition=0, value=b"b"), 5)])
    assert [r.due_ms for r in results] == [FUTURE, 5]
    assert [r.schedule_id for r in results] == ["0000000000000001", "0000000000000002"]
    assert not any(r.duplicate for r in results)
    assert await redis.zrange(delayed_key("t", 0), 0, -1, withscores=True) == [
        (b"0000000000000002", 5.0),
        (b"0000000000000001", float(FUTURE)),
    ]
    assert await redis.hlen(delayed_data_key("t", 0)) == 2
    assert await redis.exists(log_key("t", 0)) == 0


async def test_promote_moves_only_due_messages_in_order(redis: Any) -> None:
    items = [(Record(partition=0, value=v), due)
             for v, due in [(b"c", 30), (b"late", FUTURE), (b"a", 10), (b"b", 30)]]
    await _schedule(redis, items)
    promoted = await _promote(redis)
    entries = decode_entries(0, await redis.xrange(log_key("t", 0)))
    assert [e.value for e in entries] == [b"a", b"c", b"b"]
    assert [r.offset for r in promoted] == [e.offset for e in entries]
    assert await redis.zcard(delayed_key("t", 0)) == 1
    assert await redis.hkeys(delayed_data_key("t", 0)) == [b"0000000000000002"]
    assert await _promote(redis) == []


async def test_promoted_entry_keeps_every_field(redis: Any) -> None:
    record = Record(partition=0, value=b'{"x":1}', value_format=ValueFormat.JSON, key=b"k",
                    headers={"h": "1"})
    await _schedule(redis, [(record, PAST)])
    await _promote(redis)
    (entry,) = decode_entries(0, await redis.xrange(log_key("t", 0)))
    assert (entry.value, entry.value_format) == (b'{"x":1}', ValueFormat.JSON)
    assert (entry.key, entry.headers) == (b"k", {"h": "1"})


async def test_limit_bounds_one_promotion(redis: Any) -> None:
    await _schedule(redis, [(Record(partition=0, value=b"%d" % i), PAST + i) for i in range(5)])
    assert len(await _promote(redis, limit=2)) == 2
    assert await redis.zcard(delayed_key("t", 0)) == 3
    assert len(await _promote(redis, limit=10)) == 3


async def test_max_length_applies_at_promotion(redis: Any) -> None:
    await _schedule(redis, [(Record(partition=0, value=b"%d" % i), PAST) for i in range(300)])
    await _promote(redis, limit=300, max_length=10)
    assert await redis.xlen(log_key("t", 0)) < 300


async def test_idempotent_retry_returns_the_first_schedule(redis: Any) -> None:
    record = Record(partition=0, value=b"a", idempotency_key="k")
    (first,) = await _schedule(redis, [(record, FUTURE)])
    (again,) = await _schedule(redis, [(record, FUTURE + 99)])
    assert again == ScheduledResult(0, first.schedule_id, FUTURE, duplicate=True)
    assert await redis.zcard(delayed_key("t", 0)) == 1
    assert await redis.get(dedup_key("t", 0, "k")) == b"s:" + first.schedule_id.encode()


async def test_dedup_window_lasts_until_ttl_after_the_due_time(redis: Any) -> None:
    due = int(time.time() * 1000) + 60_000
    record = Record(partition=0, value=b"a", idempotency_key="k")
    await _schedule(redis, [(record, due)], AppendOptions(dedup_ttl_ms=5000))
    assert 60_000 < await redis.pttl(dedup_key("t", 0, "k")) <= 65_000


async def test_promotion_points_the_dedup_key_at_the_offset(redis: Any) -> None:
    record = Record(partition=0, value=b"a", idempotency_key="k")
    await _schedule(redis, [(record, PAST)], AppendOptions(dedup_ttl_ms=50_000))
    (promoted,) = await _promote(redis)
    assert await redis.get(dedup_key("t", 0, "k")) == promoted.offset.encode()
    assert 0 < await redis.pttl(dedup_key("t", 0, "k")) <= 50_000
    call = append_call("t", 0, [record], AppendOptions())
    reply = await redis.execute_command("EVAL", APPEND_LUA, len(call.keys), *call.keys, *call.args)
    (appended,) = append_results(0, reply)
    assert (appended.offset, appended.duplicate) == (promoted.offset, True)
    (rescheduled,) = await _schedule(redis, [(record, PAST)])
    assert (rescheduled.duplicate, rescheduled.offset,
            rescheduled.schedule_id) == (True, promoted.offset, "")
    assert rescheduled.due_ms == int(promoted.offset.split("-")[0])
    assert await redis.xlen(log_key("t", 0)) == 1
    assert await redis.zcard(delayed_key("t", 0)) == 0
