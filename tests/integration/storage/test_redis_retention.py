"""Retention trimming against a real Redis Cluster: removed counts and unacked entries per group."""

from __future__ import annotations

import asyncio
import time

import pytest

from storage.models import AppendOptions, Record, TrimReport
from storage.redis_store import RedisStreamStore
from storage.retention import offset_for_time

pytestmark = pytest.mark.integration


async def _append(store: RedisStreamStore, topic: str, n: int, partition: int = 0) -> list[str]:
    records = [Record(partition=partition, value=b"%d" % i) for i in range(n)]
    results = await store.append(topic, records, AppendOptions())
    return [r.offset for r in results]


async def test_trim_by_time_removes_older_entries_and_reports_them(store: RedisStreamStore,
                                                                   topic: str) -> None:
    await _append(store, topic, 5)
    await asyncio.sleep(0.01)
    cutoff_ms = int(time.time() * 1000)
    await asyncio.sleep(0.01)
    kept = await _append(store, topic, 3)
    report = await store.retention.trim(topic, 0, min_offset=offset_for_time(cutoff_ms),
                                        max_length=None)
    assert report == TrimReport(0, 5, {})
    assert [e.offset for e in await store.read(topic, 0)] == kept
    assert (await store.retention.trim(topic, 0,
                                       min_offset=offset_for_time(cutoff_ms))).removed == 0


async def test_unacked_pending_and_undelivered_entries_are_reported(store: RedisStreamStore,
                                                                    topic: str) -> None:
    offsets = await _append(store, topic, 10, partition=1)
    groups = store.groups
    await groups.ensure_group(topic, 1, "slow", "earliest")
    assert len(await groups.read_new(topic, 1, "slow", "c1", count=3, block_ms=0)) == 3
    await groups.ensure_group(topic, 1, "acked", "earliest")
    await groups.read_new(topic, 1, "acked", "c1", count=10, block_ms=0)
    await groups.ack(topic, 1, "acked", offsets)
    report = await store.retention.trim(topic, 1, min_offset=offsets[5])
    assert report.removed == 5
    assert report.unacked_removed == {"slow": 5}  # 3 read but not acked + 2 never delivered
    assert report.unacked_removed.get("acked", 0) == 0
    assert (await store.retention.trim(topic, 1, min_offset=offsets[5])).unacked_removed == {}


async def test_max_length_trim_keeps_the_newest(store: RedisStreamStore, topic: str) -> None:
    offsets = await _append(store, topic, 1000, partition=2)
    report = await store.retention.trim(topic, 2, min_offset=None, max_length=100)
    assert report.removed == 900
    info = (await store.partition_info(topic, 3))[2]
    assert (info.length, info.first_offset, info.last_offset) == (100, offsets[900], offsets[-1])


async def test_max_length_counts_a_lagging_group(store: RedisStreamStore, topic: str) -> None:
    await _append(store, topic, 50, partition=3)
    await store.groups.ensure_group(topic, 3, "g", "earliest")
    await store.groups.read_new(topic, 3, "g", "c", count=10, block_ms=0)
    report = await store.retention.trim(topic, 3, max_length=20)
    assert report == TrimReport(3, 30, {"g": 30})


async def test_trimming_a_missing_stream_is_a_zero_report(store: RedisStreamStore,
                                                          topic: str) -> None:
    assert await store.retention.trim(
        topic, 0, min_offset=offset_for_time(int(time.time() * 1000))) == TrimReport(0, 0)
