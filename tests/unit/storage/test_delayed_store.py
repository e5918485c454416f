"""RedisDelayedStore end to end on a fakeredis node through the node lanes (no cluster, no
WAIT)."""

from __future__ import annotations

from typing import Any, TypeVar

import pytest

from storage.delayed import RedisDelayedStore
from storage.keys import log_key
from storage.models import AppendOptions, Record
from storage.wire.lanes import NodeLanes
from tests.unit.storage.fake_node import OneNodeRouter

T = TypeVar("T")
FUTURE = 10**13


@pytest.fixture
def delayed(node: tuple[OneNodeRouter, NodeLanes]) -> RedisDelayedStore:
    return RedisDelayedStore(*node)  # type: ignore[arg-type]


async def test_results_come_back_in_input_order_across_partitions(
        delayed: RedisDelayedStore) -> None:
    items = [(Record(partition=p, value=b"x"), 100 + i) for i, p in enumerate([2, 0, 2, 1])]
    results = await delayed.schedule("t", items, AppendOptions())
    assert [(r.partition, r.due_ms) for r in results] == [(2, 100), (0, 101), (2, 102), (1, 103)]
    assert [r.schedule_id for r in results if r.partition == 2] == ["0000000000000001",
                                                                    "0000000000000002"]


async def test_scripts_are_loaded_on_noscript(redis: Any, delayed: RedisDelayedStore) -> None:
    await redis.script_flush()
    await delayed.schedule("t", [(Record(partition=0, value=b"a"), 5)], AppendOptions())
    await redis.script_flush()
    (promoted,) = await delayed.promote_due("t", 0, limit=10)
    assert (await redis.xrange(log_key("t", 0)))[0][0].decode() == promoted.offset


async def test_next_due_and_count(delayed: RedisDelayedStore) -> None:
    assert await delayed.next_due_ms("t", 0) is None
    assert await delayed.scheduled_count("t", 0) == 0
    items = [(Record(partition=0, value=b"a"), FUTURE),
             (Record(partition=0, value=b"b"), FUTURE - 7)]
    await delayed.schedule("t", items, AppendOptions())
    assert await delayed.next_due_ms("t", 0) == FUTURE - 7
    assert await delayed.scheduled_count("t", 0) == 2
    assert await delayed.promote_due("t", 0) == []


async def test_bad_arguments_are_rejected(delayed: RedisDelayedStore) -> None:
    assert await delayed.schedule("t", [], AppendOptions()) == []
    with pytest.raises(ValueError, match="due"):
        await delayed.schedule("t", [(Record(partition=0, value=b"a"), -1)], AppendOptions())
    with pytest.raises(ValueError, match="limit"):
        await delayed.promote_due("t", 0, limit=0)
