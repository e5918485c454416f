"""The acks=0 queue is bounded in bytes as well as in batches: past either, 503 with Retry-After,
never a drop."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from gateway.errors import Problem
from gateway.observe.metrics import GatewayMetrics
from gateway.publish.publisher import ACKS0_ROUND_MESSAGES, Publisher
from partitioner.topics import TopicMetadata
from storage.errors import StorageUnavailable
from storage.models import Appended, AppendOptions, Conditions, Record, Records
from tests.unit.gateway.memory_store import InMemoryStreamStore

TOPIC = TopicMetadata("t", 1, 60_000, None, 0, "me", 1)


class HeldStore(InMemoryStreamStore):
    """Appends wait until released: the acks=0 writer stays busy and the queue fills."""

    def __init__(self) -> None:
        super().__init__()
        self.release = asyncio.Event()

    async def append(self, topic: str, records: Records | Sequence[Record],
                     options: AppendOptions, conditions: Conditions | None = None) -> Appended:
        await self.release.wait()
        return await super().append(topic, records, options, conditions)


def batch(values: int, size: int) -> Records:
    return Records([0] * values, [b"x" * size] * values, [b"k"] * values)


def enqueue(publisher: Publisher, topic: TopicMetadata, records: Records,
            due_ms: list[int | None] | None = None) -> None:
    publisher.enqueue(topic, records, due_ms, sum(map(len, records.values)))


async def enqueue_waiting(publisher: Publisher, topic: TopicMetadata, records: Records) -> None:
    await publisher.enqueue_waiting(topic, records, None, sum(map(len, records.values)))


async def test_queue_past_its_byte_bound_answers_503() -> None:
    store = HeldStore()
    async with Publisher(store, store, GatewayMetrics.create(), 60_000, 100, 2,
                         acks0_queue_bytes=12_000) as publisher:
        enqueue(publisher, TOPIC, batch(10, 500))  # 5,010 bytes: the writer takes it and waits
        enqueue(publisher, TOPIC, batch(10, 500))  # 10,020 bytes queued (counted until written)
        with pytest.raises(Problem) as refused:
            enqueue(publisher, TOPIC, batch(1, 2000))  # 12,021 would be over
        assert (refused.value.status, refused.value.retry_after_s) == (503, 2)
        assert "bytes queued" in refused.value.detail
        store.release.set()
        for _ in range(100):
            if publisher.queued_bytes == 0:
                break
            await asyncio.sleep(0.01)
        assert publisher.queued_bytes == 0
        enqueue(publisher, TOPIC, batch(1, 10))  # room again
    assert store.total_entries() == 21  # the refused batch was never queued, so never written


async def test_oversized_batch_is_taken_into_an_empty_queue() -> None:
    store = InMemoryStreamStore()
    async with Publisher(store, store, GatewayMetrics.create(), 60_000, 100, 1,
                         acks0_queue_bytes=100) as publisher:
        enqueue(publisher, TOPIC, batch(3, 200))
    assert store.total_entries() == 3


class RecordingStore(HeldStore):
    """A HeldStore that remembers each append's topic and values, and can fail a topic's appends."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, list[bytes]]] = []
        self.failing: dict[str, Exception] = {}

    async def append(self, topic: str, records: Records | Sequence[Record],
                     options: AppendOptions, conditions: Conditions | None = None) -> Appended:
        assert isinstance(records, Records)
        self.calls.append((topic, list(records.values)))
        if topic in self.failing:
            raise self.failing[topic]
        return await super().append(topic, records, options, conditions)


def numbered(start: int, count: int, partition: int = 0) -> Records:
    return Records([partition] * count, [b"%d" % i for i in range(start, start + count)],
                   [None] * count)


OTHER = TopicMetadata("other", 2, 60_000, None, 0, "me", 1)


async def _drained(publisher: Publisher) -> None:
    for _ in range(200):
        if publisher.queued_bytes == 0:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the acks=0 queue did not drain")


async def test_queued_batches_leave_together_per_topic() -> None:
    store = RecordingStore()
    async with Publisher(store, store, GatewayMetrics.create(), 60_000, 100, 1) as publisher:
        enqueue(publisher, TOPIC, numbered(0, 2))  # taken alone: the writer waits on it
        await asyncio.sleep(0)
        enqueue(publisher, TOPIC, numbered(2, 3))
        enqueue(publisher, OTHER, numbered(100, 2, partition=1))
        enqueue(publisher, TOPIC, numbered(5, 1))
        store.release.set()
        await _drained(publisher)
    assert store.calls == [("t", [b"0", b"1"]), ("t", [b"2", b"3", b"4", b"5"]),
                           ("other", [b"100", b"101"])]
    assert [e.value for e in store.streams[("t", 0)]] == [b"%d" % i for i in range(6)]


async def test_failed_acks0_write_is_counted_lost() -> None:
    store, metrics = RecordingStore(), GatewayMetrics.create()
    store.failing = {"t": StorageUnavailable("redis is down (test)"),
                     "other": RuntimeError("a defect (test)")}
    store.release.set()
    async with Publisher(store, store, metrics, 60_000, 100, 1) as publisher:
        enqueue(publisher, TOPIC, numbered(0, 3))
        enqueue(publisher, OTHER, numbered(0, 2))
        await _drained(publisher)
        del store.failing["t"]
        enqueue(publisher, TOPIC, numbered(3, 1))
        await _drained(publisher)
    lost = {topic: metrics.publish_messages.labels(topic, "acks0_lost").value
            for topic in ("t", "other")}
    assert lost == {"t": 3, "other": 2}
    assert [e.value for e in store.streams[("t", 0)]] == [b"3"]


async def test_a_round_stops_taking_batches_past_its_message_bound() -> None:
    store = RecordingStore()
    async with Publisher(store, store, GatewayMetrics.create(), 60_000, 100, 1) as publisher:
        enqueue(publisher, TOPIC, numbered(0, 1))
        await asyncio.sleep(0)
        for start in range(1, 1 + 3 * ACKS0_ROUND_MESSAGES, ACKS0_ROUND_MESSAGES // 2):
            enqueue(publisher, TOPIC, numbered(start, ACKS0_ROUND_MESSAGES // 2))
        store.release.set()
        await _drained(publisher)
    assert [len(values) for _, values in store.calls] == [1] + [ACKS0_ROUND_MESSAGES] * 3
    assert [e.value for e in store.streams[("t", 0)]] == [
        b"%d" % i for i in range(1 + 3 * ACKS0_ROUND_MESSAGES)]


async def test_queued_batches_of_a_topic_are_one_publish() -> None:
    store = RecordingStore()
    due = 4_000_000_000_000
    async with Publisher(store, store, GatewayMetrics.create(), 60_000, 100, 1) as publisher:
        enqueue(publisher, OTHER, numbered(0, 1))  # taken alone: the writer waits on it
        await asyncio.sleep(0)
        enqueue(publisher, TOPIC, numbered(0, 2))
        enqueue(publisher, TOPIC, numbered(2, 1), [due])
        enqueue(publisher, TOPIC, numbered(3, 1))
        assert publisher.queued_bytes == 1 + 2 + 1 + 1
        store.release.set()
        await _drained(publisher)
    assert ("t", [b"0", b"1", b"3"]) in store.calls  # one write for the three batches' due messages
    assert [e.value for e in store.streams[("t", 0)]] == [b"0", b"1", b"3"]
    assert [(topic, record.value, at)
            for topic, record, at in store.scheduled] == [("t", b"2", due)]


def keyless(count: int, size: int) -> Records:
    return Records([0] * count, [b"x" * size] * count, [None] * count)


async def test_full_queue_makes_acks0_wait_for_room() -> None:
    store = HeldStore()
    async with Publisher(store, store, GatewayMetrics.create(), 60_000, 1, 1,
                         acks0_queue_wait_ms=5_000) as publisher:
        await enqueue_waiting(publisher, TOPIC, keyless(2, 10))  # taken by the writer, which waits
        await asyncio.sleep(0)
        await enqueue_waiting(publisher, TOPIC, keyless(3, 10))  # fills the queue of one batch
        with pytest.raises(Problem):
            enqueue(publisher, TOPIC, keyless(1, 10))  # the queue is full: no waiting, 503
        waiting = [asyncio.ensure_future(enqueue_waiting(publisher, TOPIC, keyless(1, 10))),
                   asyncio.ensure_future(enqueue_waiting(publisher, TOPIC, batch(1, 10)))]
        await asyncio.sleep(0.05)
        assert not any(task.done() for task in waiting)  # waiting, not refused
        store.release.set()  # the writer's rounds free room: both are taken, in turn
        await asyncio.wait_for(asyncio.gather(*waiting), 5)
    assert store.total_entries() == 7


async def test_acks0_is_503_when_no_room_frees() -> None:
    store = HeldStore()
    async with Publisher(store, store, GatewayMetrics.create(), 60_000, 1, 2,
                         acks0_queue_wait_ms=50) as publisher:
        await enqueue_waiting(publisher, TOPIC, keyless(1, 10))
        await asyncio.sleep(0)
        await enqueue_waiting(publisher, TOPIC, keyless(1, 10))
        loop = asyncio.get_running_loop()
        started = loop.time()
        with pytest.raises(Problem) as refused:
            await enqueue_waiting(publisher, TOPIC, keyless(1, 10))
        # it waited (the loop's clock may be whole milliseconds)
        assert loop.time() - started >= 0.045
        assert (refused.value.status, refused.value.retry_after_s) == (503, 2)
        store.release.set()
    assert store.total_entries() == 2  # the refused batch was never queued, so never written
