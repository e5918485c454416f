"""Partition overviews (length + groups per partition, one pipelined round per node) on the real
cluster."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from storage import redis_store
from storage.keys import slot_of
from storage.models import AppendOptions, Record
from storage.redis_store import RedisStreamStore
from storage.settings import RedisStoreSettings

pytestmark = pytest.mark.integration

PARTITIONS = 9


@pytest.fixture
async def topic(store: RedisStreamStore) -> str:
    """Partitions 0-5 hold 10 entries each; 6-8 have no stream at all. On partition 1, group "a"
    read 4 entries and acked 1; group "b" is caught up with everything acked; on partition 2, group
    "a" never read."""
    name = f"ov-{uuid.uuid4().hex[:10]}"
    await store.append(name, [Record(p, b"v%d" % i) for p in range(6) for i in range(10)],
                       AppendOptions())
    groups = store.groups
    first = await groups.read_new(name, 1, "a", "c1", count=4, block_ms=0)
    await groups.ack(name, 1, "a", [first[0].offset])
    everything = await groups.read_new(name, 1, "b", "c1", count=100, block_ms=0)
    await groups.ack(name, 1, "b", [e.offset for e in everything])
    await groups.ensure_group(name, 2, "a", "earliest")
    return name


async def test_overviews_across_primaries_match_one_by_one_reads(
        store: RedisStreamStore, topic: str) -> None:
    assert len({store.router.node_for_slot(slot_of(topic, p)) for p in range(PARTITIONS)}) == 3
    overviews = await store.partition_overviews(topic, list(range(PARTITIONS)))
    assert sorted(overviews) == list(range(PARTITIONS))
    for partition, overview in overviews.items():
        slow = await store._overview_one(topic, partition)
        assert overview.length == slow.length == (10 if partition < 6 else 0)
        assert overview.groups.keys() == slow.groups.keys()
        for group, state in overview.groups.items():
            expected = slow.groups[group]
            assert (state.last_delivered_offset, state.pending, state.lag) == \
                (expected.last_delivered_offset, expected.pending, expected.lag), (partition, group)
    a1, b1, a2 = overviews[1].groups["a"], overviews[1].groups["b"], overviews[2].groups["a"]
    assert (a1.pending, a1.lag, b1.pending, b1.lag, a2.pending, a2.lag) == (3, 6, 0, 0, 0, 10)
    # XINFO GROUPS does not tell; the lag duty asks XPENDING for it
    assert a1.oldest_pending_offset is None
    assert overviews[7].groups == {}


async def test_unanswered_overviews_take_the_slow_path(
        redis_cluster: Any, topic: str, monkeypatch: pytest.MonkeyPatch) -> None:
    async def nothing_plain(*args: Any) -> dict[int, Any]:
        return {}

    monkeypatch.setattr(redis_store, "read_overviews", nothing_plain)
    settings = RedisStoreSettings(startup_nodes=list(redis_cluster.startup_nodes))
    async with RedisStreamStore(settings) as plain:
        overviews = await plain.partition_overviews(topic, [1, 7])
    assert (overviews[1].length, overviews[1].groups["a"].pending) == (10, 3)
    assert overviews[1].groups["a"].oldest_pending_offset is not None
    assert (overviews[7].length, overviews[7].groups) == (0, {})
