"""A group reader's loop: wait for credit, hand out the backlog, reclaim, else read new entries
(coalescing reads while the sessions' credit is a sliver), after a start that takes over and tells
of gaps; nothing of it while the group is paused."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from gateway.delivery.dispatch import Dispatcher
from gateway.delivery.group_config import GroupConfig, ReaderScope
from gateway.delivery.growth_gate import GATE_POLL_S, Gate
from gateway.delivery.key_dispatch import KeyedDispatch
from gateway.delivery.key_fence import held_elsewhere
from gateway.delivery.pause_gate import PauseGate
from gateway.delivery.reclaim import Redelivery
from gateway.delivery.wire import gap_frame
from storage.errors import StorageError
from storage.groups_protocol import GroupStore
from storage.models import StoredEntry, first_deliveries

log = logging.getLogger(__name__)

READ_BLOCK_MS = 250
READ_BATCH_MAX = 1000
# the longest a read waits for more credit than a sliver of a session's window
READ_COALESCE_S = 0.002
TAKEOVER_PAGE = 10_000
ERROR_BACKOFF_S = 0.5


class ReadLoop:
    """Each turn: wait until some session has credit; hand out the local backlog; reclaim entries
    whose ack timeout passed; else read new entries (XREADGROUP, blocking briefly).

    A read waits, at most ``READ_COALESCE_S``, until some session has half its window free or
    nothing in flight (TCP's silly-window avoidance): a client acking a few messages at a time
    would otherwise make every read, page and XACK a few messages long.
    """

    def __init__(self, store: GroupStore, scope: ReaderScope, config: GroupConfig,
                 dispatcher: Dispatcher, redelivery: Redelivery, keyed: KeyedDispatch | None,
                 gate: Gate | None, pauses: PauseGate | None = None) -> None:
        self._store = store
        self._pauses = pauses  # holds every turn while the group is paused
        self._scope = scope
        self._config = config
        self._dispatcher = dispatcher
        self._redelivery = redelivery
        self._keyed = keyed
        self._gate = gate  # holds the partition past a growth's fence (grown topics)
        self._more_waiting = False  # the last read filled its count
        # the newest offset this reader's reads returned (the group's position at the start), and
        # whether the last read failed: its reply may be lost with entries handed to it
        self._last_read: str | None = None
        self._read_failed = False
        self.stopping = False

    async def run(self) -> None:
        """Turn until stopped; a storage error is logged and the turn tried again."""
        started = False
        while not self.stopping:
            try:
                if not started:
                    await self._start()
                    started = True
                await self._hold_while_paused()
                if not self.stopping:
                    await self._turn()
            except StorageError as exc:
                scope = self._scope
                log.warning("reader %s/%s/%s: %s; retrying", scope.topic, scope.partition,
                            scope.group, exc)
                await asyncio.sleep(ERROR_BACKOFF_S)

    async def _start(self) -> None:
        store, scope = self._store, self._scope
        await store.ensure_group(scope.topic, scope.partition, scope.group, self._config.start)
        if self._keyed is not None:
            await self._keyed.start()
        last = (await store.state(scope.topic, scope.partition, scope.group)
                ).last_delivered_offset
        self._last_read = last or "0-0"
        await self._tell_of_gap(last)
        if self._config.exclusive or self._keyed is not None:
            await self._take_over()

    async def _tell_of_gap(self, last: str | None) -> None:
        """A group resuming (from ``last``) where retention has passed, or starting where entries
        moved into the archive (its reads skip them): its sessions get a ``gap`` frame before
        anything of the partition."""
        store, scope = self._store, self._scope
        lost = (None if last is None
                else await store.lost_after(scope.topic, scope.partition, last, scope.group))
        if lost is not None:
            log.info("group %s resumes %s/%s past entries retention removed after %s",
                     scope.group, scope.topic, scope.partition, lost.after)
            for session in self._dispatcher.sessions:
                session.send_control(gap_frame(lost))

    async def _take_over(self) -> None:
        """A new exclusive or key-ordered reader first takes the partition's pending entries, in
        offset order: a key's earlier messages go out before its later ones.

        One page: entries beyond it (more than TAKEOVER_PAGE un-acked) follow through the
        ack-timeout reclaim. A key-ordered reader leaves what members on other gateways still hold
        with them (their keys are fenced: ``key_fence``).
        """
        store, scope = self._store, self._scope
        pending = await store.expired(scope.topic, scope.partition, scope.group, min_idle_ms=0,
                                      count=TAKEOVER_PAGE)
        if self._keyed is not None:
            timeout_ms = self._config.ack_timeout_ms
            pending = [p for p in pending if not held_elsewhere(p, scope, timeout_ms)]
        if pending:
            claimed = await store.claim(scope.topic, scope.partition, scope.group,
                                        scope.consumer, pending, min_idle_ms=0)
            await self._dispatcher.accept(claimed)

    async def _turn(self) -> None:
        dispatcher = self._dispatcher
        await self._wait_for_credit()
        if self.stopping or self._paused():
            return
        if dispatcher.backlog:
            await dispatcher.dispatch()
            if not dispatcher.any_credit():
                return
        if await self._redelivery.reclaim():
            return
        if not dispatcher.worth_a_read():
            await self._wait_for_more_credit(READ_COALESCE_S)
            if self.stopping or not dispatcher.any_credit():
                return
        count = min(dispatcher.total_credit(), READ_BATCH_MAX)
        if self._gate is not None:
            cap = await self._gate.cap(self._scope.partition)
            if cap is not None:
                await self._read_up_to(cap, count)
                return
        if self._keyed is not None and self._keyed.in_flight:
            await self._read_beside_keys_in_flight(count)
            return
        # After a full read more is likely waiting: read without blocking (the store's pipelined
        # connection); after a short one, block for what comes next.
        entries = await self._read_new(count, 0 if self._more_waiting else READ_BLOCK_MS)
        self._more_waiting = len(entries) == count
        await dispatcher.accept_new(first_deliveries(entries))

    def _paused(self) -> bool:
        return self._pauses is not None and self._pauses.paused(self._scope.topic,
                                                                self._scope.group)

    async def _hold_while_paused(self) -> None:
        """While the group is paused nothing goes out: no backlog, no reclaim (an entry whose
        ack timeout passes meanwhile is redelivered after the resume), no read. Acks still settle
        (they wake this wait, which looks again)."""
        if not self._paused():
            return
        await self._hand_back_backlog()
        while self._pauses is not None and not self.stopping and self._paused():
            credit = self._dispatcher.credit
            credit.clear()
            await self._pauses.hold(self._scope.topic, self._scope.group, credit)

    async def _hand_back_backlog(self) -> None:
        """What a read in flight at the pause returned goes back to the group, due at once (after
        the resume whichever reader looks first takes it): kept here, it would age past its ack
        timeout and be taken by another gateway's reader too. A key-ordered reader keeps its
        backlog (its keys are fenced to it)."""
        backlog = self._dispatcher.backlog
        if self._keyed is None and backlog:
            offsets = [delivery.entry.offset for delivery in backlog]
            backlog.clear()
            await self._redelivery.release(offsets)

    async def _read_up_to(self, cap: str, count: int) -> None:
        """A read of a grown topic's partition held at the growth's fence."""
        entries = await self._read_new(count, 0, until=cap)
        if not entries:
            await asyncio.sleep(GATE_POLL_S)
        await self._dispatcher.accept_new(first_deliveries(entries))

    async def _read_beside_keys_in_flight(self, count: int) -> None:
        """A key-ordered read while keys are in flight: an ack may free a key's next message at any
        moment, so the read never blocks (it waits for an ack or credit instead), and it stops
        while ``MAX_HELD`` messages wait behind their keys."""
        assert self._keyed is not None
        entries = [] if not self._keyed.may_read else await self._read_new(count, 0)
        if entries:
            await self._dispatcher.accept_new(first_deliveries(entries))
            return
        credit = self._dispatcher.credit
        credit.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(credit.wait(), READ_BLOCK_MS / 1000)

    async def _read_new(self, count: int, block_ms: int, until: str | None = None
                        ) -> list[StoredEntry]:
        """Entries never delivered to the group; after a failed read, first those its lost reply
        handed to this reader (so they go out in offset order, not after their ack timeout)."""
        scope = self._scope
        try:
            entries = await self._store.read_new(
                scope.topic, scope.partition, scope.group, scope.consumer, count=count,
                block_ms=block_ms, until=until, last_read=self._last_read,
                lost=self._read_failed)
        except StorageError:
            self._read_failed = True
            raise
        self._read_failed = False
        if entries:
            self._last_read = entries[-1].offset
        return entries

    async def _wait_for_credit(self) -> None:
        credit, dispatcher = self._dispatcher.credit, self._dispatcher
        while not self.stopping and not dispatcher.any_credit():
            credit.clear()
            await credit.wait()

    async def _wait_for_more_credit(self, longest_s: float) -> None:
        """Until a session's credit is worth a read (``Session.worth_a_read``), at most
        ``longest_s``."""
        deadline = asyncio.get_running_loop().time() + longest_s
        credit, dispatcher = self._dispatcher.credit, self._dispatcher
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout_at(deadline):
                while not self.stopping and not dispatcher.worth_a_read():
                    credit.clear()
                    await credit.wait()
