"""RedisStreamStore against a real Redis Cluster (3 primaries + 3 replicas)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from redis.asyncio import Redis

from storage import redis_store
from storage.codec import offset_key
from storage.errors import IdempotencyConflict, InvalidOffset, NotEnoughReplicas
from storage.keys import dedup_key, log_key, slot_of
from storage.models import Acks, AppendOptions, PartitionInfo, Record, Records, ValueFormat
from storage.redis_store import RedisStreamStore
from storage.settings import RedisStoreSettings

pytestmark = [pytest.mark.integration,
              pytest.mark.store_settings(wait_timeout_ms=300, write_deadline_s=5.0)]

PARTITIONS = 12


def _records(n: int, partitions: int = PARTITIONS, **kw: Any) -> list[Record]:
    return [Record(partition=i % partitions, value=f"m{i}".encode(), **kw) for i in range(n)]


async def _replica_of(store: RedisStreamStore, redis_cluster: Any, topic: str,
                      partition: int) -> Any:
    host, port = store.router.node_for_slot(slot_of(topic, partition))
    for replica in redis_cluster.replicas:
        client = Redis(host="127.0.0.1", port=replica.port, decode_responses=True)
        try:
            info = await client.info("replication")
        finally:
            await client.aclose()
        if int(info.get("master_port", -1)) == port:
            return replica
    raise AssertionError(f"no replica found for primary {host}:{port}")


async def test_append_and_read_back_across_primaries_in_order(store: RedisStreamStore,
                                                                         topic: str) -> None:
    primaries = {store.router.node_for_slot(slot_of(topic, p)) for p in range(PARTITIONS)}
    assert len(primaries) == 3, "test topic should spread over every primary"
    records = _records(60)
    results = await store.append(topic, records, AppendOptions())
    assert [r.partition for r in results] == [rec.partition for rec in records]
    assert not any(r.duplicate for r in results)
    for p in range(PARTITIONS):
        entries = await store.read(topic, p, limit=100)
        mine = [res.offset for res in results if res.partition == p]
        assert [e.offset for e in entries] == mine
        assert [e.value for e in entries] == [rec.value for rec in records if rec.partition == p]


async def test_offsets_strictly_increase_per_partition(store: RedisStreamStore, topic: str) -> None:
    first = await store.append(topic, _records(30, 3), AppendOptions())
    second = await store.append(topic, _records(30, 3), AppendOptions())
    for p in range(3):
        offsets = [offset_key(r.offset) for r in [*first, *second] if r.partition == p]
        assert offsets == sorted(offsets)
        assert len(set(offsets)) == len(offsets)


async def test_entry_fields_round_trip(store: RedisStreamStore, topic: str) -> None:
    record = Record(partition=0, value=b'{"a":1}', value_format=ValueFormat.JSON, key=b"\x00k",
                    headers={"x": "y"})
    (result,) = await store.append(topic, [record], AppendOptions())
    (entry,) = await store.read(topic, 0)
    assert (entry.offset, entry.value, entry.value_format) == (result.offset, b'{"a":1}',
                                                               ValueFormat.JSON)
    assert (entry.key, dict(entry.headers)) == (b"\x00k", {"x": "y"})
    assert abs(entry.timestamp_ms - time.time() * 1000) < 60_000


async def test_acks_all_succeeds_with_replicas_up(store: RedisStreamStore, topic: str) -> None:
    results = await store.append(topic, _records(24), AppendOptions(acks=Acks.ALL))
    assert len(results) == 24


async def test_acks_all_with_paused_replica_raises_not_enough_replicas(
    store: RedisStreamStore, topic: str, redis_cluster: Any
) -> None:
    replica = await _replica_of(store, redis_cluster, topic, 0)
    replica.pause()
    try:
        with pytest.raises(NotEnoughReplicas) as caught:
            await store.append(topic, [Record(partition=0, value=b"x")],
                               AppendOptions(acks=Acks.ALL))
        assert (caught.value.required, caught.value.acknowledged) == (1, 0)
        assert caught.value.retriable
    finally:
        replica.resume()
    results = await store.append(topic, [Record(partition=0, value=b"y")],
                                 AppendOptions(acks=Acks.ALL))
    assert not results[0].duplicate


async def test_acks_all_retry_unconfirmed_while_replica_away(
    store: RedisStreamStore, topic: str, redis_cluster: Any
) -> None:
    record = Record(partition=0, value=b"once", idempotency_key="retry-me")
    replica = await _replica_of(store, redis_cluster, topic, 0)
    replica.pause()
    try:
        with pytest.raises(NotEnoughReplicas):
            await store.append(topic, [record], AppendOptions(acks=Acks.ALL))
        # The retry (on fresh connections, as after a gateway restart) finds the dedup key; it must
        # still wait for replication of the first write, not report a success.
        async with RedisStreamStore(store.settings) as fresh:
            with pytest.raises(NotEnoughReplicas):
                await fresh.append(topic, [record], AppendOptions(acks=Acks.ALL))
    finally:
        replica.resume()
    [result] = await store.append(topic, [record], AppendOptions(acks=Acks.ALL))
    assert result.duplicate


async def test_acks_leader_ignores_paused_replica(store: RedisStreamStore, topic: str,
                                                  redis_cluster: Any) -> None:
    replica = await _replica_of(store, redis_cluster, topic, 0)
    replica.pause()
    try:
        results = await store.append(topic, [Record(partition=0, value=b"x")], AppendOptions())
    finally:
        replica.resume()
    assert len(results) == 1


async def test_idempotent_retry_returns_first_offset_without_growing(store: RedisStreamStore,
                                                                     topic: str) -> None:
    records = [Record(partition=p, value=b"v", idempotency_key=f"id-{p}")
               for p in range(PARTITIONS)]
    first = await store.append(topic, records, AppendOptions(acks=Acks.ALL))
    again = await store.append(topic, records, AppendOptions(acks=Acks.ALL))
    assert [r.offset for r in again] == [r.offset for r in first]
    assert all(r.duplicate for r in again)
    assert not any(r.duplicate for r in first)
    infos = await store.partition_info(topic, PARTITIONS)
    assert [i.length for i in infos] == [1] * PARTITIONS


def _batch(values: list[bytes], batch_key: str) -> Records:
    """Keyed records over every partition, idempotent as one batch."""
    keys: list[bytes | None] = [b"k%d" % i for i in range(len(values))]
    return Records([i % PARTITIONS for i in range(len(values))], values, keys,
                   batch_key=batch_key)


async def test_batch_key_retry_answers_first_offsets_as_duplicates(
        store: RedisStreamStore, topic: str) -> None:
    values = [b"%d" % i for i in range(40)]
    first = await store.append(topic, _batch(values, "p1:a:batch-1"), AppendOptions(acks=Acks.ALL))
    again = await store.append(topic, _batch(values, "p1:a:batch-1"), AppendOptions(acks=Acks.ALL))
    other = await store.append(topic, _batch(values[:3], "p1:a:batch-2"), AppendOptions())
    assert [r.offset for r in again] == [r.offset for r in first]
    assert all(r.duplicate for r in again)
    assert not any(r.duplicate for r in first)
    assert not any(r.duplicate for r in other)
    infos = await store.partition_info(topic, PARTITIONS)
    assert sum(i.length for i in infos) == 43
    for partition in range(PARTITIONS):
        mine = values[partition::PARTITIONS]
        stored = await store.read(topic, partition, limit=100)
        assert [e.value for e in stored][:len(mine)] == mine


async def test_batch_key_reused_for_other_size_is_refused(
        store: RedisStreamStore, topic: str) -> None:
    await store.append(topic, Records([0, 0], [b"a", b"b"], [None, None], batch_key="p1:a:reused"),
                       AppendOptions())
    with pytest.raises(IdempotencyConflict):
        await store.append(topic, Records([0, 0, 0], [b"a", b"b", b"c"], [None, None, None],
                                          batch_key="p1:a:reused"), AppendOptions())
    assert [e.value for e in await store.read(topic, 0)] == [b"a", b"b"]


async def test_batch_key_acks_all_retry_waits_for_the_replica(
    store: RedisStreamStore, topic: str, redis_cluster: Any
) -> None:
    batch = Records([0, 0], [b"x", b"y"], [None, None], batch_key="p1:a:once")
    replica = await _replica_of(store, redis_cluster, topic, 0)
    replica.pause()
    try:
        with pytest.raises(NotEnoughReplicas):
            await store.append(topic, batch, AppendOptions(acks=Acks.ALL))
        async with RedisStreamStore(store.settings) as fresh:
            with pytest.raises(NotEnoughReplicas):
                await fresh.append(topic, batch, AppendOptions(acks=Acks.ALL))
    finally:
        replica.resume()
    results = await store.append(topic, batch, AppendOptions(acks=Acks.ALL))
    assert [r.duplicate for r in results] == [True, True]


async def test_idempotency_key_twice_in_one_batch_is_a_duplicate(store: RedisStreamStore,
                                                                      topic: str) -> None:
    records = [
        Record(partition=1, value=b"a", idempotency_key="k"),
        Record(partition=1, value=b"b"),
        Record(partition=1, value=b"c", idempotency_key="k"),
    ]
    results = await store.append(topic, records, AppendOptions())
    assert results[2].offset == results[0].offset
    assert results[2].duplicate
    assert [e.value for e in await store.read(topic, 1)] == [b"a", b"b"]


async def test_maxlen_bounds_the_stream(store: RedisStreamStore, topic: str) -> None:
    options = AppendOptions(max_length=100)
    for _ in range(10):
        await store.append(topic, _records(200, 1), options)
    (info,) = await store.partition_info(topic, 1)
    # MAXLEN ~ trims whole macro nodes (100 entries each by default): bounded, not exact.
    assert 100 <= info.length <= 300


async def test_read_after_is_exclusive_and_limit_applies(store: RedisStreamStore,
                                                         topic: str) -> None:
    results = await store.append(topic, _records(10, 1), AppendOptions())
    offsets = [r.offset for r in results]
    page = await store.read(topic, 0, after=offsets[2], limit=3)
    assert [e.offset for e in page] == offsets[3:6]
    assert await store.read(topic, 0, after=offsets[-1]) == []


async def test_read_from_time_starts_at_that_millisecond(store: RedisStreamStore,
                                                         topic: str) -> None:
    before = await store.append(topic, _records(3, 1), AppendOptions())
    await asyncio.sleep(0.01)
    after = await store.append(topic, _records(3, 1), AppendOptions())
    start_ms = offset_key(after[0].offset)[0]
    entries = await store.read(topic, 0, from_time_ms=start_ms)
    assert [e.offset for e in entries] == [r.offset for r in after]
    assert all(e.timestamp_ms >= start_ms for e in entries)
    assert len(await store.read(topic, 0, from_time_ms=0)) == len(before) + len(after)


@pytest.mark.parametrize("pipelined", [True, False], ids=["pipelined", "one-by-one"])
async def test_last_offsets_across_nodes_match_one_by_one(
        redis_cluster: Any, topic: str, pipelined: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    async def nothing_plain(*args: Any) -> dict[int, Any]:
        return {}

    if not pipelined:  # as if no node answered plainly: every partition read on its own
        monkeypatch.setattr(redis_store, "read_last_offsets", nothing_plain)
    settings = RedisStoreSettings(startup_nodes=list(redis_cluster.startup_nodes),
                                  write_deadline_s=5.0)
    async with RedisStreamStore(settings) as store:
        # two left empty
        results = await store.append(topic, _records(3 * PARTITIONS - 5), AppendOptions())
        newest = {r.partition: r.offset for r in results}
        nodes = {store.router.node_for_slot(slot_of(topic, p)) for p in range(PARTITIONS + 2)}
        assert len(nodes) == 3, "the partitions spread over every primary"
        found = await store.last_offsets(topic, range(PARTITIONS + 2))
        assert list(found) == list(range(PARTITIONS + 2))  # in the order asked
        assert found == {p: newest.get(p) for p in range(PARTITIONS + 2)}
        assert found == {p: await store.last_offset(topic, p) for p in range(PARTITIONS + 2)}


async def test_read_rejects_malformed_offsets(store: RedisStreamStore, topic: str) -> None:
    for bad in ["abc", "1-", "-1", "1-2-3", "latest", " 1-2"]:
        with pytest.raises(InvalidOffset):
            await store.read(topic, 0, after=bad)


async def test_last_offset_and_partition_info(store: RedisStreamStore, topic: str) -> None:
    assert await store.last_offset(topic, 0) is None
    results = await store.append(topic, _records(5, 1), AppendOptions())
    assert await store.last_offset(topic, 0) == results[-1].offset
    infos = await store.partition_info(topic, 3)
    assert infos[0] == PartitionInfo(0, 5, results[0].offset, results[-1].offset)
    assert infos[1:] == [PartitionInfo(1, 0, None, None), PartitionInfo(2, 0, None, None)]


async def test_delete_topic_removes_logs_and_dedup_keys(store: RedisStreamStore,
                                                        topic: str) -> None:
    other = topic + "x"
    records = [Record(partition=p, value=b"v", idempotency_key=f"i{p}") for p in range(PARTITIONS)]
    await store.append(topic, records, AppendOptions())
    await store.append(other, records, AppendOptions())
    await store.delete_topic(topic, PARTITIONS)
    cluster = store.router.cluster
    assert await cluster.exists(*[log_key(topic, p) for p in range(1)]) == 0
    for p in range(PARTITIONS):
        assert await cluster.exists(log_key(topic, p), dedup_key(topic, p, f"i{p}")) == 0
    assert [i.length for i in await store.partition_info(other, PARTITIONS)] == [1] * PARTITIONS


async def test_ping_reports_a_healthy_cluster(store: RedisStreamStore) -> None:
    await store.ping()


async def test_aclose_is_idempotent(redis_cluster: Any) -> None:
    store = RedisStreamStore(RedisStoreSettings(startup_nodes=list(redis_cluster.startup_nodes)))
    async with store:
        await store.ping()
    await store.aclose()
