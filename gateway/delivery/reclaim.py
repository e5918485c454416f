"""A group reader's redelivery: nacked and released entries claimed by offset, entries past their
ack timeout (and retry backoff) reclaimed, and exhausted ones moved to the dead letters in order."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence

from gateway.delivery.dispatch import Dispatcher
from gateway.delivery.group_config import GroupConfig, ReaderScope
from gateway.delivery.key_dispatch import KeyedDispatch
from gateway.delivery.retry_policy import (
    RELEASE_IDLE_MS,
    DeadLetter,
    DeadLetterSink,
    dead_letter_now,
    due_again,
    nack_idles,
)
from gateway.delivery.session import MessageRef
from gateway.delivery.settler import Settler
from gateway.observe.metrics import GatewayMetrics
from partitioner.errors import PartitionerError
from storage.errors import StorageError
from storage.groups_protocol import GroupStore
from storage.models import Delivery

log = logging.getLogger(__name__)

MIN_RECLAIM_S = 0.05


class DeadLetterChain:
    """Exhausted deliveries moved to the dead letters beside the loop (other keys need not wait for
    the dead letters' acks=all writes), each move after the one before: the partition's order."""

    def __init__(self, scope: ReaderScope, sink: DeadLetterSink, settler: Settler,
                 keyed: KeyedDispatch | None) -> None:
        self._scope = scope
        self._sink = sink
        self._settler = settler
        self._keyed = keyed
        self._last: asyncio.Future[int] | None = None  # the latest move, beside the loop

    def later(self, dead: Sequence[DeadLetter]) -> None:
        """Move ``dead`` (exhausted, or not convertible to a pinned schema version) once the moves
        before it are done."""
        task = asyncio.ensure_future(self._move(dead, self._last))
        self._last = task
        self._settler.keep(task)

    async def _move(self, dead: Sequence[DeadLetter], after: asyncio.Future[int] | None) -> int:
        """Move exhausted deliveries to the dead letters once the move before (``after``) is done,
        then ack them; a failure leaves them pending, to be dead-lettered on their next reclaim
        (the move is idempotent)."""
        if after is not None:
            await asyncio.wait([after])  # in the partition's order
        scope = self._scope
        try:
            for delivery, reason in dead:  # one at a time: the dead letters keep the order
                await self._sink(scope.topic, scope.group, delivery, reason)
            offsets = [delivery.entry.offset for delivery, _ in dead]
            acked = await self._settler.ack_now(offsets)
        except (StorageError, PartitionerError) as exc:
            log.warning("dead letters of %s/%s for group %s not written yet: %s", scope.topic,
                        scope.partition, scope.group, exc)
            return 0
        if self._keyed is not None:
            self._keyed.settled(offsets)
        return acked


class Redelivery:
    """When a reader's failed deliveries come again: claimed by offset once nacked or released
    here, else reclaimed by a periodic scan once past their ack timeout."""

    def __init__(self, store: GroupStore, scope: ReaderScope, config: GroupConfig,
                 dispatcher: Dispatcher, settler: Settler, keyed: KeyedDispatch | None,
                 dead_letters: DeadLetterSink, metrics: GatewayMetrics) -> None:
        self._store = store
        self._scope = scope
        self._config = config
        self._dispatcher = dispatcher
        self._settler = settler
        self._keyed = keyed
        self._dead_letters = dead_letters
        self._metrics = metrics
        self._due_now: list[str] = []  # nacked or released here: claimed by offset, no scan
        self._reclaim_now = True
        self._last_reclaim = 0.0

    # --- settled by a consumer --------------------------------------------------------------------
    async def nack(self, refs: Sequence[MessageRef], delay_ms: int) -> None:
        """Redeliver after ``delay_ms`` (0: as soon as possible, or after the group's retry
        backoff) without waiting for the ack timeout."""
        offsets = [offset for _, offset in refs]
        scope, config = self._scope, self._config
        idles = await nack_idles(self._store, scope.topic, scope.partition, scope.group, offsets,
                                 delay_ms, config.ack_timeout_ms, config.retry_backoff)
        for idle_ms, due in idles.items():
            await self._settler.set_idle(due, idle_ms)
        self._metrics.nacks.labels(*scope.labels).inc(len(refs))
        if self._keyed is not None:
            self._keyed.failed(offsets)
        self.redeliver_soon(idles.get(RELEASE_IDLE_MS, []))

    async def reject(self, refs: Sequence[MessageRef], reason: str) -> None:
        """Send deliveries to the dead-letter topic now, with ``reason``, and ack them here."""
        scope = self._scope
        await dead_letter_now(self._store, self._dead_letters, scope.topic, scope.partition,
                              scope.group, scope.consumer, [offset for _, offset in refs], reason)
        self._metrics.acks.labels(*scope.labels).inc(len(refs))
        if self._keyed is not None:
            self._keyed.settled(offset for _, offset in refs)

    async def release(self, offsets: Sequence[str]) -> None:
        """Make deliveries redeliverable at once (their session went away or lost the partition)."""
        if offsets:
            await self._settler.set_idle(offsets, RELEASE_IDLE_MS)
            self.redeliver_soon(offsets)

    def redeliver_soon(self, offsets: Sequence[str]) -> None:
        """Entries made due at once: the loop's next turn claims them by offset."""
        if offsets:
            self._due_now.extend(offsets)
            self._dispatcher.credit.set()  # a loop waiting for credit or an ack looks again

    # --- the loop's turn --------------------------------------------------------------------------
    async def reclaim(self) -> bool:
        """Claim entries past their ack timeout (and the group's retry backoff after their last
        delivery); True when something was claimed."""
        store, scope, config = self._store, self._scope, self._config
        backoff = config.retry_backoff
        interval_s = min(config.ack_timeout_ms / 4000, 1.0,
                         max(MIN_RECLAIM_S, backoff.initial_ms / 4000) if backoff.initial_ms
                         else 1.0)
        if self._due_now:
            offsets, self._due_now = self._due_now, []
            return await self._redeliver(await store.claim_offsets(
                scope.topic, scope.partition, scope.group, scope.consumer, offsets,
                min_idle_ms=config.ack_timeout_ms))
        if not self._reclaim_now and time.monotonic() - self._last_reclaim < interval_s:
            return False
        self._reclaim_now = False
        self._last_reclaim = time.monotonic()
        if self._keyed is not None:
            await self._keyed.reconcile(self._last_reclaim)
        credit = self._dispatcher.total_credit()
        # messages waiting here behind their keys are idle in the pending list but wait for
        # their turn, not for a member: claimed again they would count deliveries never made
        waiting = set() if self._keyed is None else self._keyed.held_here()
        expired = await due_again(store, scope.topic, scope.partition, scope.group,
                                  config.ack_timeout_ms, backoff, credit + len(waiting))
        expired = [entry for entry in expired if entry.offset not in waiting][:credit]
        if not expired:
            return False
        return await self._redeliver(await store.claim(
            scope.topic, scope.partition, scope.group, scope.consumer, expired,
            min_idle_ms=config.ack_timeout_ms))

    async def _redeliver(self, claimed: list[Delivery]) -> bool:
        """Claimed entries out again (counted failures park their keys); True when any."""
        for delivery in claimed:
            self._dispatcher.forget_everywhere((delivery.entry.partition, delivery.entry.offset))
        if self._keyed is not None:
            self._keyed.failed(d.entry.offset for d in claimed if d.delivery_count > 1)
        await self._dispatcher.accept(claimed)
        return bool(claimed)
