"""One reader per (topic, partition, group) per gateway process, fanning deliveries out to local
sessions.

Each turn of the loop: wait until some session has credit; hand out the local backlog; reclaim
entries whose ack timeout passed (redelivery with delivery_count + 1, or the dead-letter topic past
max_deliveries); else read new entries (XREADGROUP, blocking briefly). A read waits, at most
``READ_COALESCE_S``, until some session has half its window free or nothing in flight (TCP's
silly-window avoidance): a client acking a few messages at a time would otherwise make every read,
page and XACK a few messages long. Filtered-out entries are acked for the group and never delivered;
with auto_ack (at-most-once) entries are acked as they are handed out.

Acks from every session of a reader that arrive in the same event-loop tick go out as one XACK of
all their offsets; each caller still waits for (and sees the failure of) the XACK that carried its
offsets.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Coroutine, Iterable, Sequence
from dataclasses import dataclass
from operator import attrgetter, itemgetter
from typing import Any

from gateway.delivery.expiry import (
    deliveries_may_expire,
    is_expired,
    now_ms,
    report_expired,
)
from gateway.delivery.filters import HeaderFilter
from gateway.delivery.growth_gate import GATE_POLL_S, Gate
from gateway.delivery.key_order import KeyOrder
from gateway.delivery.redelivery import (
    LOOKUP_PAGE,
    RELEASE_IDLE_MS,
    DeadLetterSink,
    dead_letter_now,
    due_again,
    nack_idles,
)
from gateway.delivery.session import MessageRef, Session
from gateway.delivery.wire import gap_frame
from gateway.observe.metrics import GatewayMetrics
from gateway.observe.tracing import delivery_span
from gateway.offsets import predecessor
from partitioner.errors import PartitionerError
from partitioner.group_policy import NO_BACKOFF, RetryBackoff
from storage.codec import offset_key
from storage.errors import StorageError
from storage.groups_protocol import GroupStore
from storage.models import Delivery, ParkedKey, StoredEntry, first_deliveries

log = logging.getLogger(__name__)

READ_BLOCK_MS = 250
READ_BATCH_MAX = 1000
# the longest a read waits for more credit than a sliver of a session's window
READ_COALESCE_S = 0.002
TAKEOVER_PAGE = 10_000
RECONCILE_S = 1.0  # how often a key-ordered reader looks for parked keys settled elsewhere
MAX_HELD = 10_000  # a key-ordered reader's messages waiting behind their keys before it reads on
ERROR_BACKOFF_S = 0.5
MIN_RECLAIM_S = 0.05
_OFFSET_OF_REF = itemgetter(1)
_DELIVERY_COUNT = attrgetter("delivery_count")
_ENTRY_OFFSET = attrgetter("entry.offset")


@dataclass(frozen=True, slots=True)
class GroupConfig:
    """How a group is served on this gateway; every session of the group must agree on it."""

    ack_timeout_ms: int
    max_deliveries: int
    filter: HeaderFilter
    start: str  # where a new group starts: "earliest", "latest" or an offset
    auto_ack: bool
    exclusive: bool
    retry_backoff: RetryBackoff = NO_BACKOFF
    # key_shared: one message of a key in flight at a time (gateway.delivery.key_order)
    key_ordered: bool = False


class GroupReader:
    """Reads one partition for one group and hands entries to the sessions attached to it."""

    def __init__(self, topic: str, partition: int, group: str, config: GroupConfig,
                 store: GroupStore, consumer: str, dead_letters: DeadLetterSink,
                 metrics: GatewayMetrics | None = None, gate: Gate | None = None) -> None:
        self.topic = topic
        self.partition = partition
        self.group = group
        self.config = config
        self._store = store
        self._consumer = consumer
        self._dead_letters = dead_letters
        self._metrics = metrics or GatewayMetrics.create()
        self._gate = gate  # holds the partition past a growth's fence (grown topics)
        self._labels = (topic, group, "key_shared" if config.key_ordered
                        else "exclusive" if config.exclusive else "shared")
        self._sessions: list[Session] = []
        self._next_session = 0
        self._backlog: deque[Delivery] = deque()
        self._credit = asyncio.Event()
        self._reclaim_now = True
        self._last_reclaim = 0.0
        self._due_now: list[str] = []  # nacked or released here: claimed by offset, no scan
        self._more_waiting = False  # the last read filled its count
        self._stopping = False
        self._task: asyncio.Task[None] | None = None
        self._acks_due: list[str] = []
        self._acks_done: asyncio.Future[None] | None = None
        self._ack_writes: set[asyncio.Future[int]] = set()  # strong references while an XACK runs
        self._keys = KeyOrder() if config.key_ordered else None
        self._last_reconcile = 0.0  # when parked keys were last checked against the group
        # the latest move to the dead letters, beside the loop
        self._last_dead_letter: asyncio.Future[int] | None = None
        self._parked = self._metrics.group_parked_keys.labels(topic, group, str(partition))

    # --- sessions ---------------------------------------------------------------------------------
    def attach(self, session: Session) -> None:
        """Serve ``session`` from now on; starts the loop on first use."""
        self._sessions.append(session)
        session.watch_credit(self._credit)
        if self._keys is not None:
            self._keys.sessions_changed()
            self._credit.set()
        if self._task is None:
            self._task = asyncio.create_task(
                self._run(), name=f"reader-{self.topic}/{self.partition}/{self.group}")

    async def detach(self, session: Session) -> None:
        """Stop serving ``session`` and make its un-acked deliveries redeliverable at once."""
        if session in self._sessions:
            self._sessions.remove(session)
        session.unwatch_credit(self._credit)
        if self._keys is not None:
            self._keys.forget_session(session)
        await self.release([offset for _, offset in session.take_back(self.partition)])

    @property
    def idle(self) -> bool:
        """No session is attached."""
        return not self._sessions

    async def aclose(self) -> None:
        """Stop the loop and hand the local backlog back to the group."""
        self._stopping = True
        self._credit.set()
        task, self._task = self._task, None
        if task is not None:
            # On timeout wait_for cancels it; entries read meanwhile are reclaimed after their ack
            # timeout.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(task, READ_BLOCK_MS / 1000 * 4)
        backlog = [d.entry.offset for d in self._backlog]
        if self._keys is not None:
            backlog += self._keys.held_offsets()
            self._keys = KeyOrder()
            self._parked.set(0)
            with contextlib.suppress(StorageError):  # no longer parked here: the next owner's
                await self._store.unpark(self.topic, self.partition, self.group, [])
        self._backlog.clear()
        with contextlib.suppress(StorageError):
            await self.release(backlog)

    # --- acks from sessions -----------------------------------------------------------------------
    async def ack(self, refs: Sequence[MessageRef]) -> None:
        """Acknowledge deliveries (any session, any gateway may ack); batched with this tick's other
        acks."""
        self._acks_due.extend(map(_OFFSET_OF_REF, refs))
        done = self._acks_done
        if done is None:
            done = self._acks_done = asyncio.get_running_loop().create_future()
            asyncio.get_running_loop().call_soon(self._flush_acks_soon)
        await asyncio.shield(done)
        self._metrics.acks.labels(*self._labels).inc(len(refs))
        if self._keys is not None:  # once acked: a failed XACK leaves the key in flight
            self._free_keys(map(_OFFSET_OF_REF, refs))

    def _flush_acks_soon(self) -> None:
        offsets, self._acks_due = self._acks_due, []
        done, self._acks_done = self._acks_done, None
        if done is not None:
            task = asyncio.ensure_future(self._store.ack(self.topic, self.partition, self.group,
                                                         offsets))
            self._ack_writes.add(task)
            task.add_done_callback(self._ack_writes.discard)
            task.add_done_callback(lambda t: _settle_future(done, t))

    async def nack(self, refs: Sequence[MessageRef], delay_ms: int) -> None:
        """Redeliver after ``delay_ms`` (0: as soon as possible, or after the group's retry
        backoff) without waiting for the ack timeout."""
        offsets = [offset for _, offset in refs]
        idles = await nack_idles(self._store, self.topic, self.partition, self.group, offsets,
                                 delay_ms, self.config.ack_timeout_ms, self.config.retry_backoff)
        for idle_ms, due in idles.items():
            await self._set_idle(due, idle_ms)
        self._metrics.nacks.labels(*self._labels).inc(len(refs))
        if self._keys is not None:
            self._keys_failed(offsets)
        self._redeliver_soon(idles.get(RELEASE_IDLE_MS, []))

    async def reject(self, refs: Sequence[MessageRef], reason: str) -> None:
        """Send deliveries to the dead-letter topic now, with ``reason``, and ack them here."""
        await dead_letter_now(self._store, self._dead_letters, self.topic, self.partition,
                              self.group, self._consumer, [offset for _, offset in refs], reason)
        self._metrics.acks.labels(*self._labels).inc(len(refs))
        if self._keys is not None:
            self._free_keys(offset for _, offset in refs)

    def _free_keys(self, offsets: Iterable[str]) -> None:
        """Settled in-flight messages of a key-ordered group: each key's next message goes first."""
        assert self._keys is not None
        released, unparked = self._keys.settled(offsets)
        if released:
            self._backlog.extendleft(reversed(released))
        if unparked:
            self._beside_the_loop(self._store.unpark(self.topic, self.partition, self.group,
                                                     unparked))
        self._parked.set(len(self._keys.parked))
        self._credit.set()

    def _keys_failed(self, offsets: Iterable[str]) -> None:
        """Failed in-flight messages of a key-ordered group: their keys park, visibly."""
        assert self._keys is not None
        newly = self._keys.failed(offsets)
        if newly:
            since_ms = now_ms()
            self._beside_the_loop(self._store.park(
                self.topic, self.partition, self.group,
                [ParkedKey(key, offset, since_ms) for key, offset in newly]))
        self._parked.set(len(self._keys.parked))

    def _beside_the_loop(self, write: Coroutine[Any, Any, None]) -> None:
        """A best-effort bookkeeping write that nothing waits for (parked keys' visibility)."""
        task = asyncio.ensure_future(_logged(write, self.topic, self.partition, self.group))
        self._ack_writes.add(task)
        task.add_done_callback(self._ack_writes.discard)

    async def extend(self, refs: Sequence[MessageRef]) -> None:
        """Restart the ack timeout of deliveries still being worked on."""
        await self._set_idle([offset for _, offset in refs], 0)

    async def release(self, offsets: Sequence[str]) -> None:
        """Make deliveries redeliverable at once (their session went away or lost the partition)."""
        if offsets:
            await self._set_idle(offsets, RELEASE_IDLE_MS)
            self._redeliver_soon(offsets)

    def _redeliver_soon(self, offsets: Sequence[str]) -> None:
        """Entries made due at once: the loop's next turn claims them by offset."""
        if offsets:
            self._due_now.extend(offsets)
            self._credit.set()  # a loop waiting for credit or an ack looks again

    async def _set_idle(self, offsets: Sequence[str], idle_ms: int) -> None:
        if offsets:
            await self._store.set_idle(self.topic, self.partition, self.group, self._consumer,
                                       offsets, idle_ms)

    # --- the loop ---------------------------------------------------------------------------------
    async def _run(self) -> None:
        started = False
        while not self._stopping:
            try:
                if not started:
                    await self._start()
                    started = True
                await self._turn()
            except StorageError as exc:
                log.warning("reader %s/%s/%s: %s; retrying", self.topic, self.partition, self.group,
                            exc)
                await asyncio.sleep(ERROR_BACKOFF_S)

    async def _start(self) -> None:
        await self._store.ensure_group(self.topic, self.partition, self.group, self.config.start)
        if self._keys is not None:  # a new owner: what it parks, it records afresh
            await self._store.unpark(self.topic, self.partition, self.group, [])
        await self._tell_of_gap()
        if self.config.exclusive:
            await self._take_over()

    async def _tell_of_gap(self) -> None:
        """A group resuming where retention has passed: its sessions get a ``gap`` frame before
        anything of the partition (a new group's "0-0" start is no resume)."""
        last = (await self._store.state(self.topic, self.partition, self.group)
                ).last_delivered_offset
        lost = (None if last is None or last == "0-0"
                else await self._store.lost_after(self.topic, self.partition, last, self.group))
        if lost is not None:
            log.info("group %s resumes %s/%s past entries retention removed after %s",
                     self.group, self.topic, self.partition, lost.after)
            for session in self._sessions:
                session.send_control(gap_frame(lost))

    async def _take_over(self) -> None:
        """A new exclusive owner first takes the partition's pending entries, in offset order.

        One page: entries beyond it (more than TAKEOVER_PAGE un-acked) follow through the
        ack-timeout reclaim.
        """
        pending = await self._store.expired(self.topic, self.partition, self.group, min_idle_ms=0,
                                            count=TAKEOVER_PAGE)
        if pending:
            claimed = await self._store.claim(self.topic, self.partition, self.group,
                                              self._consumer, pending, min_idle_ms=0)
            await self._accept(claimed)

    async def _turn(self) -> None:
        await self._wait_for_credit()
        if self._stopping:
            return
        if self._backlog:
            await self._dispatch()
            if not self._any_credit():
                return
        if await self._reclaim():
            return
        if not self._worth_a_read():
            await self._wait_for_more_credit(READ_COALESCE_S)
            if self._stopping or not self._any_credit():
                return
        count = min(self._total_credit(), READ_BATCH_MAX)
        cap = None if self._gate is None else await self._gate.cap(self.partition)
        if cap is not None:
            entries = await self._store.read_new(self.topic, self.partition, self.group,
                                                 self._consumer, count=count, block_ms=0, until=cap)
            if not entries:
                await asyncio.sleep(GATE_POLL_S)
            await self._accept_new(first_deliveries(entries))
            return
        if self._keys is not None and self._keys.in_flight:
            await self._read_beside_keys_in_flight(count)
            return
        # After a full read more is likely waiting: read without blocking (the store's pipelined
        # connection); after a short one, block for what comes next.
        entries = await self._store.read_new(self.topic, self.partition, self.group, self._consumer,
                                             count=count,
                                             block_ms=0 if self._more_waiting else READ_BLOCK_MS)
        self._more_waiting = len(entries) == count
        await self._accept_new(first_deliveries(entries))

    async def _read_beside_keys_in_flight(self, count: int) -> None:
        """A key-ordered read while keys are in flight: an ack may free a key's next message at any
        moment, so the read never blocks (it waits for an ack or credit instead), and it stops
        while ``MAX_HELD`` messages wait behind their keys."""
        assert self._keys is not None
        entries = ([] if self._keys.held_total >= MAX_HELD else
                   await self._store.read_new(self.topic, self.partition, self.group,
                                              self._consumer, count=count, block_ms=0))
        if entries:
            await self._accept_new(first_deliveries(entries))
            return
        self._credit.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._credit.wait(), READ_BLOCK_MS / 1000)

    async def _wait_for_credit(self) -> None:
        while not self._stopping and not self._any_credit():
            self._credit.clear()
            await self._credit.wait()

    def _any_credit(self) -> bool:
        return any(session.has_credit for session in self._sessions)

    def _worth_a_read(self) -> bool:
        return any(session.worth_a_read for session in self._sessions)

    async def _wait_for_more_credit(self, longest_s: float) -> None:
        """Until a session's credit is worth a read (``Session.worth_a_read``), at most
        ``longest_s``."""
        deadline = asyncio.get_running_loop().time() + longest_s
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout_at(deadline):
                while not self._stopping and not self._worth_a_read():
                    self._credit.clear()
                    await self._credit.wait()

    def _total_credit(self) -> int:
        return max(1, sum(session.read_allowance for session in self._sessions))

    async def _reclaim(self) -> bool:
        """Claim entries past their ack timeout (and the group's retry backoff after their last
        delivery); True when something was claimed."""
        backoff = self.config.retry_backoff
        interval_s = min(self.config.ack_timeout_ms / 4000, 1.0,
                         max(MIN_RECLAIM_S, backoff.initial_ms / 4000) if backoff.initial_ms
                         else 1.0)
        if self._due_now:
            offsets, self._due_now = self._due_now, []
            return await self._redeliver(await self._store.claim_offsets(
                self.topic, self.partition, self.group, self._consumer, offsets,
                min_idle_ms=self.config.ack_timeout_ms))
        if not self._reclaim_now and time.monotonic() - self._last_reclaim < interval_s:
            return False
        self._reclaim_now = False
        self._last_reclaim = time.monotonic()
        if (self._keys is not None and self._keys.parked
                and self._last_reclaim - self._last_reconcile >= RECONCILE_S):
            self._last_reconcile = self._last_reclaim
            await self._free_keys_settled_elsewhere()
        expired = await due_again(self._store, self.topic, self.partition, self.group,
                                  self.config.ack_timeout_ms, backoff, self._total_credit())
        if not expired:
            return False
        return await self._redeliver(await self._store.claim(
            self.topic, self.partition, self.group, self._consumer, expired,
            min_idle_ms=self.config.ack_timeout_ms))

    async def _redeliver(self, claimed: list[Delivery]) -> bool:
        """Claimed entries out again (counted failures park their keys); True when any."""
        for delivery in claimed:
            self._forget_everywhere((delivery.entry.partition, delivery.entry.offset))
        if self._keys is not None:
            self._keys_failed(d.entry.offset for d in claimed if d.delivery_count > 1)
        await self._accept(claimed)
        return bool(claimed)

    async def _free_keys_settled_elsewhere(self) -> None:
        """Parked keys whose failed message is no longer pending (the partition owner's sweep
        dead-lettered it, or another gateway acked it): free them."""
        assert self._keys is not None
        offsets = [self._keys.in_flight[key] for key in self._keys.parked
                   if key in self._keys.in_flight]
        if not offsets:
            return
        pending = await self._store.expired(self.topic, self.partition, self.group,
                                            min_idle_ms=0, count=LOOKUP_PAGE,
                                            after=predecessor(min(offsets, key=offset_key)))
        still = {entry.offset for entry in pending}
        seen_to = offset_key(pending[-1].offset) if len(pending) == LOOKUP_PAGE else None
        gone = [offset for offset in offsets if offset not in still
                and (seen_to is None or offset_key(offset) <= seen_to)]
        if gone:
            self._free_keys(gone)

    def _forget_everywhere(self, ref: MessageRef) -> None:
        for session in self._sessions:
            session.forget(ref)

    async def _accept_new(self, deliveries: list[Delivery]) -> None:
        """Route first deliveries: without a filter every one goes out (a delivery count of 1 is
        always within max_deliveries, which is at least 1), so the whole read joins the backlog at
        once."""
        if (self.config.filter.is_empty and self._keys is None
                and not deliveries_may_expire(deliveries)):
            self._backlog.extend(deliveries)
            await self._dispatch()
        else:
            await self._accept(deliveries)

    async def _accept(self, deliveries: Sequence[Delivery]) -> None:
        """Route fresh deliveries: expired and filtered-out ones acked, dead letters, the rest to
        the backlog and out."""
        to_ack: list[str] = []
        expired: list[StoredEntry] = []
        dead: list[Delivery] = []
        at_ms = now_ms()
        for delivery in deliveries:
            entry = delivery.entry
            if entry.headers and is_expired(entry.headers, at_ms):
                expired.append(entry)
                to_ack.append(entry.offset)
            elif delivery.delivery_count > self.config.max_deliveries:
                dead.append(delivery)
            elif not self.config.filter.matches(entry.headers):
                to_ack.append(entry.offset)
            else:
                self._backlog.append(delivery)
        if to_ack:
            await self._store.ack(self.topic, self.partition, self.group, to_ack)
            if self._keys is not None:
                self._free_keys(to_ack)
        report_expired(self._metrics.expired.labels(*self._labels), self.topic, self.group, expired)
        if dead:
            # beside the loop: other messages (other keys) need not wait for the dead letters'
            # acks=all writes
            task = asyncio.ensure_future(self._dead_letter(dead, self._last_dead_letter))
            self._last_dead_letter = task
            self._ack_writes.add(task)
            task.add_done_callback(self._ack_writes.discard)
        await self._dispatch()

    async def _dead_letter(self, dead: Sequence[Delivery],
                           after: asyncio.Future[int] | None) -> int:
        """Move exhausted deliveries to the dead letters once the move before (``after``) is done,
        then ack them; a failure leaves them pending, to be dead-lettered on their next reclaim
        (the move is idempotent)."""
        if after is not None:
            await asyncio.wait([after])  # in the partition's order
        try:
            for delivery in dead:  # one at a time: the dead letters keep the partition's order
                await self._dead_letters(self.topic, self.group, delivery,
                                         "max_deliveries exceeded")
            offsets = [delivery.entry.offset for delivery in dead]
            acked = await self._store.ack(self.topic, self.partition, self.group, offsets)
        except (StorageError, PartitionerError) as exc:
            log.warning("dead letters of %s/%s for group %s not written yet: %s", self.topic,
                        self.partition, self.group, exc)
            return 0
        if self._keys is not None:
            self._free_keys(offsets)
        return acked

    async def _dispatch(self) -> None:
        """Hand backlog entries to sessions with credit, round-robin, a page per session.

        A page is at most the backlog's even share over the attached sessions (so a shared group
        still spreads a small backlog over its members) and at most the session's credit.
        """
        if self._keys is not None:
            self._dispatch_by_key()
            return
        auto_acked: list[str] = []
        delivery_counts: list[int] = []
        backlog = self._backlog
        while backlog and self._sessions:
            session = self._session_with_credit()
            if session is None:
                break
            share = -(-len(backlog) // len(self._sessions))
            page = _take_front(backlog, min(share, session.credit))
            taken = session.offer_page(page)
            if taken < len(page):
                # not taken (the session started closing): back in front
                backlog.extendleft(reversed(page[taken:]))
                page = page[:taken]
            delivery_span(self.topic, self.group, self._labels[2], page)
            delivery_counts.extend(map(_DELIVERY_COUNT, page))
            if self.config.auto_ack:
                auto_acked.extend(map(_ENTRY_OFFSET, page))
            if not taken:
                break
        self._metrics.count_deliveries(*self._labels, delivery_counts)
        if auto_acked:  # at-most-once: acked as handed out, before the client has it
            await self._store.ack(self.topic, self.partition, self.group, auto_acked)
            self._metrics.acks.labels(*self._labels).inc(len(auto_acked))

    def _dispatch_by_key(self) -> None:
        """Hand the backlog out by key (``KeyOrder.route``); what no session has credit for stays
        in front, in order."""
        assert self._keys is not None
        if not self._backlog or not self._sessions:
            return
        credit = {session: session.credit for session in self._sessions if session.has_credit}
        pages, waiting = self._keys.route(self._backlog, self._sessions, credit)
        self._backlog = deque(waiting)
        delivery_counts: list[int] = []
        for session, page in pages.items():
            taken = session.offer_page(page)
            if taken < len(page):
                self._keys.untaken(page[taken:])
                self._backlog.extendleft(reversed(page[taken:]))
                page = page[:taken]
            delivery_counts.extend(map(_DELIVERY_COUNT, page))
            delivery_span(self.topic, self.group, self._labels[2], page)
        self._metrics.count_deliveries(*self._labels, delivery_counts)

    def _session_with_credit(self) -> Session | None:
        for _ in range(len(self._sessions)):
            self._next_session = (self._next_session + 1) % len(self._sessions)
            session = self._sessions[self._next_session]
            if session.has_credit:
                return session
        return None


def _take_front(backlog: deque[Delivery], count: int) -> list[Delivery]:
    """The first ``count`` deliveries of the backlog, removed from it (all of it in one step when it
    fits)."""
    if count >= len(backlog):
        page = list(backlog)
        backlog.clear()
        return page
    return [backlog.popleft() for _ in range(count)]


async def _logged(write: Coroutine[Any, Any, None], topic: str, partition: int,
                  group: str) -> int:
    try:
        await write
    except StorageError as exc:
        log.warning("parked keys of %s/%s for group %s not recorded: %s", topic, partition,
                    group, exc)
    return 0


def _settle_future(done: asyncio.Future[None], task: asyncio.Future[int]) -> None:
    """Hand the outcome of a batched XACK to everyone waiting for it."""
    if done.done():
        return
    if task.cancelled():
        done.set_exception(StorageError("ack cancelled"))
    elif task.exception() is not None:
        done.set_exception(task.exception() or StorageError("ack failed"))
        # retrieved here: a waiter that was cancelled meanwhile must not leave a warning
        done.exception()
    else:
        done.set_result(None)
