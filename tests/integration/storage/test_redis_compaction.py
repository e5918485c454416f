"""Compacted partitions on a real cluster: compaction keeps each key's newest message, drops
tombstones, spares what a young snapshot needs; snapshots are consistent as of one offset, and
expire only once messages written after them are older than the lag (never for being idle)."""

from __future__ import annotations

import asyncio

import pytest
from redis.asyncio import Redis

from storage.errors import SnapshotExpired
from storage.keys import compaction_key, key_registry_key, slot_of
from storage.models import AppendOptions, Records, StoredEntry
from storage.redis_store import RedisStreamStore

pytestmark = [pytest.mark.integration, pytest.mark.store_settings(write_deadline_s=3.0)]

COMPACTED = AppendOptions(key_index=True, compact=True)
MINUTE_MS = 60_000
LAG_MS = 200


async def put(store: RedisStreamStore, topic: str, *pairs: tuple[bytes, bytes]) -> str:
    """Append keyed JSON values to partition 0; the last offset."""
    appended = await store.append(topic, Records([0] * len(pairs), [v for _, v in pairs],
                                                 [k for k, _ in pairs]), COMPACTED)
    return appended.offsets[-1]


async def whole_snapshot(store: RedisStreamStore, topic: str, as_of: str,
                         page: int, lag_ms: int = MINUTE_MS) -> list[StoredEntry]:
    entries: list[StoredEntry] = []
    after = None
    while True:
        after, more = await store.snapshot_page(topic, 0, as_of=as_of, after=after, limit=page,
                                                lag_ms=lag_ms)
        entries += more
        if after is None:
            return entries


async def test_compaction_keeps_newest_per_key_and_drops_tombstones(
        store: RedisStreamStore, topic: str) -> None:
    await put(store, topic, (b"a", b"1"), (b"b", b"1"), (b"a", b"2"), (b"c", b"1"),
              (b"a", b"3"), (b"c", b"null"))
    # with no lag, what is older than the primary's current millisecond goes: let it pass the
    # millisecond the entries were written in
    await asyncio.sleep(0.002)
    removed = await store.retention.compact(topic, 0, lag_ms=0)
    assert removed == 4
    assert [(e.key, e.value) for e in await store.read(topic, 0)] == [(b"b", b"1"), (b"a", b"3")]
    assert [e.value for e in await store.key_history(topic, 0, b"a")] == [b"3"]
    assert await store.key_history(topic, 0, b"c") == []
    host, port = store.router.node_for_slot(slot_of(topic, 0))
    node = Redis(host=host, port=port)
    try:
        assert await node.zrange(key_registry_key(topic, 0), 0, -1) == [
            b"sg:{%b/0}:key:a" % topic.encode(), b"sg:{%b/0}:key:b" % topic.encode()]
        assert await node.scard(compaction_key(topic, 0)) == 0
    finally:
        await node.aclose()
    assert await store.retention.compact(topic, 0, lag_ms=0) == 0


async def test_snapshot_is_consistent_at_its_offset_while_keys_change(
        store: RedisStreamStore, topic: str) -> None:
    keys = [b"k%03d" % i for i in range(250)]
    as_of = await put(store, topic, *[(key, b'"old"') for key in keys])
    await put(store, topic, *[(key, b'"new"') for key in keys], (b"k005", b"null"),
              *[(b"n%d" % i, b'"born later"') for i in range(10)])
    snapshot = await whole_snapshot(store, topic, as_of, page=40)
    assert [e.key for e in snapshot] == keys
    assert {e.value for e in snapshot} == {b'"old"'}
    latest = await whole_snapshot(store, topic, await store.last_offset(topic, 0) or "", page=64)
    assert len(latest) == 259  # k005 deleted, the ten later keys in
    assert {e.value for e in latest if e.key and e.key.startswith(b"k")} == {b'"new"'}


async def test_compaction_spares_what_a_young_snapshot_needs(
        store: RedisStreamStore, topic: str) -> None:
    as_of = await put(store, topic, (b"a", b"1"))
    await put(store, topic, (b"a", b"2"))
    assert await store.retention.compact(topic, 0, lag_ms=MINUTE_MS) == 0
    assert [e.value for e in await whole_snapshot(store, topic, as_of, page=10)] == [b"1"]


async def test_a_snapshot_followed_by_messages_older_than_the_lag_has_expired(
        store: RedisStreamStore, topic: str) -> None:
    await put(store, topic, (b"a", b"1"))
    await asyncio.sleep(0.05)  # the message written after the snapshot grows older than the lag
    with pytest.raises(SnapshotExpired):
        await store.snapshot_page(topic, 0, as_of="1-0", lag_ms=10)
    after, empty = await store.snapshot_page(topic, 0, as_of="0-0", lag_ms=10)
    assert (after, empty) == (None, [])


async def past_the_lag() -> None:
    await asyncio.sleep(2 * LAG_MS / 1000)


async def short_lag_snapshot(store: RedisStreamStore, topic: str, as_of: str) -> list[StoredEntry]:
    return await whole_snapshot(store, topic, as_of, page=1, lag_ms=LAG_MS)


async def test_an_idle_partition_keeps_its_snapshot_past_the_lag(
        store: RedisStreamStore, topic: str) -> None:
    last = await put(store, topic, (b"a", b"1"), (b"b", b"1"), (b"a", b"2"))
    await past_the_lag()
    assert await store.retention.compact(topic, 0, lag_ms=LAG_MS) == 1
    assert await store.snapshot_offset(topic, 0) == last
    snapshot = await short_lag_snapshot(store, topic, last)
    assert [(e.key, e.value) for e in snapshot] == [(b"a", b"2"), (b"b", b"1")]


async def test_a_snapshot_now_is_as_of_a_compacted_tombstone(
        store: RedisStreamStore, topic: str) -> None:
    before = await put(store, topic, (b"b", b"1"), (b"a", b"1"))
    tombstone = await put(store, topic, (b"b", b"null"))
    await past_the_lag()
    assert await store.retention.compact(topic, 0, lag_ms=LAG_MS) == 2
    assert await store.last_offset(topic, 0) == before
    assert await store.snapshot_offset(topic, 0) == tombstone
    assert [e.key for e in await short_lag_snapshot(store, topic, tombstone)] == [b"a"]
    # as of before the tombstone, b's value is gone: that snapshot has expired
    with pytest.raises(SnapshotExpired):
        await short_lag_snapshot(store, topic, before)


async def test_an_old_snapshot_lives_while_what_follows_it_is_young(
        store: RedisStreamStore, topic: str) -> None:
    as_of = await put(store, topic, (b"a", b"1"))
    await past_the_lag()
    await put(store, topic, (b"a", b"2"))
    assert [e.value for e in await short_lag_snapshot(store, topic, as_of)] == [b"1"]
    await past_the_lag()
    with pytest.raises(SnapshotExpired):
        await short_lag_snapshot(store, topic, as_of)


async def test_an_empty_partition_snapshots_as_of_zero(store: RedisStreamStore,
                                                       topic: str) -> None:
    assert await store.snapshot_offset(topic, 0) == "0-0"
    assert await short_lag_snapshot(store, topic, "0-0") == []
