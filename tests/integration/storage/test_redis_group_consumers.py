"""Consumers inside groups on a real Redis Cluster: listing, removal only when empty, pending paged
by consumer."""

from __future__ import annotations

import pytest

from storage.models import AppendOptions, Record
from storage.redis_store import RedisStreamStore

pytestmark = pytest.mark.integration

P = 0
G = "g"


async def _deliver(store: RedisStreamStore, topic: str, consumer: str, n: int) -> list[str]:
    await store.append(topic, [Record(P, f"m{i}".encode()) for i in range(n)], AppendOptions())
    await store.groups.ensure_group(topic, P, G, "earliest")
    return [e.offset for e in await store.groups.read_new(topic, P, G, consumer, count=n,
                                                          block_ms=0)]


async def test_consumers_are_listed_with_what_they_hold(store: RedisStreamStore,
                                                        topic: str) -> None:
    await _deliver(store, topic, "node-a", 3)
    await _deliver(store, topic, "node-b", 2)
    listed = {c.name: c.pending for c in await store.consumers.consumers(topic, P, G)}
    assert listed == {"node-a": 3, "node-b": 2}
    assert await store.consumers.consumers(topic, P, "no-such-group") == []
    assert await store.consumers.consumers("no-such-topic", P, G) == []


async def test_a_consumer_holding_entries_is_never_removed(store: RedisStreamStore,
                                                           topic: str) -> None:
    offsets = await _deliver(store, topic, "node-a", 3)
    assert not await store.consumers.remove_if_empty(topic, P, G, "node-a")
    assert [c.pending for c in await store.consumers.consumers(topic, P, G)] == [3]
    await store.groups.ack(topic, P, G, offsets)
    assert await store.consumers.remove_if_empty(topic, P, G, "node-a")
    assert await store.consumers.consumers(topic, P, G) == []
    assert await store.consumers.remove_if_empty(topic, P, G, "node-a"), (
        "an absent consumer counts as removed")


async def test_pending_pages_after_offset_and_filters_by_consumer(store: RedisStreamStore,
                                                                          topic: str) -> None:
    mine = await _deliver(store, topic, "node-a", 5)
    await _deliver(store, topic, "node-b", 2)
    first = await store.groups.expired(topic, P, G, min_idle_ms=0, count=2, consumer="node-a")
    assert [p.offset for p in first] == mine[:2]
    rest = await store.groups.expired(topic, P, G, min_idle_ms=0, count=10, consumer="node-a",
                                      after=first[-1].offset)
    assert [p.offset for p in rest] == mine[2:]
    assert {p.consumer
            for p in await store.groups.expired(topic, P, G, min_idle_ms=0, count=10)} == {
        "node-a", "node-b"}
