"""RedisGroupStore against a real Redis Cluster: positions, blocking reads, pending, claims, lag,
seek."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from storage.errors import InvalidOffset
from storage.group_replies import MAX_IDLE_MS
from storage.groups import RedisGroupStore
from storage.keys import log_key, slot_of
from storage.models import AppendOptions, Record
from storage.redis_store import RedisStreamStore

P = 0
G = "g1"
# Below the blocking reads in these tests on purpose: a BLOCK longer than the socket timeout must
# still work.
SOCKET_TIMEOUT_S = 1.0
pytestmark = [pytest.mark.integration,
              pytest.mark.store_settings(socket_timeout_s=SOCKET_TIMEOUT_S)]


@pytest.fixture
def groups(store: RedisStreamStore) -> RedisGroupStore:
    return store.groups


async def _append(store: RedisStreamStore, topic: str, n: int, partition: int = P) -> list[str]:
    results = await store.append(topic, [Record(partition, f"m{i}".encode()) for i in range(n)],
                                 AppendOptions())
    return [r.offset for r in results]


async def _read(groups: RedisGroupStore, topic: str, consumer: str = "c1",
                count: int = 100) -> list[str]:
    return [e.offset for e in await groups.read_new(topic, P, G, consumer, count=count, block_ms=0)]


async def _pending_rows(store: RedisStreamStore, topic: str) -> list[dict[str, Any]]:
    rows = await store.router.cluster.xpending_range(log_key(topic, P), G, min="-", max="+",
                                                     count=100)
    return list(rows)


def test_groups_property_returns_one_store_per_stream_store(store: RedisStreamStore) -> None:
    assert store.groups is store.groups


async def test_earliest_group_reads_every_existing_entry(
    store: RedisStreamStore, groups: RedisGroupStore, topic: str
) -> None:
    offsets = await _append(store, topic, 3)
    await groups.ensure_group(topic, P, G, "earliest")
    assert await _read(groups, topic) == offsets


async def test_latest_group_reads_only_later_appends(
    store: RedisStreamStore, groups: RedisGroupStore, topic: str
) -> None:
    await _append(store, topic, 3)
    await groups.ensure_group(topic, P, G, "latest")
    assert await _read(groups, topic) == []
    later = await _append(store, topic, 2)
    assert await _read(groups, topic) == later


async def test_offset_group_reads_strictly_after_that_offset(
    store: RedisStreamStore, groups: RedisGroupStore, topic: str
) -> None:
    offsets = await _append(store, topic, 5)
    await groups.ensure_group(topic, P, G, offsets[1])
    assert await _read(groups, topic) == offsets[2:]


async def test_ensure_group_on_existing_group_keeps_its_position(
    store: RedisStreamStore, groups: RedisGroupStore, topic: str
) -> None:
    offsets = await _append(store, topic, 4)
    await groups.ensure_group(topic, P, G, "earliest")
    assert await _read(groups, topic, count=2) == offsets[:2]
    await groups.ensure_group(topic, P, G, "earliest")
    await groups.ensure_group(topic, P, G, "latest")
    assert await _read(groups, topic) == offsets[2:]


async def test_ensure_group_creates_a_missing_stream(groups: RedisGroupStore, topic: str) -> None:
    await groups.ensure_group(topic, P, G, "latest")
    assert await groups.groups(topic, P) == [G]


async def test_ensure_group_rejects_a_malformed_offset(groups: RedisGroupStore, topic: str) -> None:
    with pytest.raises(InvalidOffset):
        await groups.ensure_group(topic, P, G, "yesterday")


async def test_read_new_entries_carry_partition_and_fields(
    store: RedisStreamStore, groups: RedisGroupStore, topic: str
) -> None:
    await store.append(topic, [Record(3, b"v", key=b"k", headers={"a": "b"})], AppendOptions())
    await groups.ensure_group(topic, 3, G, "earliest")
    (entry,) = await groups.read_new(topic, 3, G, "c1", count=10, block_ms=0)
    assert (entry.partition, entry.value, entry.key, dict(entry.headers)) == (3, b"v", b"k",
                                                                              {"a": "b"})


async def test_blocking_read_returns_empty_after_block_ms(groups: RedisGroupStore,
                                                          topic: str) -> None:
    await groups.ensure_group(topic, P, G, "latest")
    started = time.monotonic()
    assert await groups.read_new(topic, P, G, "c1", count=10, block_ms=1000) == []
    assert 0.9 <= time.monotonic() - started < 2.0


async def test_blocking_read_past_socket_timeout_returns_empty(
    groups: RedisGroupStore, topic: str
) -> None:
    await groups.ensure_group(topic, P, G, "latest")
    started = time.monotonic()
    assert await groups.read_new(topic, P, G, "c1", count=10,
                                 block_ms=int(SOCKET_TIMEOUT_S * 2500)) == []
    assert time.monotonic() - started >= SOCKET_TIMEOUT_S * 2.4


async def test_blocking_read_wakes_on_append(
    store: RedisStreamStore, groups: RedisGroupStore, topic: str
) -> None:
    await groups.ensure_group(topic, P, G, "latest")
    reader = asyncio.create_task(groups.read_new(topic, P, G, "c1", count=10, block_ms=5000))
    await asyncio.sleep(0.2)
    started = time.monotonic()
    offsets = await _append(store, topic, 1)
    entries = await asyncio.wait_for(reader, timeout=2.0)
    assert [e.offset for e in entries] == offsets
    assert time.monotonic() - started < 0.5


async def _cancel_a_blocking_read(groups: RedisGroupStore, topic: str, consumer: str) -> None:
    """A new group's blocking read by ``consumer``, cancelled while Redis holds it."""
    await groups.ensure_group(topic, P, G, "latest")
    reader = asyncio.create_task(groups.read_new(topic, P, G, consumer, count=10, block_ms=5000))
    await asyncio.sleep(0.2)
    reader.cancel()
    with pytest.raises(asyncio.CancelledError):
        await reader


async def test_cancelled_blocking_read_does_not_hold_up_next(
    store: RedisStreamStore, groups: RedisGroupStore, topic: str
) -> None:
    await _cancel_a_blocking_read(groups, topic, "c1")
    started = time.monotonic()
    assert await _read(groups, topic) == []
    assert time.monotonic() - started < 1.0
    offsets = await _append(store, topic, 2)
    assert await _read(groups, topic) == offsets


async def test_blocking_read_after_cancel_serves_its_own_consumer(
    store: RedisStreamStore, groups: RedisGroupStore, topic: str
) -> None:
    """The cancelled read's connection is closed, not reused: its late reply (the entries Redis
    would hand to the old consumer) cannot answer the next read."""
    await _cancel_a_blocking_read(groups, topic, "old")
    new = asyncio.create_task(groups.read_new(topic, P, G, "new", count=10, block_ms=5000))
    await asyncio.sleep(0.2)
    offsets = await _append(store, topic, 2)
    assert [e.offset for e in await asyncio.wait_for(new, timeout=3.0)] == offsets
    assert [r["consumer"] for r in await _pending_rows(store, topic)] == [b"new", b"new"]


async def test_consumers_of_one_group_never_share_an_entry(
    store: RedisStreamStore, groups: RedisGroupStore, topic: str
) -> None:
    offsets = await _append(store, topic, 60)
    await groups.ensure_group(topic, P, G, "earliest")

    async def drain(consumer: str) -> list[str]:
        got: list[str] = []
        while batch := await _read(groups, topic, consumer, count=4):
            got += batch
            await asyncio.sleep(0)
        return got

    first, second = await asyncio.gather(drain("a"), drain("b"))
    assert first
    assert second
    assert not set(first) & set(second)
    assert sorted(first + second) == sorted(offsets)


async def test_ack_removes_entries_from_pending(store: RedisStreamStore, groups: RedisGroupStore,
                                                topic: str) -> None:
    offsets = await _append(store, topic, 3)
    await groups.ensure_group(topic, P, G, "earliest")
    await _read(groups, topic)
    assert (await groups.state(topic, P, G)).pending == 3
    assert await groups.ack(topic, P, G, offsets[:2]) == 2
    assert (await groups.state(topic, P, G)).pending == 1
    assert await groups.ack(topic, P, G, offsets[:2]) == 0
    assert await groups.ack(topic, P, G, []) == 0


async def test_expired_entries_are_claimed_with_rising_counts(
    store: RedisStreamStore, groups: RedisGroupStore, topic: str
) -> None:
    offsets = await _append(store, topic, 2)
    await groups.ensure_group(topic, P, G, "earliest")
    await _read(groups, topic, "c1")
    assert await groups.expired(topic, P, G, min_idle_ms=60_000, count=10) == []
    for expected_count in (2, 3):
        await asyncio.sleep(0.12)
        pending = await groups.expired(topic, P, G, min_idle_ms=100, count=10)
        assert [p.offset for p in pending] == offsets
        assert all(p.delivery_count == expected_count - 1 and p.idle_ms >= 100 for p in pending)
        claimed = await groups.claim(topic, P, G, f"c{expected_count}", pending, min_idle_ms=100)
        assert [(d.entry.offset, d.delivery_count) for d in claimed] == [(o, expected_count)
                                                                         for o in offsets]
        assert [d.entry.value for d in claimed] == [b"m0", b"m1"]
    rows = await _pending_rows(store, topic)
    assert [(r["consumer"], r["times_delivered"]) for r in rows] == [(b"c3", 3), (b"c3", 3)]


async def test_claim_skips_an_entry_another_consumer_claimed_first(
    store: RedisStreamStore, groups: RedisGroupStore, topic: str
) -> None:
    await _append(store, topic, 1)
    await groups.ensure_group(topic, P, G, "earliest")
    await _read(groups, topic, "c1")
    await asyncio.sleep(0.12)
    pending = await groups.expired(topic, P, G, min_idle_ms=100, count=10)
    assert len(await groups.claim(topic, P, G, "fast", pending, min_idle_ms=100)) == 1
    assert await groups.claim(topic, P, G, "slow", pending, min_idle_ms=100) == []
    assert [r["consumer"] for r in await _pending_rows(store, topic)] == [b"fast"]


async def test_claim_by_offset_takes_only_idle_pending_with_counts(
    store: RedisStreamStore, groups: RedisGroupStore, topic: str
) -> None:
    offsets = await _append(store, topic, 4)
    await groups.ensure_group(topic, P, G, "earliest")
    await _read(groups, topic, "c1", count=3)  # the 4th never delivered: not pending
    await groups.set_idle(topic, P, G, "c1", offsets[:2], MAX_IDLE_MS)
    await groups.ack(topic, P, G, offsets[1:2])
    claimed = await groups.claim_offsets(topic, P, G, "c2", offsets, min_idle_ms=60_000)
    assert [(d.entry.offset, d.delivery_count, d.entry.value) for d in claimed] == [
        (offsets[0], 2, b"m0")]  # the 2nd acked, the 3rd not idle long enough, the 4th unread
    assert await groups.claim_offsets(topic, P, G, "c3", offsets[:1], min_idle_ms=60_000) == []
    again = await groups.claim_offsets(topic, P, G, "c3", offsets[:1], min_idle_ms=0)
    assert [(d.entry.offset, d.delivery_count) for d in again] == [(offsets[0], 3)]
    rows = await _pending_rows(store, topic)
    assert [(r["consumer"], r["times_delivered"]) for r in rows] == [(b"c3", 3), (b"c1", 1)]
    assert await groups.claim_offsets(topic, P, "no-such-group", "c3", offsets,
                                      min_idle_ms=0) == []


async def test_set_idle_zero_postpones_expiry(store: RedisStreamStore, groups: RedisGroupStore,
                                              topic: str) -> None:
    offsets = await _append(store, topic, 1)
    await groups.ensure_group(topic, P, G, "earliest")
    await _read(groups, topic, "c1")
    await asyncio.sleep(0.15)
    assert len(await groups.expired(topic, P, G, min_idle_ms=100, count=10)) == 1
    await groups.set_idle(topic, P, G, "c1", offsets, 0)
    assert await groups.expired(topic, P, G, min_idle_ms=100, count=10) == []
    (row,) = await _pending_rows(store, topic)
    assert row["times_delivered"] == 1
    assert row["time_since_delivered"] < 100


async def test_huge_idle_expires_entry_without_counting_delivery(
    store: RedisStreamStore, groups: RedisGroupStore, topic: str
) -> None:
    offsets = await _append(store, topic, 2)
    await groups.ensure_group(topic, P, G, "earliest")
    await _read(groups, topic, "c1")
    await groups.set_idle(topic, P, G, "c1", offsets[:1], 2**62)
    (pending,) = await groups.expired(topic, P, G, min_idle_ms=3_600_000, count=10)
    assert (pending.offset, pending.consumer, pending.delivery_count) == (offsets[0], "c1", 1)
    assert pending.idle_ms >= MAX_IDLE_MS
    await groups.set_idle(topic, P, G, "c1", offsets[1:], 30_000)
    rows = await _pending_rows(store, topic)
    assert 30_000 <= rows[1]["time_since_delivered"] < 31_000
    assert [r["times_delivered"] for r in rows] == [1, 1]


async def test_claim_of_trimmed_entries_returns_and_leaves_nothing(
    store: RedisStreamStore, groups: RedisGroupStore, topic: str
) -> None:
    offsets = await _append(store, topic, 3)
    await groups.ensure_group(topic, P, G, "earliest")
    await _read(groups, topic, "c1")
    await store.router.cluster.xtrim(log_key(topic, P), maxlen=1, approximate=False)
    await asyncio.sleep(0.12)
    pending = await groups.expired(topic, P, G, min_idle_ms=100, count=10)
    assert [p.offset for p in pending] == offsets
    claimed = await groups.claim(topic, P, G, "c2", pending, min_idle_ms=100)
    assert [(d.entry.offset, d.delivery_count) for d in claimed] == [(offsets[2], 2)]
    assert [r["message_id"].decode() for r in await _pending_rows(store, topic)] == offsets[2:]
    assert (await groups.state(topic, P, G)).pending == 1


async def test_state_reports_lag_last_delivered_and_oldest_pending(
    store: RedisStreamStore, groups: RedisGroupStore, topic: str
) -> None:
    offsets = await _append(store, topic, 5)
    await groups.ensure_group(topic, P, G, "earliest")
    await _read(groups, topic, count=2)
    state = await groups.state(topic, P, G)
    assert (state.exists, state.partition, state.lag, state.pending) == (True, P, 3, 2)
    assert (state.last_delivered_offset, state.oldest_pending_offset) == (offsets[1], offsets[0])
    await groups.ack(topic, P, G, offsets[:1])
    assert (await groups.state(topic, P, G)).oldest_pending_offset == offsets[1]
    await groups.ack(topic, P, G, offsets[1:2])
    assert (await groups.state(topic, P, G)).oldest_pending_offset is None


async def test_state_of_a_missing_group_or_stream_does_not_guess(
    store: RedisStreamStore, groups: RedisGroupStore, topic: str
) -> None:
    missing = await groups.state(topic, P, G)
    assert (missing.exists, missing.pending, missing.lag,
            missing.last_delivered_offset) == (False, 0, None, None)
    await _append(store, topic, 3)
    assert (await groups.state(topic, P, G)).lag is None


async def test_state_lag_is_none_when_redis_cannot_tell(
    store: RedisStreamStore, groups: RedisGroupStore, topic: str
) -> None:
    offsets = await _append(store, topic, 5)
    # an arbitrary start id leaves entries-read unknown
    await groups.ensure_group(topic, P, G, offsets[1])
    await store.router.cluster.xdel(log_key(topic, P), offsets[3])  # a hole after the position
    assert (await groups.state(topic, P, G)).lag is None


async def test_seek_earliest_redelivers_from_the_start(
    store: RedisStreamStore, groups: RedisGroupStore, topic: str
) -> None:
    offsets = await _append(store, topic, 3)
    await groups.ensure_group(topic, P, G, "earliest")
    await groups.ack(topic, P, G, await _read(groups, topic))
    await groups.seek(topic, P, G, "earliest")
    assert await _read(groups, topic) == offsets


async def test_seek_latest_skips_everything_appended_so_far(
    store: RedisStreamStore, groups: RedisGroupStore, topic: str
) -> None:
    await _append(store, topic, 3)
    await groups.ensure_group(topic, P, G, "earliest")
    await groups.seek(topic, P, G, "latest")
    assert await _read(groups, topic) == []
    assert (await groups.state(topic, P, G)).lag == 0
    later = await _append(store, topic, 1)
    assert await _read(groups, topic) == later


async def test_seek_to_offset_keeps_pending_and_creates_missing_group(
    store: RedisStreamStore, groups: RedisGroupStore, topic: str
) -> None:
    offsets = await _append(store, topic, 4)
    await groups.seek(topic, P, G, offsets[1])
    assert await _read(groups, topic, count=1) == offsets[2:3]
    await groups.seek(topic, P, G, offsets[0])
    assert await _read(groups, topic) == offsets[1:]
    assert (await groups.state(topic, P, G)).pending == 3


async def test_read_new_recreates_group_after_stream_deleted(
    store: RedisStreamStore, groups: RedisGroupStore, topic: str
) -> None:
    await _append(store, topic, 2)
    await groups.ensure_group(topic, P, G, "earliest")
    await _read(groups, topic)
    await store.delete_topic(topic, 1)
    assert await groups.groups(topic, P) == []
    assert await groups.read_new(topic, P, G, "c1", count=10, block_ms=0) == []
    assert await groups.groups(topic, P) == [G]
    fresh = await _append(store, topic, 2)
    assert await _read(groups, topic) == fresh


async def test_read_new_recreates_a_destroyed_group_from_earliest(
    store: RedisStreamStore, groups: RedisGroupStore, topic: str
) -> None:
    offsets = await _append(store, topic, 2)
    await groups.ensure_group(topic, P, G, "latest")
    await groups.delete_group(topic, P, G)
    assert await _read(groups, topic) == offsets


async def test_groups_lists_and_delete_group_removes(groups: RedisGroupStore, topic: str) -> None:
    assert await groups.groups(topic, P) == []
    for name in ("a", "b"):
        await groups.ensure_group(topic, P, name, "latest")
    assert sorted(await groups.groups(topic, P)) == ["a", "b"]
    await groups.delete_group(topic, P, "a")
    await groups.delete_group(topic, P, "a")
    await groups.delete_group(topic + "-none", P, "a")
    assert await groups.groups(topic, P) == ["b"]


async def test_operations_on_missing_groups_are_harmless(groups: RedisGroupStore,
                                                         topic: str) -> None:
    assert await groups.ack(topic, P, G, ["1-0"]) == 0
    assert await groups.expired(topic, P, G, min_idle_ms=0, count=10) == []
    await groups.set_idle(topic, P, G, "c1", ["1-0"], 0)


async def test_read_new_follows_moved_from_a_stale_slot_map(
    store: RedisStreamStore, groups: RedisGroupStore, topic: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    offsets = await _append(store, topic, 2)
    await groups.ensure_group(topic, P, G, "earliest")
    router = store.router
    owner = router.node_for_slot(slot_of(topic, P))
    wrong = next(a for a in router.primaries() if a != owner)
    calls: list[int] = []

    def stale_then_right(slot: int) -> tuple[str, int]:
        calls.append(slot)
        return wrong if len(calls) == 1 else owner

    monkeypatch.setattr(router, "node_for_slot", stale_then_right)
    assert await _read(groups, topic) == offsets
    assert len(calls) == 2


async def test_read_until_offset_stops_there_and_leaves_rest_new(
    store: RedisStreamStore, groups: RedisGroupStore, topic: str
) -> None:
    offsets = await _append(store, topic, 6)
    # no group yet: the capped read creates it from the start, like the uncapped one
    first = await groups.read_new(topic, P, G, "c1", count=2, block_ms=0, until=offsets[2])
    assert [e.offset for e in first] == offsets[:2]
    second = await groups.read_new(topic, P, G, "c2", count=100, block_ms=0, until=offsets[2])
    assert [e.offset for e in second] == offsets[2:3]
    assert await groups.read_new(topic, P, G, "c1", count=100, block_ms=0,
                                 until=offsets[2]) == []
    assert await groups.read_new(topic, P, G, "c1", count=100, block_ms=0, until="0-0") == []
    assert await _read(groups, topic) == offsets[3:]
    assert [row["message_id"] for row in await _pending_rows(store, topic)] == [
        o.encode() for o in offsets]
