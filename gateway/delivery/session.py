"""One subscriber connection: credit-based flow control, un-acked deliveries and a bounded outbox.

Credit: a group session never holds more than ``max_in_flight`` un-acked deliveries; an ack, nack or
expiry gives credit back. At-most-once and broadcast sessions get credit back once the frame is
written, so the outbox is bounded by ``max_in_flight`` too. The outbox is also bounded in encoded
bytes (``max_outbox_bytes``): past it the session takes no delivery, as if out of credit, so a
client that does not read holds at most that much (plus one frame) whatever its window. A writer
that cannot hand a frame to the socket within ``slow_client_timeout_s`` closes the session with 4008
and its resume cursor: never a silent drop.

The writer hands everything queued (up to WRITE_BATCH_FRAMES frames) to ``Send`` at once, which
writes them as separate WebSocket frames in one transport write (gateway.delivery.wire). Broadcast
tails offer pages of frames encoded once for every session (``offer_frames``).

The writer is a task only while there is something to write: the first frame queued starts it and it
ends once the outbox is empty, so an idle subscription holds no writer task, no wake-up future and
no last written batch (idle subscriptions must cost as little memory as they can).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from bisect import bisect_right
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from itertools import accumulate, compress, groupby, repeat
from operator import attrgetter, itemgetter
from typing import TYPE_CHECKING, Any, Protocol

import orjson

from gateway.delivery.heap import trim_soon
from gateway.delivery.params import SubscribeParams, format_cursor
from gateway.delivery.wire import (
    Send,
    batched,
    error_frame,
    message_frame,
    message_frames,
    quota_frame,
)
from gateway.delivery.ws_frames import CLOSE_REASON_MAX_BYTES
from gateway.errors import WS_CLOSE_SLOW_CONSUMER
from gateway.quotas.in_flight import epoch_ms_of
from storage.models import Delivery

if TYPE_CHECKING:
    from gateway.quotas.in_flight import InFlightWindow

log = logging.getLogger(__name__)

MessageRef = tuple[int, str]  # (partition, offset)
SLOW_CLOSE_FRAME_WAIT_S = 0.05
WRITE_BATCH_FRAMES = 1024
WRITE_BATCH_BYTES = 256 * 1024  # a write never queues much more than this in the transport
DEFAULT_OUTBOX_BYTES = 4 * 1024 * 1024
FIRST_READ_FRAMES = 4  # a session's first read, before any frame's size is known
# An outbox item: one frame or a page of frames, the credit their write gives back, the partition
# and the offset of the frame (of each frame of a page) the cursor moves to once written
# (partition -1: a control frame).
Outgoing = tuple[bytes | list[bytes], int, int, str | list[str]]
# a transport that writes outbox items itself (it needs their partitions and offsets)
SendItems = Callable[[list[Outgoing]], Awaitable[None]]
_ENTRY_OFFSET = attrgetter("entry.offset")
_PARTITION = itemgetter(0)


class Waker(Protocol):
    """What credit watchers are: an ``asyncio.Event``, or anything else that wakes up on ``set``."""

    def set(self) -> None: ...


@dataclass(frozen=True, slots=True)
class CloseRequest:
    """Why and how the session must be closed."""

    code: int
    reason: str


class Session:
    """Credit, in-flight deliveries and the outbox of one subscriber."""

    def __init__(self, session_id: str, topic: str, params: SubscribeParams, send: Send,
                 slow_client_timeout_s: float,
                 max_outbox_bytes: int = DEFAULT_OUTBOX_BYTES) -> None:
        self.id = session_id
        self.topic = topic
        self.params = params
        self.credit = params.max_in_flight
        # un-acked group deliveries: their ack deadlines
        self.in_flight: dict[MessageRef, float] = {}
        self.cursor: dict[int, str] = dict(params.cursor)
        self.closing: asyncio.Future[CloseRequest] = asyncio.get_running_loop().create_future()
        self._send = send
        # set by a transport that frames each item (an event stream): then ``send`` only takes the
        # last error frame of a slow client
        self.send_items: SendItems | None = None
        self._slow_timeout_s = slow_client_timeout_s
        self._outbox: list[Outgoing] = []  # a list: an empty deque still holds a 64-slot block
        self.outbox_bytes = 0  # encoded bytes of the frames in the outbox
        self._max_outbox_bytes = max_outbox_bytes
        # The largest of this session's last message frames: a read fetches what fits the outbox's
        # room at that size (what it fetches beyond waits in memory). Until a frame is seen a read
        # fetches a few: messages may be as large as the outbox allows.
        self._frame_bytes = max(1, max_outbox_bytes // FIRST_READ_FRAMES)
        self._credit_waiters: set[Waker] = set()
        self._writer: asyncio.Task[None] | None = None  # running only while the outbox has frames
        self._open = True
        # the principal's or tenant's in-flight quota; None: uncapped, or nothing held to count
        self.quota: InFlightWindow | None = None

    # --- lifetime ---------------------------------------------------------------------------------
    async def __aenter__(self) -> Session:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Stop the writer, start no other and drop every frame still queued; idempotent."""
        self._open = False
        if self.quota is not None:
            self.quota.leave(self)
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await writer
        # a client that never read leaves a full outbox: nothing of it may outlive the session
        self._outbox = []
        if self.outbox_bytes >= WRITE_BATCH_BYTES:
            trim_soon()  # freed, but kept in the process's RSS by the allocator until trimmed
        self.outbox_bytes = 0

    def request_close(self, code: int, reason: str) -> None:
        """Ask the connection owner to close the socket (first request wins)."""
        if not self.closing.done():
            self.closing.set_result(CloseRequest(code, reason[:CLOSE_REASON_MAX_BYTES]))
            for event in self._credit_waiters:
                event.set()  # wake waiters so they notice the close

    # --- credit -----------------------------------------------------------------------------------
    @property
    def has_credit(self) -> bool:
        """Whether the session may take one more delivery (window open, outbox under its byte
        bound)."""
        return (self.credit > 0 and self.outbox_bytes < self._max_outbox_bytes
                and not self.closing.done() and (self.quota is None or self.quota.room > 0))

    @property
    def read_allowance(self) -> int:
        """How many deliveries a read for this session should fetch: its credit, or fewer where
        frames the size of its last ones would not fit the outbox's room (what a read fetches beyond
        it waits in memory)."""
        if not self.has_credit:
            return 0
        allowance = max(1, min(self.credit,
                               (self._max_outbox_bytes - self.outbox_bytes) // self._frame_bytes))
        return allowance if self.quota is None else min(allowance, self.quota.room)

    def _fitting_frames(self, frames: list[bytes]) -> tuple[int, int]:
        """How many leading frames the outbox's byte bound lets in (at least one) and their size."""
        return _fitting(frames, len(frames), self._max_outbox_bytes - self.outbox_bytes)

    @property
    def worth_a_read(self) -> bool:
        """Whether a read for this session would not be a sliver: half its window free, or nothing
        in flight."""
        return self.has_credit and (2 * self.credit >= self.params.max_in_flight
                                    or not self.in_flight)

    def watch_credit(self, event: Waker) -> None:
        """Set ``event`` whenever this session gains credit (readers wait on it)."""
        self._credit_waiters.add(event)
        if self.has_credit:
            event.set()

    def unwatch_credit(self, event: Waker) -> None:
        """Stop notifying ``event``."""
        self._credit_waiters.discard(event)

    def _give_credit(self, amount: int) -> None:
        if amount <= 0:
            return
        self.credit = min(self.params.max_in_flight, self.credit + amount)
        self.wake_credit_waiters()

    def wake_credit_waiters(self) -> None:
        """Wake the readers waiting for this session's credit (also when its quota has room
        again)."""
        for event in self._credit_waiters:
            event.set()

    def use_quota(self, window: InFlightWindow) -> None:
        """Count this session's un-acked deliveries against ``window`` (its subject's quota)."""
        self.quota = window
        window.join(self)

    def quota_held(self, limit: int, used: int) -> None:
        """Tell the member its deliveries wait for the in-flight quota (it stays connected)."""
        self.send_control(quota_frame(limit, used))

    # --- deliveries -------------------------------------------------------------------------------
    def offer(self, delivery: Delivery) -> bool:
        """Take a delivery that needs no ack (its credit comes back once written) if there is
        credit, at the session's pinned schema version if any; False leaves it with the caller."""
        if not self.has_credit:
            return False
        self.credit -= 1
        entry = delivery.entry
        pinned = self.params.pinned
        frame = (message_frame(self.topic, entry, delivery.delivery_count) if pinned is None
                 else pinned.broadcast_frame(self.topic, entry))
        self._enqueue((frame, 1, entry.partition, entry.offset), len(frame))
        return True

    def offer_page(self, deliveries: list[Delivery]) -> int:
        """Take deliveries of one partition, in order, as far as the credit and the outbox's byte
        bound go; returns how many were taken.

        The group readers' path: one deadline, one outbox item and one writer wake-up for the whole
        page. Unless the session acks automatically, each stays in flight until settled or taken
        back.
        """
        if not self.has_credit or not deliveries:
            return 0
        quota = self.quota
        credit = self.credit if quota is None else min(self.credit, quota.room)
        taken = deliveries if len(deliveries) <= credit else deliveries[:credit]
        frames = message_frames(self.topic, taken)
        fit, size = self._fitting_frames(frames)
        if fit < len(frames):  # the rest stays with the reader: redelivered later, never lost
            taken, frames = taken[:fit], frames[:fit]
        self._frame_bytes = max(map(len, frames))
        self.credit -= len(taken)
        tracked = not self.params.auto_ack
        partition = taken[0].entry.partition
        offsets = list(map(_ENTRY_OFFSET, taken))
        if tracked:
            deadline = time.monotonic() + self.params.ack_timeout_ms / 1000
            self.in_flight.update(zip(zip(repeat(partition), offsets), repeat(deadline)))
            if quota is not None:
                quota.charge(len(taken), epoch_ms_of(deadline))
        self._enqueue((frames, 0 if tracked else len(frames), partition, offsets), size)
        return len(taken)

    def offer_frames(self, partition: int, frames: list[bytes], offsets: list[str],
                     size: int | None = None) -> int:
        """Take a page of broadcast frames already encoded, with their offsets (the caller checked
        the credit), as far as the outbox's byte bound goes; returns how many were taken.

        ``size``, the page's bytes when the caller knows them (a tail page, sized once for all its
        followers), spares measuring the page per session when it fits whole.
        """
        if not frames:
            return 0
        if size is not None and self.outbox_bytes + size <= self._max_outbox_bytes:
            fit = len(frames)
        else:
            fit, size = self._fitting_frames(frames)
        if fit < len(frames):
            frames, offsets = frames[:fit], offsets[:fit]
        self._frame_bytes = max(map(len, frames))
        self.credit -= fit
        self._enqueue((frames, fit, partition, offsets), size)
        return fit

    def send_control(self, frame: dict[str, Any]) -> None:
        """Queue a control frame (assignment, error); not counted against credit.

        Control frames may take the outbox past its byte bound, up to twice it: past that the client
        keeps sending frames while reading none of the answers, and is closed as a slow consumer.
        """
        encoded = orjson.dumps(frame)
        if self.outbox_bytes + len(encoded) > 2 * self._max_outbox_bytes:
            self.request_close(WS_CLOSE_SLOW_CONSUMER, _slow_reason(self.resume_cursor()))
            return
        self._enqueue((encoded, 0, -1, ""), len(encoded))

    def _enqueue(self, item: Outgoing, size: int) -> None:
        self.outbox_bytes += size
        self._outbox.append(item)
        if self._writer is None and self._open:
            self._writer = asyncio.create_task(self._write_frames(),
                                               name=f"session-writer-{self.id}")

    def held(self, refs: Iterable[MessageRef]) -> list[MessageRef]:
        """Those of ``refs`` this session holds (delivered, not yet settled or taken back)."""
        in_flight = self.in_flight
        return [ref for ref in refs if ref in in_flight]

    def settle(self, refs: Iterable[MessageRef]) -> dict[int, list[MessageRef]]:
        """Forget acked/nacked deliveries, give their credit back, and group them by partition."""
        refs = refs if isinstance(refs, list) else list(refs)
        if self.quota is not None:
            return self._settle_counted(refs, self.quota)
        held = list(compress(refs, map(self.in_flight.pop, refs, repeat(0.0))))  # deadlines are > 0
        self._give_credit(len(held))
        return _by_partition(held)

    def _settle_counted(self, refs: list[MessageRef],
                        quota: InFlightWindow) -> dict[int, list[MessageRef]]:
        """``settle`` for a session under a quota: each delivery credited at its deadline."""
        in_flight = self.in_flight
        held = [ref for ref in refs if ref in in_flight]
        quota.credit_each([epoch_ms_of(in_flight.pop(ref)) for ref in held])
        self._give_credit(len(held))
        return _by_partition(held)

    def forget(self, ref: MessageRef) -> None:
        """A reader took a delivery back (ack timeout passed): free its credit."""
        deadline = self.in_flight.pop(ref, None)
        if deadline is not None:
            if self.quota is not None:
                self.quota.credit(1, epoch_ms_of(deadline))
            self._give_credit(1)

    def extend(self, refs: Iterable[MessageRef]) -> dict[int, list[MessageRef]]:
        """Restart the ack timeout of held deliveries; grouped by partition for the store update."""
        deadline = time.monotonic() + self.params.ack_timeout_ms / 1000
        in_flight = self.in_flight
        held = [ref for ref in refs if ref in in_flight]
        if self.quota is not None:
            moved = Counter(epoch_ms_of(in_flight[ref]) for ref in held)
            for old_ms, count in moved.items():
                self.quota.move(count, old_ms, epoch_ms_of(deadline))
        in_flight.update(zip(held, repeat(deadline)))
        return _by_partition(held)

    def take_back(self, partition: int) -> list[MessageRef]:
        """Forget the un-acked deliveries of ``partition`` and give their credit back; returns them.

        For a partition's reader that stops serving this session (the partition moved to another
        member, or the session ends): the entries go back to the group, and the session's window
        must not stay smaller by them (an ack arriving later for one of them concerns nothing
        here)."""
        held = [ref for ref in self.in_flight if ref[0] == partition]
        deadlines = [self.in_flight.pop(ref) for ref in held]
        if self.quota is not None:
            self.quota.credit_each(map(epoch_ms_of, deadlines))
        self._give_credit(len(held))
        return held

    def resume_cursor(self) -> str:
        """The ``from`` value that resumes after the last message handed to this session."""
        return format_cursor(self.cursor)

    # --- writing ----------------------------------------------------------------------------------
    async def _close_slow(self) -> None:
        """Close with 4008; the full cursor goes in a last error frame, the reason holds it when it
        fits."""
        cursor = self.resume_cursor()
        log.warning("session %s: client too slow, closing with cursor %s", self.id, cursor)
        frame = orjson.dumps(error_frame("slow-consumer", "closing: too slow to drain",
                                         cursor=cursor))
        # The frame lands in the transport ahead of the close frame even if the drain wait times
        # out.
        with contextlib.suppress(TimeoutError, ConnectionError, RuntimeError):
            await asyncio.wait_for(self._send([frame]), SLOW_CLOSE_FRAME_WAIT_S)
        self.request_close(WS_CLOSE_SLOW_CONSUMER,
                           _slow_reason(cursor, "cursor in the last error frame"))

    async def _write_frames(self) -> None:
        """Write until the outbox is empty, then end (the next ``_enqueue`` starts a new writer).

        The empty check and the reset of ``_writer`` happen with no await between them, so a frame
        queued at any point is either taken by this loop or starts the next writer. A writer that
        stops on a failed or too slow send stays registered, so no new writer starts on a session
        that is closing.
        """
        while self._outbox:
            items, frames = self._take_batch()
            if self.params.batch:
                frames = batched(frames)
            try:
                async with asyncio.timeout(self._slow_timeout_s):
                    if self.send_items is not None:
                        await self.send_items(items)
                    else:
                        await self._send(frames)
            except TimeoutError:
                # The frames are in the transport before the drain wait, so the client gets them
                # ahead of the close frame: count them as sent, or the resume would repeat them.
                self._written(items, give_credit=False)
                await self._close_slow()
                return
            except (ConnectionError, RuntimeError) as exc:
                self.request_close(1006, f"send failed: {exc}")
                return
            # The cursor moves only once the frames are handed to the socket, so a resume never
            # skips.
            self._written(items, give_credit=True)
        self._writer = None

    def _take_batch(self) -> tuple[list[Outgoing], list[bytes]]:
        """Queued items up to WRITE_BATCH_FRAMES frames or WRITE_BATCH_BYTES (at least one frame),
        in order.

        A page of frames that does not fit is split: its first part is written now, the rest stays
        first.
        """
        items: list[Outgoing] = []
        frames: list[bytes] = []
        size = taken = 0
        outbox = self._outbox
        while taken < len(outbox) and len(frames) < WRITE_BATCH_FRAMES and size < WRITE_BATCH_BYTES:
            item = outbox[taken]
            payload = item[0]
            if isinstance(payload, bytes):
                taken += 1
                items.append(item)
                frames.append(payload)
                size += len(payload)
                continue
            fit, page_size = _fitting(payload, WRITE_BATCH_FRAMES - len(frames),
                                      WRITE_BATCH_BYTES - size)
            if fit < len(payload):
                offsets = item[3]
                outbox[taken] = (payload[fit:], item[1] - fit, item[2], offsets[fit:])
                item = (payload[:fit], fit, item[2], offsets[:fit])
                payload = payload[:fit]
            else:
                taken += 1
            items.append(item)
            frames.extend(payload)
            size += page_size
        del outbox[:taken]
        self._note_dequeued(size)
        return items, frames

    def _note_dequeued(self, size: int) -> None:
        """Count bytes leaving the outbox; readers held back by the byte bound are woken once it has
        room."""
        was_full = self.outbox_bytes >= self._max_outbox_bytes
        self.outbox_bytes -= size
        if was_full and self.outbox_bytes < self._max_outbox_bytes:
            for event in self._credit_waiters:
                event.set()

    def _written(self, items: list[Outgoing], give_credit: bool) -> None:
        credit = 0
        cursor = self.cursor
        for _, credit_back, partition, offset in items:
            if partition >= 0:
                cursor[partition] = offset if isinstance(offset, str) else offset[-1]
            credit += credit_back
        if give_credit:
            self._give_credit(credit)


def _by_partition(refs: list[MessageRef]) -> dict[int, list[MessageRef]]:
    """Refs grouped by partition (an ack frame is a few runs of one partition)."""
    grouped: dict[int, list[MessageRef]] = {}
    for partition, run in groupby(refs, key=_PARTITION):
        grouped.setdefault(partition, []).extend(run)
    return grouped


def _slow_reason(cursor: str, instead: str = "resume after the last message received") -> str:
    """A 4008 close reason: the cursor when it fits a close frame, else ``instead``."""
    reason = "slow consumer; from=" + cursor
    return reason if len(reason.encode()) <= CLOSE_REASON_MAX_BYTES else "slow consumer; " + instead


def _fitting(page: list[bytes], max_frames: int, max_bytes: int) -> tuple[int, int]:
    """How many leading frames of a page fit (at least one), and their size."""
    sizes = list(accumulate(map(len, page[:max_frames])))
    if not sizes:
        return 0, 0
    count = max(1, bisect_right(sizes, max_bytes))
    return count, sizes[count - 1]
