"""Retention trimming and its unacked-entry counting, on a fakeredis node through the node
connections."""

from __future__ import annotations

from typing import Any, TypeVar

import pytest

from storage.codec import offset_key
from storage.keys import log_key
from storage.models import TrimReport
from storage.retention import RedisRetention, after, offset_for_time
from storage.wire.lanes import NodeLanes
from tests.unit.storage.fake_node import OneNodeRouter

T = TypeVar("T")
KEY = log_key("t", 0)


@pytest.fixture
def retention(node: tuple[OneNodeRouter, NodeLanes]) -> RedisRetention:
    return RedisRetention(*node)  # type: ignore[arg-type]


async def _fill(redis: Any, n: int) -> list[str]:
    return [(await redis.xadd(KEY, {"v": b"%d" % i}, id=f"{1000 + i}-0")).decode()
            for i in range(n)]


def test_offset_for_time_and_id_helpers() -> None:
    assert offset_for_time(1234) == "1234-0"
    assert offset_for_time(-5) == "0-0"
    assert offset_key("12-3") < offset_key("12-10") < offset_key("13-0")
    assert after("12-3") == "12-4"


async def test_trim_by_min_offset_removes_older_entries(redis: Any,
                                                        retention: RedisRetention) -> None:
    ids = await _fill(redis, 10)
    report = await retention.trim("t", 0, min_offset=ids[4])
    assert report == TrimReport(0, 4, {})
    assert (await redis.xrange(KEY, count=1))[0][0].decode() == ids[4]


async def test_nothing_to_trim_is_a_zero_report(redis: Any, retention: RedisRetention) -> None:
    assert await retention.trim("t", 0, min_offset="5-0") == TrimReport(0, 0)
    ids = await _fill(redis, 3)
    assert await retention.trim("t", 0, min_offset=ids[0], max_length=5) == TrimReport(0, 0)
    assert await redis.xlen(KEY) == 3


async def test_max_length_keeps_exactly_the_newest(redis: Any, retention: RedisRetention) -> None:
    ids = await _fill(redis, 10)
    assert (await retention.trim("t", 0, max_length=3)).removed == 7
    assert [i.decode() for i, _ in await redis.xrange(KEY)] == ids[7:]
    assert (await retention.trim("t", 0, max_length=2)).removed == 1  # the short suffix path
    assert (await retention.trim("t", 0, max_length=0)).removed == 2
    assert await redis.xlen(KEY) == 0


async def test_the_later_of_both_cuts_wins(redis: Any, retention: RedisRetention) -> None:
    ids = await _fill(redis, 10)
    assert (await retention.trim("t", 0, min_offset=ids[2], max_length=5)).removed == 5
    assert (await retention.trim("t", 0, min_offset=ids[8], max_length=5)).removed == 3


async def test_pending_and_undelivered_below_cut_are_counted(
        redis: Any, retention: RedisRetention) -> None:
    ids = await _fill(redis, 10)
    await redis.xgroup_create(KEY, "lagging", id="0")
    await redis.xreadgroup("lagging", "c", {KEY: ">"}, count=3)  # 3 pending, 7 never delivered
    await redis.xgroup_create(KEY, "done", id="0")
    await redis.xreadgroup("done", "c", {KEY: ">"}, count=10)
    await redis.xack(KEY, "done", *ids)
    await redis.xgroup_create(KEY, "mixed", id="0")
    await redis.xreadgroup("mixed", "c", {KEY: ">"}, count=6)
    await redis.xack(KEY, "mixed", ids[0], ids[2])  # pending below the cut: ids[1], ids[3], ids[4]
    report = await retention.trim("t", 0, min_offset=ids[5])
    assert report == TrimReport(0, 5, {"lagging": 5, "mixed": 3})


async def test_entries_trimmed_earlier_are_not_counted_again(redis: Any,
                                                             retention: RedisRetention) -> None:
    ids = await _fill(redis, 10)
    await redis.xgroup_create(KEY, "g", id="0")
    await redis.xreadgroup("g", "c", {KEY: ">"}, count=4)
    assert (await retention.trim("t", 0, min_offset=ids[2])).unacked_removed == {"g": 2}
    # ids[0..1] stay in the PEL after the trim; only ids[2..3] (pending) and ids[4..5] (undelivered)
    # count now.
    assert (await retention.trim("t", 0, min_offset=ids[6])).unacked_removed == {"g": 4}
