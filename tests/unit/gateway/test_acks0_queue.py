"""The acks=0 queue is bounded in bytes as well as in batches: past either, 503 with Retry-After, never a drop."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest
from conftest import InMemoryStreamStore

from gateway.errors import Problem
from gateway.metrics import GatewayMetrics
from gateway.publisher import Publisher
from partitioner.topics import TopicMetadata
from storage.models import AppendOptions, AppendResult, Record

TOPIC = TopicMetadata("t", 1, 60_000, None, 0, "me", 1)


class HeldStore(InMemoryStreamStore):
    """Appends wait until released: the acks=0 writer stays busy and the queue fills."""

    def __init__(self) -> None:
        super().__init__()
        self.release = asyncio.Event()

    async def append(self, topic: str, records: Sequence[Record], options: AppendOptions) -> list[AppendResult]:
        await self.release.wait()
        return await super().append(topic, records, options)


def batch(values: int, size: int) -> list[Record]:
    return [Record(0, b"x" * size, key=b"k") for _ in range(values)]


async def test_queued_bytes_past_the_bound_answer_503_and_nothing_queued_is_lost() -> None:
    store = HeldStore()
    async with Publisher(store, store, GatewayMetrics.create(), 60_000, 100, 2, acks0_queue_bytes=12_000) as publisher:
        publisher.enqueue(TOPIC, batch(10, 500), [None] * 10)  # 5,010 bytes: the writer takes it and waits
        publisher.enqueue(TOPIC, batch(10, 500), [None] * 10)  # 10,020 bytes queued (counted until written)
        with pytest.raises(Problem) as refused:
            publisher.enqueue(TOPIC, batch(1, 2000), [None])  # 12,021 would be over
        assert (refused.value.status, refused.value.retry_after_s) == (503, 2)
        assert "bytes queued" in refused.value.detail
        store.release.set()
        for _ in range(100):
            if publisher.queued_bytes == 0:
                break
            await asyncio.sleep(0.01)
        assert publisher.queued_bytes == 0
        publisher.enqueue(TOPIC, batch(1, 10), [None])  # room again
    assert store.total_entries() == 21  # the refused batch was never queued, so never written


async def test_a_batch_larger_than_the_byte_bound_is_taken_when_the_queue_is_empty() -> None:
    store = InMemoryStreamStore()
    async with Publisher(store, store, GatewayMetrics.create(), 60_000, 100, 1, acks0_queue_bytes=100) as publisher:
        publisher.enqueue(TOPIC, batch(3, 200), [None] * 3)
    assert store.total_entries() == 3
