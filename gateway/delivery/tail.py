"""Shared broadcast tails: one blocking reader per (topic, partition) per process, each page encoded
once.

A broadcast session follows each partition through a ``TailFollower``. A follower behind the end of
the stream reads pages after its own position (XRANGE), as the session's credit allows. Once a read
reaches the end and the partition's tail has not moved meanwhile, the follower joins the tail: from
then on the tail's blocking read (XREAD BLOCK, no polling) feeds every joined follower the same
pre-encoded frames, and a follower that runs out of credit mid-page is detached at the last entry it
took and catches up on its own again. The first follower to reach the end starts the tail at its own
position; a tail with no follower left stops after its current read. A slow socket therefore never
slows the tail or the other sessions.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from types import TracebackType
from typing import Protocol

from gateway.delivery.expiry import BroadcastCounts, is_expired, may_expire, now_ms, report_expired
from gateway.delivery.filters import HeaderFilter
from gateway.delivery.growth_gate import GATE_POLL_S, Gate, session_consumed
from gateway.delivery.session import Session, Waker
from gateway.delivery.wire import message_frame
from gateway.observe.tracing import delivery_span, spans_on
from partitioner.topics import TopicMetadata
from storage.codec import offset_key
from storage.errors import StorageError
from storage.groups_protocol import GroupStore
from storage.models import StoredEntry
from storage.protocol import StreamStore

log = logging.getLogger(__name__)

TAIL_PAGE = 1000
TAIL_BLOCK_MS = 200
CATCH_UP_PAGE = 500
IDLE_POLL_S = 0.05
ERROR_BACKOFF_S = 0.5
STOP_WAIT_S = 2.0

TailKey = tuple[str, int]


class TailFollower:
    """One session's position in one partition, either catching up on its own or fed by the tail."""

    __slots__ = ("after", "counts", "from_time_ms", "gate", "joined", "partition", "session",
                 "skip_through", "wake")

    def __init__(self, session: Session, partition: int, after: str | None, counts: BroadcastCounts,
                 wake: Waker) -> None:
        self.session = session
        self.partition = partition
        self.after = after  # every entry up to here was offered (or filtered out)
        self.from_time_ms = session.params.from_time_ms if after is None else None
        self.joined = False
        # joined ahead of the tail: skip what it re-reads
        self.skip_through: tuple[int, int] | None = None
        self.counts = counts
        self.wake = wake
        self.gate: Gate | None = None  # the session's growth gate, for a grown topic

    def offer(self, entries: list[StoredEntry], frames: list[bytes] | None, offsets: list[str],
              frames_bytes: int | None = None) -> bool:
        """Offer a page (frames pre-encoded by the tail, or None to encode here); False when credit,
        or room in the session's outbox, ran short.

        ``after`` ends at the last entry taken, or at the page's end when all was taken.
        ``frames_bytes`` is the size of ``frames`` when the tail measured it.
        """
        header_filter: HeaderFilter = self.session.params.filter
        if header_filter.is_empty and not may_expire(entries):
            chosen, chosen_frames, chosen_offsets = entries, frames, offsets
        else:
            picked = self._pick(header_filter, entries)
            chosen = [entries[i] for i in picked]
            chosen_frames = None if frames is None else [frames[i] for i in picked]
            chosen_offsets = [offsets[i] for i in picked]
        session = self.session
        taken = min(len(chosen), session.credit if session.has_credit else 0)
        if taken:
            pinned = session.params.pinned
            if pinned is not None:  # converted for this session alone (an error frame if not)
                page = pinned.broadcast_frames(session.topic, chosen[:taken])
            elif chosen_frames is None:
                page = [message_frame(session.topic, entry, 1) for entry in chosen[:taken]]
            else:
                page = chosen_frames if taken == len(chosen_frames) else chosen_frames[:taken]
            page_offsets = (chosen_offsets if taken == len(chosen_offsets)
                            else chosen_offsets[:taken])
            known_size = frames_bytes if page is frames else None
            taken = session.offer_frames(self.partition, page, page_offsets, known_size)
            self.counts.delivered.inc(taken)
            if spans_on():
                delivery_span(session.topic, "", "broadcast", chosen[:taken])
        if taken < len(chosen):
            if taken:
                self.after = chosen[taken - 1].offset
            return False
        if entries:
            self.after = entries[-1].offset
        return True

    def _pick(self, header_filter: HeaderFilter, entries: list[StoredEntry]) -> list[int]:
        """The indexes of the entries the filter passes and that have not expired (those are
        counted and logged)."""
        at_ms = now_ms()
        picked: list[int] = []
        expired: list[StoredEntry] = []
        for i, entry in enumerate(entries):
            if entry.headers and is_expired(entry.headers, at_ms):
                expired.append(entry)
            elif header_filter.matches(entry.headers):
                picked.append(i)
        report_expired(self.counts.expired, self.session.topic, "", expired)
        return picked

    def take_from_tail(self, entries: list[StoredEntry], frames: list[bytes], offsets: list[str],
                       frames_bytes: int | None = None) -> bool:
        """The tail's fan-out; False detaches this follower (out of credit or outbox room,
        closing, or a growth that may hold its partition: it reads on its own then)."""
        if self.gate is not None and self.gate.may_hold(self.partition):
            self.joined = False
            self.wake.set()
            return False
        if self.skip_through is not None:
            start = 0
            while start < len(entries) and offset_key(entries[start].offset) <= self.skip_through:
                start += 1
            if start == len(entries):
                return True
            self.skip_through = None
            entries, frames, offsets, frames_bytes = (entries[start:], frames[start:],
                                                      offsets[start:], None)
        if self.offer(entries, frames, offsets, frames_bytes):
            return True
        self.joined = False
        self.wake.set()
        return False


class PartitionTail:
    """The blocking reader of one partition, fanning pages out to the joined followers."""

    def __init__(self, tails: BroadcastTails, topic: str, partition: int, last: str | None) -> None:
        self.topic = topic
        self.partition = partition
        self.last = last  # the tail has fanned out every entry up to here
        self.reads = 0
        self._tails = tails
        self._followers: dict[TailFollower, None] = {}
        self.task: asyncio.Task[None] | None = None
        self.stopping = False

    def join(self, follower: TailFollower) -> None:
        """Feed ``follower`` from the next page on."""
        follower.joined = True
        self._followers[follower] = None

    def leave(self, follower: TailFollower) -> None:
        """Stop feeding ``follower``."""
        self._followers.pop(follower, None)
        follower.joined = False

    async def run(self) -> None:
        """Read and fan out while anyone follows; unregisters itself (synchronously with the last
        check)."""
        try:
            while self._followers and not self.stopping:
                try:
                    entries = await self._tails.groups.read_after(self.topic, self.partition,
                                                                  after=self.last, count=TAIL_PAGE,
                                                                  block_ms=TAIL_BLOCK_MS)
                except StorageError as exc:
                    log.warning("broadcast tail %s/%s: %s; retrying", self.topic, self.partition,
                                exc)
                    await asyncio.sleep(ERROR_BACKOFF_S)
                    continue
                self.reads += 1
                if entries:
                    self._fan_out(entries)
        finally:
            self._tails.forget(self)

    def _fan_out(self, entries: list[StoredEntry]) -> None:
        frames = [message_frame(self.topic, entry, 1) for entry in entries]
        offsets = [entry.offset for entry in entries]
        size = sum(map(len, frames))  # once for every follower (the outboxes' byte bound)
        self.last = offsets[-1]
        detached = [f for f in self._followers
                    if not f.take_from_tail(entries, frames, offsets, size)]
        for follower in detached:
            self._followers.pop(follower, None)


class BroadcastTails:
    """The process's tails, keyed by (topic, partition) (async context manager; closing stops every
    tail)."""

    def __init__(self, groups: GroupStore) -> None:
        self.groups = groups
        self._tails: dict[TailKey, PartitionTail] = {}

    async def __aenter__(self) -> BroadcastTails:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Stop every tail (idempotent)."""
        tails, self._tails = list(self._tails.values()), {}
        for tail in tails:
            tail.stopping = True  # even a read that swallowed its cancellation ends the loop
        tasks = [t.task for t in tails if t.task is not None]
        for task in tasks:
            task.cancel()
        # bounded, like the group readers: a read stuck in the client must not hold up shutdown
        if tasks:
            await asyncio.wait(tasks, timeout=STOP_WAIT_S)

    def get(self, topic: str, partition: int) -> PartitionTail | None:
        """The running tail of a partition, if any."""
        return self._tails.get((topic, partition))

    def forget(self, tail: PartitionTail) -> None:
        """Called by a tail as it stops."""
        if self._tails.get((tail.topic, tail.partition)) is tail:
            del self._tails[(tail.topic, tail.partition)]

    def start(self, follower: TailFollower) -> PartitionTail:
        """Start the partition's tail at ``follower``'s position with ``follower`` joined."""
        topic = follower.session.topic
        tail = PartitionTail(self, topic, follower.partition, follower.after)
        tail.join(follower)
        self._tails[(topic, follower.partition)] = tail
        tail.task = asyncio.create_task(tail.run(),
                                        name=f"broadcast-tail-{topic}/{follower.partition}")
        return tail

    def leave(self, follower: TailFollower) -> None:
        """Detach ``follower`` from its partition's tail, if joined."""
        tail = self.get(follower.session.topic, follower.partition)
        if tail is not None:
            tail.leave(follower)

    async def catch_up(self, store: StreamStore, follower: TailFollower,
                       cap: str | None = None) -> bool:
        """One step for a follower behind: join the tail when at its position, else read one
        page; with ``cap``, only entries up to it and never joining. False when nothing moved
        (held at its cap)."""
        session, partition = follower.session, follower.partition
        tail = self.get(session.topic, partition)
        if cap is None and tail is not None and follower.after == tail.last \
                and follower.from_time_ms is None:
            # at the tail's position (both None: an empty partition read from its start)
            tail.join(follower)
            return True
        seen = None if tail is None else tail.last
        limit = min(session.read_allowance, CATCH_UP_PAGE)
        entries = await store.read(session.topic, partition, after=follower.after,
                                   from_time_ms=follower.from_time_ms, limit=limit)
        if cap is not None:
            last = offset_key(cap)
            entries = [entry for entry in entries if offset_key(entry.offset) <= last]
            if entries:
                follower.from_time_ms = None
                follower.offer(entries, None, [entry.offset for entry in entries])
            return bool(entries)
        if entries:
            follower.from_time_ms = None
            if (not follower.offer(entries, None, [entry.offset for entry in entries])
                    or len(entries) == limit):
                return True
        if follower.after is None and follower.from_time_ms is not None:
            # nothing at or after the start time yet: no position to join at
            await asyncio.sleep(IDLE_POLL_S)
            return True
        self._join_at_end(follower, tail, seen)
        return True

    def _join_at_end(self, follower: TailFollower, tail: PartitionTail | None,
                     seen: str | None) -> None:
        """The read reached the end of the stream: join, unless the tail moved while it ran (read
        again)."""
        now = self.get(follower.session.topic, follower.partition)
        if now is None:
            self.start(follower)
            return
        if now is not tail or now.last != seen:
            return
        if follower.after is not None and (now.last is None
                                           or offset_key(follower.after) > offset_key(now.last)):
            follower.skip_through = offset_key(follower.after)
        now.join(follower)


class GrowthWatch(Protocol):
    """Tells about partitions added to a topic (partitioner.cache.TopicCache)."""

    def watch_growth(self, name: str, callback: Callable[[int], None]) -> Callable[[], None]: ...

    def get(self, name: str) -> TopicMetadata | None: ...


class BroadcastFollow:
    """Every partition of a topic delivered to one broadcast session through the shared tails
    (``aclose`` ends it).

    Task-free while idle (so an idle connection holds as little memory as it can): once every
    follower has joined its tail, the tails feed the session and nothing of this object runs. A
    catch-up task exists only while some follower is behind and the session has credit; it is
    started by ``set`` (the session's credit coming back, a follower detached by its tail,
    partitions added to the topic) and ends when nothing is left to catch up. With ``growth``,
    partitions added meanwhile are followed from their first entry and ``on_growth`` is told the new
    count. A catch-up failure goes to ``on_error`` (the caller closes the session).
    """

    __slots__ = ("_counts", "_followers", "_gate", "_grown_to", "_on_error", "_on_growth",
                 "_recheck", "_session", "_store", "_tails", "_task", "_unwatch", "closed")

    def __init__(self, tails: BroadcastTails, store: StreamStore, session: Session,
                 positions: dict[int, str | None], counts: BroadcastCounts,
                 growth: GrowthWatch | None = None, on_growth: Callable[[int], None] | None = None,
                 on_error: Callable[[BaseException], None] | None = None) -> None:
        self._tails, self._store, self._session, self._counts = tails, store, session, counts
        self._on_growth, self._on_error = on_growth, on_error
        # a partition past a growth's fence waits for this session's reads of its sources
        self._gate = None if growth is None else Gate(growth, session.topic, self._consumed)
        self._followers = [self._follower(p, after) for p, after in positions.items()]
        self._grown_to = len(self._followers)
        self._task: asyncio.Task[None] | None = None
        self._recheck: asyncio.TimerHandle | None = None
        self._unwatch: Callable[[], None] | None = None
        self.closed = False
        if growth is not None:
            self._unwatch = growth.watch_growth(session.topic, self._note_growth)
            if (current := growth.get(session.topic)) is not None:  # grown before the watch was set
                self._note_growth(current.partitions)
        # sets at once when the session has credit: the first catch-up starts
        session.watch_credit(self)

    def set(self) -> None:
        """Wake up: catch up unless a catch-up runs already (it re-checks everything) or the follow
        ended."""
        if self._task is None and not self.closed and not self._session.closing.done():
            self._task = asyncio.get_running_loop().create_task(self._catch_up())
            self._task.add_done_callback(self._catch_up_ended)

    def _follower(self, partition: int, after: str | None) -> TailFollower:
        follower = TailFollower(self._session, partition, after, self._counts, self)
        follower.gate = self._gate
        return follower

    async def _consumed(self, source: int, fence: str) -> bool:
        follower = self._followers[source]
        return await session_consumed(self._store, self._session.topic, source, follower.after,
                                      fence, follower.from_time_ms)

    def _note_growth(self, partitions: int) -> None:
        self._grown_to = max(self._grown_to, partitions)
        self.set()

    async def _catch_up(self) -> None:
        session, followers = self._session, self._followers
        while not session.closing.done():
            if self._grown_to > len(followers):
                followers.extend(self._follower(p, None)
                                 for p in range(len(followers), self._grown_to))
                if self._on_growth is not None:
                    self._on_growth(len(followers))
            behind = [f for f in followers if not f.joined]
            if not behind or not session.has_credit:
                break
            moved = False
            for follower in behind:
                if not session.has_credit:
                    break
                cap = None if self._gate is None else await self._gate.cap(follower.partition)
                moved = await self._tails.catch_up(self._store, follower, cap) or moved
            if not moved:
                # every follower behind is held at a growth's fence: look again in a moment
                self._recheck = asyncio.get_running_loop().call_later(GATE_POLL_S, self.set)
                break
        # in the same step as the last check: any later wake-up starts a new catch-up
        self._task = None

    def _catch_up_ended(self, task: asyncio.Task[None]) -> None:
        if task.cancelled() or task.exception() is None:
            return
        if self._task is task:
            self._task = None
        if self._on_error is not None and not self.closed:
            self._on_error(task.exception())  # type: ignore[arg-type]

    async def aclose(self) -> None:
        """Stop following: no more wake-ups, the catch-up stopped (bounded wait), every tail
        left."""
        self.closed = True
        if self._recheck is not None:
            self._recheck.cancel()
        if self._unwatch is not None:
            self._unwatch()
        self._session.unwatch_credit(self)
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.wait([task], timeout=STOP_WAIT_S)
        for follower in self._followers:
            with contextlib.suppress(Exception):
                self._tails.leave(follower)
