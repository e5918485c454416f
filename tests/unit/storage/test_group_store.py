"""RedisGroupStore on a fakeredis node through the node lanes, for what fakeredis models
faithfully.

Not here (fakeredis differs from Redis 7, so these live in the integration tests): XPENDING IDLE
filtering, XCLAIM IDLE clamping, blocking XREADGROUP, cluster routing and failover.
"""

from __future__ import annotations

from typing import Any

import pytest

from storage.groups import RedisGroupStore
from storage.keys import log_key
from storage.models import PendingEntry
from storage.settings import RedisStoreSettings
from storage.wire.lanes import NodeLanes
from tests.unit.storage.fake_node import OneNodeRouter

T, P, G = "t", 0, "g"
KEY = log_key(T, P)


@pytest.fixture
def node_settings() -> RedisStoreSettings:
    return RedisStoreSettings(read_deadline_s=1.0, write_deadline_s=1.0)


@pytest.fixture
def store(node: tuple[OneNodeRouter, NodeLanes]) -> RedisGroupStore:
    return RedisGroupStore(*node)  # type: ignore[arg-type]


async def _append(redis: Any, n: int) -> list[str]:
    return [(await redis.xadd(KEY, {"v": f"m{i}", "f": "b"})).decode() for i in range(n)]


async def _read(store: RedisGroupStore, consumer: str = "c1", count: int = 100) -> list[str]:
    return [e.offset for e in await store.read_new(T, P, G, consumer, count=count, block_ms=0)]


async def test_group_start_decides_what_is_new(store: RedisGroupStore, redis: Any) -> None:
    offsets = await _append(redis, 4)
    await store.ensure_group(T, P, "early", "earliest")
    await store.ensure_group(T, P, "late", "latest")
    await store.ensure_group(T, P, "mid", offsets[1])
    for group, expected in (("early", offsets), ("late", []), ("mid", offsets[2:])):
        got = await store.read_new(T, P, group, "c", count=10, block_ms=0)
        assert [e.offset for e in got] == expected, group


async def test_existing_group_is_left_where_it_is(store: RedisGroupStore, redis: Any) -> None:
    offsets = await _append(redis, 3)
    await store.ensure_group(T, P, G, "earliest")
    await _read(store, count=1)
    await store.ensure_group(T, P, G, "latest")
    assert await _read(store) == offsets[1:]


async def test_ack_counts_only_pending_entries(store: RedisGroupStore, redis: Any) -> None:
    offsets = await _append(redis, 3)
    await store.ensure_group(T, P, G, "earliest")
    await _read(store)
    assert await store.ack(T, P, G, offsets[:2]) == 2
    assert await store.ack(T, P, G, offsets[:2]) == 0
    assert (await store.state(T, P, G)).pending == 1


async def test_empty_ack_makes_no_call(store: RedisGroupStore) -> None:
    store._calls.router = None  # type: ignore[assignment]  # any redis call would now fail
    assert await store.ack(T, P, G, []) == 0


async def test_claim_returns_entries_with_the_next_delivery_count(store: RedisGroupStore,
                                                                  redis: Any) -> None:
    offsets = await _append(redis, 2)
    await store.ensure_group(T, P, G, "earliest")
    await _read(store)
    # fakeredis' XPENDING IDLE filter is off by one
    pending = [PendingEntry(P, o, "c1", 0, 1) for o in offsets]
    claimed = await store.claim(T, P, G, "c2", pending, min_idle_ms=0)
    assert [(d.entry.offset, d.delivery_count, d.entry.value) for d in claimed] == [
        (offsets[0], 2, b"m0"),
        (offsets[1], 2, b"m1"),
    ]


async def test_nil_claim_replies_ack_missing_entries(store: RedisGroupStore, redis: Any) -> None:
    # Redis < 7 answers XCLAIM of a deleted entry with nil and keeps it pending; the store must ack
    # it.
    offsets = await _append(redis, 2)
    await store.ensure_group(T, P, G, "earliest")
    await _read(store)
    pending = [PendingEntry(P, o, "c1", 0, 1) for o in offsets]
    await redis.xdel(KEY, offsets[0])

    async def old_server_xclaim(*args: Any, **kwargs: Any) -> list[Any]:
        return [(None, None), (offsets[1].encode(), {b"v": b"m1"})]

    redis.xclaim = old_server_xclaim
    claimed = await store.claim(T, P, G, "c2", pending, min_idle_ms=0)
    assert [d.entry.offset for d in claimed] == offsets[1:]
    rows = await redis.xpending_range(KEY, G, min="-", max="+", count=10)
    assert [r["message_id"].decode() for r in rows] == offsets[1:]


async def test_state_reports_lag_and_oldest_pending(store: RedisGroupStore, redis: Any) -> None:
    offsets = await _append(redis, 5)
    await store.ensure_group(T, P, G, "earliest")
    await _read(store, count=2)
    state = await store.state(T, P, G)
    assert (state.exists, state.lag, state.pending, state.oldest_pending_offset) == (True, 3, 2,
                                                                                     offsets[0])
    assert state.last_delivered_offset == offsets[1]


async def test_state_of_missing_group_and_stream(store: RedisGroupStore, redis: Any) -> None:
    assert not (await store.state(T, P, G)).exists
    await _append(redis, 1)
    state = await store.state(T, P, G)
    assert (state.exists, state.lag, state.pending) == (False, None, 0)


async def test_seek_moves_the_position_and_creates_missing_groups(store: RedisGroupStore,
                                                                  redis: Any) -> None:
    offsets = await _append(redis, 3)
    await store.seek(T, P, G, "latest")
    assert await _read(store) == []
    await store.seek(T, P, G, "earliest")
    assert await _read(store) == offsets


async def test_read_new_recreates_a_vanished_group_from_earliest(store: RedisGroupStore,
                                                                 redis: Any) -> None:
    await store.ensure_group(T, P, G, "latest")
    await redis.delete(KEY)
    offsets = await _append(redis, 2)
    assert await _read(store) == offsets


async def test_groups_and_delete_group(store: RedisGroupStore, redis: Any) -> None:
    assert await store.groups(T, P) == []
    await store.ensure_group(T, P, "a", "latest")
    await store.ensure_group(T, P, "b", "latest")
    await store.delete_group(T, P, "a")
    await store.delete_group(T, P, "a")
    assert await store.groups(T, P) == ["b"]
