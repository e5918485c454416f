"""HTTP pull for clients that cannot hold a socket: stateless, so any gateway replica serves any
call.

A pull reclaims entries whose ack timeout passed (redelivery, or the dead-letter topic past
max_deliveries), then reads new ones across the topic's partitions, long-polling up to ``wait_ms``.
Each message carries a signed receipt (gateway.delivery.receipts); ack/nack/extend take receipts, so
they work on any replica that shares the receipt key.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import TYPE_CHECKING, Any

from gateway.delivery.expiry import deliveries_may_expire, is_expired, now_ms, report_expired
from gateway.delivery.growth_gate import Gate
from gateway.delivery.pause_gate import PauseGate, pause_fields
from gateway.delivery.receipts import Receipt, ReceiptSigner
from gateway.delivery.retry_policy import (
    EXHAUSTED,
    RELEASE_IDLE_MS,
    DeadLetterSink,
    dead_letter_delivered,
    dead_letter_now,
    due_again,
    nack_idles,
)
from gateway.observe.metrics import GatewayMetrics
from gateway.observe.tracing import delivery_span
from gateway.quotas.in_flight import InFlightWindow
from partitioner.errors import CoordinationUnavailable, PartitionerError
from partitioner.group_policy import NO_BACKOFF, RetryBackoff
from storage.errors import StorageError, StorageUnavailable
from storage.groups_protocol import GroupStore
from storage.models import Delivery, StoredEntry, first_deliveries

if TYPE_CHECKING:
    from gateway.delivery.pinning import PinnedVersion

log = logging.getLogger(__name__)

PULL_CONSUMER = "http-pull"
UNAVAILABLE = (StorageUnavailable, CoordinationUnavailable)
POLL_INTERVAL_S = 0.05
MAX_GATES = 10_000


@dataclass(frozen=True, slots=True)
class PullRequest:
    """A validated pull."""

    topic: str
    max_messages: int
    wait_ms: int
    ack_timeout_ms: int
    max_deliveries: int
    retry_backoff: RetryBackoff = NO_BACKOFF
    pinned: PinnedVersion | None = None  # every delivery converted to this schema version


class Puller:
    """Pulls for groups on behalf of HTTP clients."""

    def __init__(self, store: GroupStore, dead_letters: DeadLetterSink,
                 metrics: GatewayMetrics | None = None,
                 signer: ReceiptSigner | None = None,
                 gates: Callable[[str, str], Gate] | None = None,
                 pauses: PauseGate | None = None) -> None:
        self.store = store
        self.pauses = pauses or PauseGate()  # a paused group's pulls get nothing new
        self._gate_of = gates  # (topic, group) -> its growth gate; None: never held
        self._gates: dict[tuple[str, str], Gate] = {}
        self.signer = signer or ReceiptSigner.random()
        self._metrics = metrics or GatewayMetrics.create()
        self._dead_letters = dead_letters
        self._ensured: set[tuple[str, int, str]] = set()
        self._rotation = itertools.count()

    async def pull(self, group: str, request: PullRequest, partitions: int) -> list[Delivery]:
        """Up to ``max_messages`` deliveries, waiting up to ``wait_ms`` for the first."""
        await self._ensure(request.topic, partitions, group)
        deadline = time.monotonic() + request.wait_ms / 1000
        first = next(self._rotation) % partitions
        order = [(first + i) % partitions for i in range(partitions)]
        while True:
            deliveries: list[Delivery] = []
            try:
                if self.pauses.pause_of(request.topic, group) is None:
                    await self._reclaim(group, request, order, deliveries)
                    await self._read_new(group, request, order, deliveries)
                broken = False
            except UNAVAILABLE:
                # What was claimed or read is this pull's: failing it would leave those entries
                # pending until their ack timeout, behind newer entries of their partitions.
                if not deliveries:
                    raise
                broken = True
            if deliveries_may_expire(deliveries):
                deliveries = await self._drop_expired(group, request.topic, deliveries)
            if request.pinned is not None and deliveries:
                deliveries = await self._converted(group, request.topic, request.pinned,
                                                   deliveries)
            remaining = deadline - time.monotonic()
            if deliveries or broken or remaining <= 0:
                self._metrics.count_deliveries(request.topic, group, "pull",
                                               (d.delivery_count for d in deliveries))
                delivery_span(request.topic, group, "pull", deliveries)
                return deliveries
            await asyncio.sleep(min(POLL_INTERVAL_S, remaining))

    def pause_fields(self, topic: str, group: str) -> dict[str, Any]:
        """``paused`` and ``until_ms`` of a pull's answer: a paused group's pull answers no
        message (after waiting ``wait_ms`` for a resume)."""
        return pause_fields(self.pauses.pause_of(topic, group))

    async def _read_new(self, group: str, request: PullRequest, order: Sequence[int],
                        deliveries: list[Delivery]) -> None:
        for partition in order:
            wanted = request.max_messages - len(deliveries)
            if wanted <= 0:
                return
            cap = await self._cap(request.topic, group, partition)
            entries = await self.store.read_new(request.topic, partition, group, PULL_CONSUMER,
                                                 count=wanted, block_ms=0, until=cap)
            deliveries += first_deliveries(entries)

    async def _drop_expired(self, group: str, topic: str,
                            deliveries: list[Delivery]) -> list[Delivery]:
        """The deliveries still live; the expired ones acked for the group, counted and logged."""
        at_ms = now_ms()
        live: list[Delivery] = []
        expired: dict[int, list[StoredEntry]] = defaultdict(list)
        for delivery in deliveries:
            entry = delivery.entry
            if entry.headers and is_expired(entry.headers, at_ms):
                expired[entry.partition].append(entry)
            else:
                live.append(delivery)
        counter = self._metrics.expired.labels(topic, group, "pull")
        for partition, entries in expired.items():
            try:
                await self.store.ack(topic, partition, group, [entry.offset for entry in entries])
            except UNAVAILABLE:
                continue  # left pending: dropped when they come back, the live ones still go out
            report_expired(counter, topic, group, entries)
        return live

    async def _converted(self, group: str, topic: str, pinned: PinnedVersion,
                         deliveries: list[Delivery]) -> list[Delivery]:
        """The deliveries at the pinned version; those that cannot be converted go to the dead
        letters with the reason and are acked for the group (never handed out unconverted)."""
        converted, failed = pinned.split(deliveries)
        if failed:
            try:
                await dead_letter_delivered(self.store, self._dead_letters, topic, group, failed)
            except (StorageError, PartitionerError) as exc:
                # left pending: they come back after their ack timeout and are tried again
                log.warning("dead letters of %s for group %s not written yet: %s", topic, group,
                            exc)
        return converted

    async def _cap(self, topic: str, group: str, partition: int) -> str | None:
        if self._gate_of is None:
            return None
        gate = self._gates.get((topic, group))
        if gate is None:
            if len(self._gates) >= MAX_GATES:
                self._gates.clear()  # a gate only remembers what passed: cheap to rebuild
            gate = self._gates[(topic, group)] = self._gate_of(topic, group)
        return await gate.cap(partition)

    async def _ensure(self, topic: str, partitions: int, group: str) -> None:
        for partition in range(partitions):
            if (topic, partition, group) not in self._ensured:
                await self.store.ensure_group(topic, partition, group, "earliest")
                self._ensured.add((topic, partition, group))

    async def _reclaim(self, group: str, request: PullRequest, order: Sequence[int],
                       deliveries: list[Delivery]) -> None:
        for partition in order:
            wanted = request.max_messages - len(deliveries)
            if wanted <= 0:
                return
            expired = await due_again(self.store, request.topic, partition, group,
                                      request.ack_timeout_ms, request.retry_backoff, wanted)
            if not expired:
                continue
            claimed = await self.store.claim(request.topic, partition, group, PULL_CONSUMER,
                                             expired, min_idle_ms=request.ack_timeout_ms)
            deliveries += await self._drop_dead(group, request, claimed)

    async def _drop_dead(self, group: str, request: PullRequest,
                         claimed: list[Delivery]) -> list[Delivery]:
        dead = [(d, EXHAUSTED) for d in claimed if d.delivery_count > request.max_deliveries]
        await dead_letter_delivered(self.store, self._dead_letters, request.topic, group, dead)
        return [d for d in claimed if d.delivery_count <= request.max_deliveries]

    async def release(self, topic: str, partition: int, group: str,
                      offsets: Sequence[str]) -> None:
        """Make pending entries redeliverable at once (whoever serves the group takes them)."""
        await self.store.set_idle(topic, partition, group, PULL_CONSUMER, offsets,
                                  RELEASE_IDLE_MS)

    async def dead_letter(self, topic: str, partition: int, group: str, offsets: Sequence[str],
                          reason: str) -> int:
        """Send pending entries to the dead letters now, with ``reason``; how many went."""
        return await dead_letter_now(self.store, self._dead_letters, topic, partition, group,
                                     PULL_CONSUMER, offsets, reason)

    async def settle(self, group: str, receipts: Sequence[Receipt], action: str,
                     delay_ms: int = 0,
                     backoffs: Mapping[str, RetryBackoff] | None = None,
                     reason: str = "", window: InFlightWindow | None = None) -> int:
        """ack / nack / extend / reject by receipt; returns how many receipts were applied. A
        nack waits the group's backoff on the receipt's topic (``backoffs``, its stored policy)
        unless it names a delay; a reject dead-letters with ``reason``. What an ack, nack or
        reject settled is credited to ``window`` (the caller's in-flight quota), at most once per
        delivery."""
        by_partition: dict[tuple[str, int, int], list[Receipt]] = defaultdict(list)
        for receipt in receipts:
            by_partition[(receipt.topic, receipt.partition,
                          receipt.ack_timeout_ms)].append(receipt)
        for (topic, partition, ack_timeout_ms), held in by_partition.items():
            offsets = [receipt.offset for receipt in held]
            if action == "ack":
                acked = await self.store.ack(topic, partition, group, offsets)
                _credit(window, held, acked)
                self._metrics.acks.labels(topic, group, "pull").inc(len(offsets))
            elif action == "extend":
                await self.store.set_idle(topic, partition, group, PULL_CONSUMER, offsets, 0)
            elif action == "reject":
                _credit(window, held, await dead_letter_now(
                    self.store, self._dead_letters, topic, partition, group, PULL_CONSUMER,
                    offsets, reason))
                self._metrics.acks.labels(topic, group, "pull").inc(len(offsets))
            else:
                _credit(window, held, len(held))
                backoff = (backoffs or {}).get(topic, NO_BACKOFF)
                idles = await nack_idles(self.store, topic, partition, group, offsets, delay_ms,
                                         ack_timeout_ms, backoff)
                for idle_ms, due in idles.items():
                    await self.store.set_idle(topic, partition, group, PULL_CONSUMER, due,
                                              idle_ms)
                self._metrics.nacks.labels(topic, group, "pull").inc(len(offsets))
        return len(receipts)


def _credit(window: InFlightWindow | None, receipts: Sequence[Receipt], settled: int) -> None:
    """Credit ``settled`` of the receipts' deliveries (each once, however often its receipt came):
    the latest deadlines, whose charges are the likeliest still counted."""
    if window is None or settled <= 0:
        return
    unique = {f"{r.topic}\x1f{r.partition}\x1f{r.offset}\x1f{r.issued_ms}":
              r.issued_ms + r.ack_timeout_ms for r in receipts}
    latest = sorted(unique.items(), key=itemgetter(1), reverse=True)
    window.credit_receipts(latest[:settled])
