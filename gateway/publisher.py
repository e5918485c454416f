"""Publishing: placing validated messages on partitions and handing them to storage.

acks=0 batches go through a bounded queue to a background writer: the producer gets 202 as soon as the
batch is queued; a full queue (``acks0_queue_batches`` batches or ``acks0_queue_bytes`` of values and keys)
answers 503 (never a silent drop); write failures are counted and logged.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Sequence
from types import TracebackType
from typing import Protocol

from gateway.errors import invalid_field, unavailable
from gateway.metrics import GatewayMetrics
from gateway.validation import PlainBatch, PublishBatch
from partitioner.hashing import KeylessSpreader, partition_for, partitions_of
from partitioner.topics import TopicMetadata
from storage.errors import StorageError
from storage.models import Acks, AppendOptions, AppendResult, PlainRecords, Record, ScheduledResult, new_record
from storage.protocol import StreamStore

PublishResult = AppendResult | ScheduledResult


class Scheduler(Protocol):
    """Where delayed messages wait until due."""

    async def schedule(self, topic: str, items: Sequence[tuple[Record, int]],
                       options: AppendOptions) -> list[ScheduledResult]:
        """Schedule each record for its due time; one result per item, in input order."""
        ...

log = logging.getLogger(__name__)

ACKS0_QUEUE_BYTES = 64 * 1024 * 1024


def place(batch: PublishBatch, topic: TopicMetadata, spreader: KeylessSpreader) -> list[Record]:
    """Choose each message's partition: explicit, else by key, else by idempotency key, else sticky."""
    partitions = topic.partitions
    keyless_partition: int | None = None
    records: list[Record] = []
    append, place_key, make = records.append, partition_for, new_record
    for index, message in enumerate(batch.messages):
        value, value_format, key, headers, partition, idempotency_key, _ = message
        if partition is not None:
            if partition >= partitions:
                raise invalid_field(f"/messages/{index}/partition",
                                    f"partition {partition} does not exist: topic "
                                    f"{topic.name!r} has {partitions} partitions")
        elif key is not None:
            partition = place_key(key, partitions)
        elif idempotency_key is not None:
            # A keyless retry must land where the first attempt did, so hash the idempotency key.
            partition = partition_for(idempotency_key.encode(), partitions)
        else:
            if keyless_partition is None:
                keyless_partition = spreader.for_batch(partitions)
            partition = keyless_partition
        append(make(partition, value, value_format, key, headers, idempotency_key))
    return records


def place_plain(batch: PlainBatch, topic: TopicMetadata, spreader: KeylessSpreader) -> list[int]:
    """Each plain message's partition: by key, else the batch's sticky keyless partition."""
    keys = batch.keys
    keyless = spreader.for_batch(topic.partitions) if None in keys else 0
    return partitions_of(keys, topic.partitions, keyless)


def append_options(topic: TopicMetadata, acks: Acks, dedup_ttl_ms: int) -> AppendOptions:
    """The storage options for a topic's writes."""
    return AppendOptions(acks=acks, max_length=topic.max_length, dedup_ttl_ms=dedup_ttl_ms)


class Publisher:
    """Writes placed records; owns the acks=0 background writer (an async context manager)."""

    def __init__(self, store: StreamStore, scheduler: Scheduler, metrics: GatewayMetrics, dedup_ttl_ms: int,
                 acks0_queue_batches: int, retry_after_s: int, acks0_queue_bytes: int = ACKS0_QUEUE_BYTES) -> None:
        self._store = store
        self._scheduler = scheduler
        self._metrics = metrics
        self._dedup_ttl_ms = dedup_ttl_ms
        self._retry_after_s = retry_after_s
        self._queue: asyncio.Queue[tuple[TopicMetadata, list[Record], list[int | None], int]] = asyncio.Queue(
            acks0_queue_batches)
        self._queue_bytes_max = acks0_queue_bytes
        self.queued_bytes = 0
        self._writer: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Publisher:
        self._writer = asyncio.create_task(self._drain_acks0(), name="acks0-writer")
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Flush what acks=0 producers were promised (bounded by the store's deadline), then stop."""
        if self._writer is None:
            return
        writer, self._writer = self._writer, None
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._queue.join(), timeout=10)
        writer.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await writer

    async def publish(self, topic: TopicMetadata, records: Sequence[Record], acks: Acks,
                      due_ms: Sequence[int | None] = ()) -> list[PublishResult]:
        """Write (or schedule, where ``due_ms`` says so) and wait for the requested durability."""
        started = time.perf_counter()
        options = append_options(topic, acks, self._dedup_ttl_ms)
        delayed = [i for i, due in enumerate(due_ms) if due is not None]
        try:
            if not delayed:
                results: list[PublishResult] = list(await self._store.append(topic.name, records, options))
            else:
                results = await self._append_and_schedule(topic, records, options, due_ms, delayed)
        except StorageError as exc:
            self._count_failure(topic, acks, exc)
            raise
        self._metrics.child(self._metrics.publish_latency, acks.value).observe(time.perf_counter() - started)
        return results

    async def publish_plain(self, topic: TopicMetadata, records: PlainRecords, acks: Acks) -> list[str]:
        """``publish`` of plain records (the hot path, as columns): their offsets, in input order."""
        started = time.perf_counter()
        try:
            offsets = await self._store.append_plain(topic.name, records,
                                                     append_options(topic, acks, self._dedup_ttl_ms))
        except StorageError as exc:
            self._count_failure(topic, acks, exc)
            raise
        self._metrics.child(self._metrics.publish_latency, acks.value).observe(time.perf_counter() - started)
        return offsets

    def _count_failure(self, topic: TopicMetadata, acks: Acks, exc: StorageError) -> None:
        self._metrics.publish_failures.labels(topic.name, acks.value, type(exc).__name__).inc()

    async def _append_and_schedule(self, topic: TopicMetadata, records: Sequence[Record], options: AppendOptions,
                                   due_ms: Sequence[int | None], delayed: list[int]) -> list[PublishResult]:
        now = [i for i in range(len(records)) if i not in set(delayed)]
        scheduled = await self._scheduler.schedule(
            topic.name, [(records[i], due) for i in delayed if (due := due_ms[i]) is not None], options)
        appended = await self._store.append(topic.name, [records[i] for i in now], options) if now else []
        results: list[PublishResult | None] = [None] * len(records)
        for index, result in zip(delayed, scheduled, strict=True):
            results[index] = result
        for index, appended_result in zip(now, appended, strict=True):
            results[index] = appended_result
        return [r for r in results if r is not None]

    def enqueue(self, topic: TopicMetadata, records: list[Record], due_ms: list[int | None]) -> None:
        """acks=0: queue the batch for the background writer, or 503 when the queue is full.

        Full means ``acks0_queue_batches`` batches, or ``acks0_queue_bytes`` of values and keys queued already (a
        batch on its own is always taken: one larger than the byte bound must not be refused forever).
        """
        size = sum(len(record.value) + len(record.key or b"") for record in records)
        if self.queued_bytes and self.queued_bytes + size > self._queue_bytes_max:
            raise unavailable(f"the acks=0 write queue is full ({self.queued_bytes} bytes queued)",
                              self._retry_after_s)
        try:
            self._queue.put_nowait((topic, records, due_ms, size))
        except asyncio.QueueFull:
            raise unavailable("the acks=0 write queue is full", self._retry_after_s) from None
        self.queued_bytes += size

    async def _drain_acks0(self) -> None:
        while True:
            topic, records, due_ms, size = await self._queue.get()
            try:
                await self.publish(topic, records, Acks.LEADER, due_ms)
            except StorageError as exc:
                self._metrics.publish_messages.labels(topic.name, "acks0_lost").inc(len(records))
                log.error("acks=0 batch of %d messages to %s was not written: %s",
                          len(records), topic.name, exc)
            finally:
                self.queued_bytes -= size
                self._queue.task_done()
