"""Publishing: placing validated messages on partitions, their idempotency keys in the
publisher's name space, and handing them to storage.

acks=0 batches go through a bounded queue to a background writer: the producer gets 202 as soon as
the batch is queued; a full queue (``acks0_queue_batches`` batches or ``acks0_queue_bytes`` of
values and keys) makes the request wait for room, at most ``acks0_queue_wait_ms`` (as a NATS client
stalls on too many pending async publishes), then answers 503 (never a silent drop); write failures
are counted and logged.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import logging
import time
import uuid
from collections.abc import Sequence
from types import TracebackType
from typing import Protocol

from gateway.errors import invalid_field, unavailable
from gateway.observe.metrics import GatewayMetrics
from gateway.publish.in_flight import InFlight
from gateway.publish.validation import PublishBatch
from partitioner.hashing import KeylessSpreader, partition_for, partitions_of
from partitioner.topics import TopicMetadata
from storage.errors import StorageError, StorageFull
from storage.models import (
    Acks,
    Appended,
    AppendOptions,
    AppendResult,
    Conditions,
    Record,
    Records,
    ScheduledResult,
)
from storage.protocol import StreamStore

# Idempotency keys are stored behind a name space, each principal's apart from every other's and
# the gateway's own writes (dead letters, redrive) apart from all: no principal can see or suppress
# another's writes. No principal's scope starts like this one.
INTERNAL_SCOPE = "i:"


def principal_scope(principal_name: str) -> str:
    """The prefix of a principal's stored keys: the name with its length, so that no two names share
    a prefix (``a`` + ``b:c`` and ``a:b`` + ``c`` stay apart)."""
    return f"p{len(principal_name)}:{principal_name}:"


def internal_key(*parts: object) -> str:
    """A stored key for one of the gateway's own writes, out of every principal's reach."""
    return INTERNAL_SCOPE + ":".join(str(part) for part in parts)


PublishResult = AppendResult | ScheduledResult
Published = Appended | list[PublishResult]  # columns unless some message was scheduled


class Scheduler(Protocol):
    """Where delayed messages wait until due."""

    async def schedule(self, topic: str, items: Sequence[tuple[Record, int]],
                       options: AppendOptions) -> list[ScheduledResult]:
        """Schedule each record for its due time; one result per item, in input order."""
        ...

log = logging.getLogger(__name__)

ACKS0_QUEUE_BYTES = 64 * 1024 * 1024
CONDITIONAL_MARKER_TTL_MS = 5 * 60 * 1000
# messages the acks=0 writer takes from its queue for one round (a bigger batch alone)
ACKS0_ROUND_MESSAGES = 5000

# topic, records, due times (None: all due now), bytes queued
_Acks0Item = tuple[TopicMetadata, Records, list[int | None] | None, int]


def place(batch: PublishBatch, topic: TopicMetadata, spreader: KeylessSpreader,
          scope: str, key_space: bytes = b"") -> Records:
    """Choose each message's partition: explicit, else by key, else by idempotency key, else sticky.

    Idempotency keys are stored behind ``scope``, the publishing principal's name space
    (``principal_scope``), so no other principal's key can match them; message keys' state is
    kept in ``key_space``, the publishing principal's tenant's (``storage.keys.key_identity``). A
    batch idempotent as a whole (``batch_key``) puts its keyless messages where its key hashes,
    so that a retry splits over the partitions as the first attempt did; with acks=0 (joined
    with other batches before the write) its messages get keys of their own,
    ``<batch key>:<i>``.
    """
    idempotency_keys = batch.idempotency_keys
    if batch.partitions is None and idempotency_keys is None:
        # the common publish: keys and sticky (or the batch key's partition) only
        keys = batch.keys
        keyless = 0
        if None in keys:
            keyless = (spreader.for_batch(topic.partitions) if batch.batch_key is None
                       else partition_for(batch.batch_key.encode(), topic.partitions))
        partitions = partitions_of(keys, topic.partitions, keyless)
    else:
        partitions = _place_each(batch, topic, spreader)
    scoped = None if idempotency_keys is None else [None if key is None else scope + key
                                                     for key in idempotency_keys]
    records = Records(partitions, batch.values, batch.keys, batch.formats, batch.headers, scoped,
                      None if batch.batch_key is None else scope + batch.batch_key, key_space)
    return records.with_record_keys() if batch.acks == "0" else records


def _place_each(batch: PublishBatch, topic: TopicMetadata, spreader: KeylessSpreader) -> list[int]:
    partitions = topic.partitions
    keyless_partition: int | None = None
    placed: list[int] = []
    explicit = batch.partitions or [None] * len(batch)
    idempotency_keys = batch.idempotency_keys or [None] * len(batch)
    for index, (partition, key, idempotency_key) in enumerate(zip(explicit, batch.keys,
                                                                  idempotency_keys, strict=True)):
        if partition is not None:
            if partition >= partitions:
                raise invalid_field(f"/messages/{index}/partition",
                                    f"partition {partition} does not exist: topic "
                                    f"{topic.name!r} has {partitions} partitions")
        elif key is not None:
            partition = partition_for(key, partitions)
        elif idempotency_key is not None:
            # A keyless retry must land where the first attempt did, so hash the idempotency key.
            partition = partition_for(idempotency_key.encode(), partitions)
        else:
            if keyless_partition is None:
                keyless_partition = spreader.for_batch(partitions)
            partition = keyless_partition
        placed.append(partition)
    return placed


def _marked_once(records: Records, options: AppendOptions) -> tuple[Records, AppendOptions]:
    """A conditional append without an idempotency key, made idempotent under a marker of its
    own: the store's retry of a write that did land then answers duplicates, not a conflict with
    itself. The marker only has to outlive those retries."""
    records = dataclasses.replace(records, batch_key=internal_key("c", uuid.uuid4().hex))
    return records, dataclasses.replace(options, dedup_ttl_ms=CONDITIONAL_MARKER_TTL_MS)


def append_options(topic: TopicMetadata, acks: Acks, dedup_ttl_ms: int) -> AppendOptions:
    """The storage options for a topic's writes."""
    return AppendOptions(acks=acks, max_length=topic.max_length, dedup_ttl_ms=dedup_ttl_ms,
                         key_index=topic.key_index, compact=topic.compact)


class Publisher:
    """Writes placed records; owns the acks=0 background writer (an async context manager)."""

    def __init__(self, store: StreamStore, scheduler: Scheduler, metrics: GatewayMetrics,
                 dedup_ttl_ms: int, acks0_queue_batches: int, retry_after_s: int,
                 acks0_queue_bytes: int = ACKS0_QUEUE_BYTES, acks0_queue_wait_ms: int = 0) -> None:
        self._store = store
        self._scheduler = scheduler
        self._metrics = metrics
        self._dedup_ttl_ms = dedup_ttl_ms
        self._retry_after_s = retry_after_s
        self._queue: asyncio.Queue[_Acks0Item] = asyncio.Queue(acks0_queue_batches)
        self._queue_bytes_max = acks0_queue_bytes
        self._wait_s = acks0_queue_wait_ms / 1000
        self._room_waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        self.queued_bytes = 0
        self._writer: asyncio.Task[None] | None = None
        # publishes under way per topic: the route's, and each queued acks=0 batch until written
        self.in_flight = InFlight()

    async def __aenter__(self) -> Publisher:
        self._writer = asyncio.create_task(self._drain_acks0(), name="acks0-writer")
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Flush what acks=0 producers were promised (bounded by the store's deadline), then
        stop."""
        if self._writer is None:
            return
        writer, self._writer = self._writer, None
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._queue.join(), timeout=10)
        writer.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await writer

    async def publish(self, topic: TopicMetadata, records: Records, acks: Acks,
                      due_ms: list[int | None] | None = None,
                      conditions: Conditions | None = None) -> Published:
        """Write (or schedule, where ``due_ms`` says so) and wait for the requested durability;
        with ``conditions``, only if they hold (``ConditionFailed`` otherwise)."""
        started = time.perf_counter()
        options = append_options(topic, acks, self._dedup_ttl_ms)
        if conditions is not None and records.idempotency_keys is None \
                and records.batch_key is None:
            records, options = _marked_once(records, options)
        try:
            if due_ms is None:
                results: Published = await self._store.append(topic.name, records, options,
                                                              conditions)
            else:  # scheduled messages take room too: refused whole past the watermark
                self._store.check_room(topic.name, records.partitions)
                results = await self._append_and_schedule(topic, records, options, due_ms)
        except StorageError as exc:
            self._count_failure(topic, acks, exc)
            raise
        self._metrics.publish_latency.labels(acks.value).observe(time.perf_counter() - started)
        return results

    def _count_failure(self, topic: TopicMetadata, acks: Acks, exc: StorageError) -> None:
        self._metrics.publish_failures.labels(topic.name, acks.value, type(exc).__name__).inc()
        if isinstance(exc, StorageFull):
            self._metrics.publish_refused_full.labels(topic.name, exc.reason).inc()

    async def _append_and_schedule(self, topic: TopicMetadata, records: Records,
                                   options: AppendOptions,
                                   due_ms: list[int | None]) -> list[PublishResult]:
        rows = records.rows()
        delayed = [i for i, due in enumerate(due_ms) if due is not None]
        now = [i for i, due in enumerate(due_ms) if due is None]
        scheduled = await self._scheduler.schedule(
            topic.name, [(rows[i], due) for i in delayed if (due := due_ms[i]) is not None],
            options)
        appended = await self._store.append(topic.name, records.taken(now), options) if now else []
        results: list[PublishResult | None] = [None] * len(records)
        for index, result in zip(delayed, scheduled, strict=True):
            results[index] = result
        for index, appended_result in zip(now, appended, strict=True):
            results[index] = appended_result
        return [r for r in results if r is not None]

    def enqueue(self, topic: TopicMetadata, records: Records, due_ms: list[int | None] | None,
                value_bytes: int) -> None:
        """acks=0: queue the batch for the background writer, or 503 when the queue is full.

        Full means ``acks0_queue_batches`` batches, or ``acks0_queue_bytes`` of values and keys
        queued already (a batch on its own is always taken: one larger than the byte bound must not
        be refused forever). 507 when a node the batch would go to is past the publish watermark:
        a batch taken is a batch the writer can write.
        """
        self._check_room(topic, records)
        self._put_acks0(_acks0_item(topic, records, due_ms, value_bytes))

    async def enqueue_waiting(self, topic: TopicMetadata, records: Records,
                              due_ms: list[int | None] | None, value_bytes: int) -> None:
        """``enqueue``, waiting for room first when the queue is full (at most
        ``acks0_queue_wait_ms``)."""
        self._check_room(topic, records)
        await self._put_acks0_waiting(_acks0_item(topic, records, due_ms, value_bytes))

    async def _put_acks0_waiting(self, item: _Acks0Item) -> None:
        if self._room_waiters or not self._fits(item[3]):  # behind earlier waiters, or no room now
            await self._wait_for_room(item[3])
        self._put_acks0(item)

    def _check_room(self, topic: TopicMetadata, records: Records) -> None:
        try:
            self._store.check_room(topic.name, records.partitions)
        except StorageFull as exc:
            self._count_failure(topic, Acks.NONE, exc)
            raise

    def _fits(self, size: int) -> bool:
        return not self._queue.full() and not (self.queued_bytes
                                               and self.queued_bytes + size > self._queue_bytes_max)

    async def _wait_for_room(self, size: int) -> None:
        """Until a batch of ``size`` bytes fits, woken after each round of the writer, for
        ``acks0_queue_wait_ms`` at most (then ``_put_acks0`` answers 503). Waiters are woken
        together and retry in the order they came."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._wait_s
        while not self._fits(size) and (remaining := deadline - loop.time()) > 0:
            waiter: asyncio.Future[None] = loop.create_future()
            self._room_waiters.append(waiter)
            try:
                async with asyncio.timeout(remaining):
                    await waiter
            except TimeoutError:
                return
            finally:
                if not waiter.done():
                    waiter.cancel()

    def _wake_room_waiters(self) -> None:
        waiters, self._room_waiters = self._room_waiters, collections.deque()
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def _put_acks0(self, item: _Acks0Item) -> None:
        size = item[3]
        if self.queued_bytes and self.queued_bytes + size > self._queue_bytes_max:
            raise unavailable(f"the acks=0 write queue is full ({self.queued_bytes} bytes queued)",
                              self._retry_after_s)
        try:
            self._queue.put_nowait(item)
        except asyncio.QueueFull:
            raise unavailable("the acks=0 write queue is full", self._retry_after_s) from None
        self.queued_bytes += size
        self.in_flight.begin(item[0].name)

    async def _drain_acks0(self) -> None:
        """The acks=0 writer: in rounds, each the first queued batch and those queued behind it (up
        to ``ACKS0_ROUND_MESSAGES``), one write per topic and key space (a write has one), the
        writes at once. One batch per round trip was the limit before: under load acks=0 wrote
        slower than acks=1 and answered 503 (its queue full)."""
        while True:
            batches = await self._acks0_round()
            try:
                writes: dict[tuple[str, bytes], list[_Acks0Item]] = {}
                for item in batches:
                    writes.setdefault((item[0].name, item[1].key_space), []).append(item)
                await asyncio.gather(*(self._write_acks0(items) for items in writes.values()))
            finally:
                for topic, _, _, size in batches:
                    self.queued_bytes -= size
                    self._queue.task_done()
                    self.in_flight.end(topic.name)
                self._wake_room_waiters()

    async def _acks0_round(self) -> list[_Acks0Item]:
        batches = [await self._queue.get()]
        messages = len(batches[0][1])
        while messages < ACKS0_ROUND_MESSAGES and not self._queue.empty():
            batches.append(self._queue.get_nowait())
            messages += len(batches[-1][1])
        return batches

    async def _write_acks0(self, batches: list[_Acks0Item]) -> None:
        """One topic's queued batches of one key space as one write, in queue order (so each
        partition keeps each writer's); a failure loses them all, counted (``acks0_lost``) and
        logged, never silently."""
        topic = batches[0][0]
        count = sum(len(records) for _, records, _, _ in batches)
        try:
            records = Records.joined([records for _, records, _, _ in batches])
            due_ms = None
            if any(due is not None for _, _, due, _ in batches):
                due_ms = [d for _, records, due, _ in batches
                          for d in (due or [None] * len(records))]
            await self.publish(topic, records, Acks.LEADER, due_ms)
        except Exception as exc:
            # StorageError, or a defect: the writer must go on with the next round
            self._metrics.publish_messages.labels(topic.name, "acks0_lost").inc(count)
            log.error("acks=0 write of %d messages (%d batches) to %s failed: %r", count,
                      len(batches), topic.name, exc, exc_info=not isinstance(exc, StorageError))


def _acks0_item(topic: TopicMetadata, records: Records, due_ms: list[int | None] | None,
                value_bytes: int) -> _Acks0Item:
    return topic, records, due_ms, value_bytes + sum(len(key) for key in records.keys
                                                     if key is not None)
