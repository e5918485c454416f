"""The producer's batching: each topic's messages spread over its own lanes by key (or partition),
one batch of a lane in flight at a time, under one bound on the bytes queued across all topics."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections import deque
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field

from streamgate_client.batch_sender import BatchSender
from streamgate_client.messages import SendResult, body_head


@dataclass(slots=True)
class Batch:
    """Encoded messages that leave in one request, answered through a future per message (``send``)
    or one for the whole batch (``send_many``)."""

    encoded: list[bytes] = field(default_factory=list)
    futures: list[asyncio.Future[SendResult]] = field(default_factory=list)
    whole: asyncio.Future[list[SendResult]] | None = None
    size_bytes: int = 0
    idempotency_key: str = ""  # given when the batch is cut; a retry sends it again


@dataclass(slots=True)
class Lane:
    """Messages of some keys: the open batch, batches cut and waiting, and at most one in flight."""

    open: Batch = field(default_factory=Batch)
    ready: deque[Batch] = field(default_factory=deque)
    busy: bool = False  # a batch of this lane is in flight (or about to leave)
    timer: asyncio.Handle | None = None  # the kick scheduled for its open batch

    def idle(self) -> bool:
        return not (self.busy or self.ready or self.open.encoded or self.timer)


@dataclass(frozen=True, slots=True)
class Batching:
    """How batches are cut: at most ``batch_size`` messages or ``max_batch_bytes``, after
    ``linger_s`` on an idle lane; ``lanes`` per topic."""

    batch_size: int
    max_batch_bytes: int
    linger_s: float
    lanes: int


class Buffer:
    """What every topic's lanes share: the settings, the sender, the batch numbers and the bound on
    the bytes queued or in flight, ``max_bytes`` across all topics (``room`` is set below it)."""

    def __init__(self, batching: Batching, sender: BatchSender, max_bytes: int,
                 producer_id: str) -> None:
        self.batching, self.sender, self.max_bytes = batching, sender, max_bytes
        self.body_head = body_head(sender.acks)
        self.loop = asyncio.get_running_loop()
        self.bytes = 0
        self.room = asyncio.Event()
        self.room.set()
        self.senders: set[asyncio.Task[None]] = set()  # every lane's sender task
        self._producer_id = producer_id
        self._numbers = itertools.count(1)

    def numbered(self, batch: Batch) -> Batch:
        """The batch with its idempotency key: ``<producer id>-<batch number>``; the gateway keys
        its message ``i`` as ``<that>:<i>``, so a retry of the batch writes nothing twice."""
        batch.idempotency_key = f"{self._producer_id}-{next(self._numbers)}"
        return batch

    def take(self, size: int) -> None:
        self.bytes += size
        if self.bytes >= self.max_bytes:
            self.room.clear()

    def release(self, size: int) -> None:
        self.bytes -= size
        if self.bytes < self.max_bytes:
            self.room.set()


class TopicLanes:
    """One topic's lanes: a key's (or partition's) messages always in the same lane, so they are
    written in the order they were sent; keyless ones go round the lanes. Another topic's lanes
    never hold these up, nor fail with them."""

    def __init__(self, topic: str, buffer: Buffer) -> None:
        self.topic = topic
        self.buffer = buffer
        self.lanes = [Lane() for _ in range(buffer.batching.lanes)]
        # copied, not looked up through the buffer: ``enqueue`` runs once per message
        self._loop = buffer.loop
        self._batch_size = buffer.batching.batch_size
        self._max_batch_bytes = buffer.batching.max_batch_bytes
        self._linger_s = buffer.batching.linger_s
        self._next_keyless = itertools.cycle(range(len(self.lanes)))
        self.known = False  # the lanes are set for the topic's partitions
        self._learning: asyncio.Future[int | None] | None = None
        self.drained = asyncio.Event()
        self.drained.set()
        self.cut_since_yield = False
        self._queue_order = asyncio.Lock()

    async def until_queueable(self) -> None:
        """Wait until a message may be queued: the lanes known, room in the buffer."""
        await self._learn()
        await self.buffer.room.wait()

    async def _learn(self) -> None:
        """Before the first message: a topic of one partition gets one lane, so all its messages
        keep their send order. Concurrent callers share one request."""
        if self.known:
            return
        if self._learning is None:
            self._learning = asyncio.ensure_future(self.buffer.sender.partition_count(self.topic))
        if await asyncio.shield(self._learning) == 1 and len(self.lanes) > 1:
            self.lanes = self.lanes[:1]
            self._next_keyless = itertools.cycle([0])
        self.known = True

    @contextlib.asynccontextmanager
    async def whole_calls(self) -> AsyncIterator[None]:
        """Held while a ``send_many`` or ``send_encoded`` queues its batches: the calls queue in
        the order they were made (FIFO), another call's batches never between theirs, once the
        lanes are known and the buffer has room."""
        async with self._queue_order:
            await self.until_queueable()
            yield

    def lane_of(self, key: str | None, partition: int | None) -> int:
        """The lane of a message: one per key (or partition), so their order holds; keyless
        messages, which the gateway spreads anyway, go round the lanes."""
        if partition is not None:
            return partition % len(self.lanes)
        if key is not None:
            return hash(key) % len(self.lanes)
        return next(self._next_keyless)

    def idle_lane(self, key: str | None, partition: int | None) -> Lane | None:
        """The message's lane when it may leave from the caller's task at once (nothing of the
        lane queued or in flight, no linger, room in the buffer), else None."""
        if not self.known or not self.buffer.room.is_set() or self.buffer.batching.linger_s:
            return None
        lane = self.lanes[self.lane_of(key, partition)]
        return lane if lane.idle() else None

    async def send_alone(self, lane: Lane, encoded: bytes) -> SendResult:
        """Deliver one message on an idle lane from the caller's task (no sender task, no future);
        what queued on the lane meanwhile leaves after it."""
        buffer = self.buffer
        batch = buffer.numbered(Batch(encoded=[encoded], size_bytes=len(encoded) + 1))
        lane.busy = True
        buffer.bytes += batch.size_bytes
        self.drained.clear()
        try:
            return (await buffer.sender.publish(self.topic, buffer.body_head + encoded + b"]}",
                                                1, batch.idempotency_key))[0]
        finally:
            buffer.release(batch.size_bytes)
            lane.busy = False
            self._kick(lane)
            self._note_if_drained()

    def enqueue(self, encoded: bytes, lane_index: int) -> asyncio.Future[SendResult]:
        """Queue one message on its lane's open batch; the future of its result."""
        future: asyncio.Future[SendResult] = self._loop.create_future()
        lane = self.lanes[lane_index]
        batch = lane.open
        size = len(encoded) + 1
        if batch.encoded and batch.size_bytes + size > self._max_batch_bytes:
            self._cut(lane)
            batch = lane.open
        batch.encoded.append(encoded)
        batch.futures.append(future)
        batch.size_bytes += size
        self.buffer.take(size)
        self.drained.clear()
        if len(batch.encoded) >= self._batch_size:
            self._cut(lane)
        if not lane.busy and lane.timer is None:
            # with the other messages of this loop turn, or after the linger
            lane.timer = (self._loop.call_later(self._linger_s, self._kick, lane)
                          if self._linger_s else self._loop.call_soon(self._kick, lane))
        return future

    def queue_whole(self, lane_index: int, encoded: Sequence[bytes]
                    ) -> list[asyncio.Future[list[SendResult]]]:
        """Queue ``encoded`` on a lane as batches of their own, behind its open batch, each with
        one future (inside ``whole_calls``)."""
        lane = self.lanes[lane_index]
        self._cut(lane)
        futures = []
        start = 0
        while start < len(encoded):
            batch = self._whole_batch(encoded, start)
            start += len(batch.encoded)
            lane.ready.append(self.buffer.numbered(batch))
            self.buffer.take(batch.size_bytes)
            assert batch.whole is not None
            futures.append(batch.whole)
        if futures:
            self.drained.clear()
            self._kick(lane)
        return futures

    def _whole_batch(self, encoded: Sequence[bytes], start: int) -> Batch:
        """The batch of ``encoded`` from ``start``, as many as the batch limits take."""
        batching = self.buffer.batching
        batch = Batch(whole=self.buffer.loop.create_future())
        for message in itertools.islice(encoded, start, start + batching.batch_size):
            size = len(message) + 1
            if batch.encoded and batch.size_bytes + size > batching.max_batch_bytes:
                break
            batch.encoded.append(message)
            batch.size_bytes += size
        return batch

    def send_open_batches(self) -> None:
        """Send every open batch now (``flush``), without waiting for a linger."""
        for lane in self.lanes:
            self._cut(lane)
            self._kick(lane)

    def _cut(self, lane: Lane) -> None:
        """Close the lane's open batch: it leaves after those before it."""
        if lane.open.encoded:
            lane.ready.append(self.buffer.numbered(lane.open))
            lane.open = Batch()
            self.cut_since_yield = True

    def _kick(self, lane: Lane) -> None:
        """Start the lane's sender unless one is running."""
        if lane.timer is not None:
            lane.timer.cancel()
            lane.timer = None
        if lane.busy or not (lane.ready or lane.open.encoded):
            return
        lane.busy = True
        sender = asyncio.ensure_future(self._send_lane(lane))
        self.buffer.senders.add(sender)
        sender.add_done_callback(self.buffer.senders.discard)

    async def _send_lane(self, lane: Lane) -> None:
        """Send the lane's batches one after another; what gathered meanwhile leaves next."""
        try:
            while True:
                if not lane.ready:
                    self._cut(lane)
                if not lane.ready:
                    return
                batch = lane.ready.popleft()
                await self._deliver(batch)
                self.buffer.release(batch.size_bytes)
        finally:
            lane.busy = False
            self._note_if_drained()

    def _note_if_drained(self) -> None:
        if not any(lane.busy or lane.ready or lane.open.encoded for lane in self.lanes):
            self.drained.set()

    async def _deliver(self, batch: Batch) -> None:
        """Publish the batch and answer its futures: its results, or what failed it for good."""
        body = self.buffer.body_head + b",".join(batch.encoded) + b"]}"
        try:
            results = await self.buffer.sender.publish(self.topic, body, len(batch.encoded),
                                                       batch.idempotency_key)
        except Exception as exc:
            if batch.whole is not None:
                batch.whole.set_exception(exc)
            for future in batch.futures:
                if not future.done():
                    future.set_exception(exc)
            return
        if batch.whole is not None:
            batch.whole.set_result(results)
        for future, result in zip(batch.futures, results, strict=False):
            if not future.done():
                future.set_result(result)
