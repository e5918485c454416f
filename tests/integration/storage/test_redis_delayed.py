"""Delayed messages against a real Redis Cluster (3 primaries + 3 replicas)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from redis.asyncio import Redis

from storage.errors import NotEnoughReplicas
from storage.keys import dedup_key, delayed_data_key, delayed_key, delayed_seq_key, log_key, slot_of
from storage.models import Acks, AppendOptions, Record
from storage.redis_store import RedisStreamStore

pytestmark = [pytest.mark.integration,
              pytest.mark.store_settings(wait_timeout_ms=300, write_deadline_s=5.0)]

PARTITIONS = 12


def _now_ms() -> int:
    return int(time.time() * 1000)


async def _values(store: RedisStreamStore, topic: str, partition: int) -> list[bytes]:
    return [e.value for e in await store.read(topic, partition, limit=10_000)]


async def _replica_of(store: RedisStreamStore, redis_cluster: Any, topic: str,
                      partition: int) -> Any:
    _host, port = store.router.node_for_slot(slot_of(topic, partition))
    for replica in redis_cluster.replicas:
        client = Redis(host="127.0.0.1", port=replica.port, decode_responses=True)
        try:
            info = await client.info("replication")
        finally:
            await client.aclose()
        if int(info.get("master_port", -1)) == port:
            return replica
    raise AssertionError(f"no replica found for primary port {port}")


async def test_messages_reach_the_stream_only_once_due(store: RedisStreamStore, topic: str) -> None:
    now = _now_ms()
    items = [(Record(partition=0, value=b"later"), now + 60_000),
             (Record(partition=0, value=b"now"), now - 1000)]
    scheduled = await store.delayed.schedule(topic, items, AppendOptions())
    assert [r.due_ms for r in scheduled] == [now + 60_000, now - 1000]
    assert await _values(store, topic, 0) == []
    assert await store.delayed.scheduled_count(topic, 0) == 2
    assert await store.delayed.next_due_ms(topic, 0) == now - 1000
    promoted = await store.delayed.promote_due(topic, 0, limit=10)
    assert await _values(store, topic, 0) == [b"now"]
    assert [r.offset for r in promoted] == [e.offset for e in await store.read(topic, 0)]
    assert await store.delayed.scheduled_count(topic, 0) == 1
    assert await store.delayed.next_due_ms(topic, 0) == now + 60_000
    assert await store.delayed.promote_due(topic, 0, limit=10) == []


async def test_schedule_spreads_over_every_primary_in_input_order(store: RedisStreamStore,
                                                                  topic: str) -> None:
    assert len({store.router.node_for_slot(slot_of(topic, p)) for p in range(PARTITIONS)}) == 3
    past = _now_ms() - 1000
    items = [(Record(partition=i % PARTITIONS, value=b"%d" % i), past + i) for i in range(48)]
    results = await store.delayed.schedule(topic, items, AppendOptions(acks=Acks.ALL))
    assert [(r.partition, r.due_ms) for r in results] == [(rec.partition, due)
                                                          for rec, due in items]
    for p in range(PARTITIONS):
        await store.delayed.promote_due(topic, p, limit=100)
        assert await _values(store, topic, p) == [rec.value for rec, _ in items
                                                  if rec.partition == p]


async def test_promoting_many_partitions_at_once_matches_one_by_one(store: RedisStreamStore,
                                                                    topic: str) -> None:
    now = _now_ms()
    items = [(Record(partition=i % PARTITIONS, value=b"%d" % i), now - 1000 + i) for i in range(36)]
    items.append((Record(partition=5, value=b"later"), now + 60_000))
    await store.delayed.schedule(topic, items, AppendOptions())
    promoted = await store.delayed.promote_due_partitions(topic, list(range(PARTITIONS)), limit=2)
    assert sorted(promoted) == list(range(PARTITIONS))  # every primary's partitions in one call
    for p in range(PARTITIONS):
        assert [r.offset for r in promoted[p]] == [e.offset for e in await store.read(topic, p)]
        assert await _values(store, topic, p) == [rec.value for rec, due in items
                                                  if rec.partition == p][:2]
    rest = await store.delayed.promote_due_partitions(topic, list(range(PARTITIONS)), limit=100)
    assert sum(len(results) for results in rest.values()) == 36 - 2 * PARTITIONS
    assert await store.delayed.scheduled_count(topic, 5) == 1
    assert await store.delayed.promote_due_partitions(topic, [], limit=10) == {}


async def test_promotion_follows_due_order_not_schedule_order(store: RedisStreamStore,
                                                              topic: str) -> None:
    base = _now_ms() - 10_000
    dues = [7, 3, 9, 1, 3, 5, 0, 8]
    items = [(Record(partition=1, value=b"%d-%d" % (d, i)), base + d) for i, d in enumerate(dues)]
    await store.delayed.schedule(topic, items[:4], AppendOptions())
    await store.delayed.schedule(topic, items[4:], AppendOptions())
    await store.delayed.promote_due(topic, 1, limit=100)
    expected = [value for _, _, value in sorted((d, i, b"%d-%d" % (d, i))
                                                for i, d in enumerate(dues))]
    assert await _values(store, topic, 1) == expected


async def test_concurrent_promotions_move_each_message_exactly_once(store: RedisStreamStore,
                                                                    topic: str) -> None:
    past = _now_ms() - 1000
    items = [(Record(partition=2, value=b"%04d" % i), past + i) for i in range(400)]
    await store.delayed.schedule(topic, items, AppendOptions())

    async def drain() -> list[str]:
        offsets: list[str] = []
        while batch := await store.delayed.promote_due(topic, 2, limit=25):
            offsets += [r.offset for r in batch]
        return offsets

    per_owner = await asyncio.gather(*(drain() for _ in range(4)))
    offsets = [o for owner in per_owner for o in owner]
    assert len(offsets) == len(set(offsets)) == 400
    entries = await store.read(topic, 2, limit=1000)
    assert sorted(offsets, key=lambda o: tuple(map(int, o.split("-")))) == [e.offset
                                                                            for e in entries]
    assert [e.value for e in entries] == [rec.value for rec, _ in items]
    assert await store.delayed.scheduled_count(topic, 2) == 0


async def test_idempotent_schedule_and_publish_retry_after_promotion(store: RedisStreamStore,
                                                                     topic: str) -> None:
    record = Record(partition=3, value=b"once", idempotency_key="order-1")
    due = _now_ms() - 500
    (first,) = await store.delayed.schedule(topic, [(record, due)], AppendOptions())
    (retry,) = await store.delayed.schedule(topic, [(record, due + 1)], AppendOptions())
    assert (retry.schedule_id, retry.due_ms, retry.duplicate) == (first.schedule_id, due, True)
    assert not first.duplicate
    (promoted,) = await store.delayed.promote_due(topic, 3, limit=10)
    (published,) = await store.append(topic, [record], AppendOptions())
    assert (published.offset, published.duplicate) == (promoted.offset, True)
    (late_retry,) = await store.delayed.schedule(topic, [(record, due)], AppendOptions())
    assert (late_retry.duplicate, late_retry.offset) == (True, promoted.offset)
    assert await _values(store, topic, 3) == [b"once"]
    assert await store.delayed.scheduled_count(topic, 3) == 0


async def test_limit_bounds_one_call(store: RedisStreamStore, topic: str) -> None:
    past = _now_ms() - 1000
    items = [(Record(partition=4, value=b"%d" % i), past) for i in range(7)]
    await store.delayed.schedule(topic, items, AppendOptions())
    assert len(await store.delayed.promote_due(topic, 4, limit=3)) == 3
    assert await store.delayed.scheduled_count(topic, 4) == 4
    assert len(await store.delayed.promote_due(topic, 4, limit=3)) == 3
    assert len(await store.delayed.promote_due(topic, 4, limit=3)) == 1


async def test_acks_all_with_paused_replica_raises_not_enough_replicas(
    store: RedisStreamStore, topic: str, redis_cluster: Any
) -> None:
    replica = await _replica_of(store, redis_cluster, topic, 5)
    items = [(Record(partition=5, value=b"x"), _now_ms() + 60_000)]
    replica.pause()
    try:
        with pytest.raises(NotEnoughReplicas) as caught:
            await store.delayed.schedule(topic, items, AppendOptions(acks=Acks.ALL))
        assert (caught.value.required, caught.value.acknowledged,
                caught.value.partition) == (1, 0, 5)
    finally:
        replica.resume()
    (result,) = await store.delayed.schedule(topic, items, AppendOptions(acks=Acks.ALL))
    assert not result.duplicate


async def test_delete_topic_removes_delayed_keys(store: RedisStreamStore, topic: str) -> None:
    later = _now_ms() + 60_000
    items = [(Record(partition=p, value=b"v", idempotency_key=f"i{p}"), later)
             for p in range(PARTITIONS)]
    await store.delayed.schedule(topic, items, AppendOptions())
    await store.delayed.schedule(topic + "x", items, AppendOptions())
    await store.delete_topic(topic, PARTITIONS)
    cluster = store.router.cluster
    for p in range(PARTITIONS):
        delayed_keys = [delayed_key(topic, p), delayed_data_key(topic, p),
                        delayed_seq_key(topic, p)]
        assert await cluster.exists(*delayed_keys, dedup_key(topic, p, f"i{p}")) == 0
        assert await cluster.exists(log_key(topic, p)) == 0
        assert await store.delayed.scheduled_count(topic + "x", p) == 1
