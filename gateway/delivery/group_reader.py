"""One reader per (topic, partition, group) per gateway process, fanning deliveries out to local
sessions: the coordinator that wires its rooms (read loop, dispatch, redelivery, settler)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections import deque
from collections.abc import Sequence
from operator import itemgetter

from gateway.delivery.dispatch import Dispatcher
from gateway.delivery.group_config import GroupConfig, ReaderScope
from gateway.delivery.growth_gate import Gate
from gateway.delivery.key_dispatch import KeyedDispatch
from gateway.delivery.pause_gate import PauseGate
from gateway.delivery.read_loop import READ_BLOCK_MS, ReadLoop
from gateway.delivery.reclaim import DeadLetterChain, Redelivery
from gateway.delivery.retry_policy import DeadLetterSink
from gateway.delivery.session import MessageRef, Session
from gateway.delivery.settler import Settler
from gateway.observe.metrics import GatewayMetrics
from storage.errors import StorageError
from storage.groups_protocol import GroupStore
from storage.models import Delivery

_OFFSET_OF_REF = itemgetter(1)


class GroupReader:
    """Reads one partition for one group and hands entries to the sessions attached to it."""

    def __init__(self, topic: str, partition: int, group: str, config: GroupConfig,
                 store: GroupStore, consumer: str, dead_letters: DeadLetterSink,
                 metrics: GatewayMetrics | None = None, gate: Gate | None = None,
                 pauses: PauseGate | None = None) -> None:
        self.topic = topic
        self.partition = partition
        self.group = group
        self.config = config
        metrics = metrics or GatewayMetrics.create()
        self._metrics = metrics
        self._scope = scope = ReaderScope.of(topic, partition, group, consumer, config)
        backlog: deque[Delivery] = deque()
        credit = asyncio.Event()
        self._settler = settler = Settler(store, scope)
        self._keyed = keyed = (KeyedDispatch(store, scope, backlog, credit, settler, metrics)
                               if config.key_ordered else None)
        chain = DeadLetterChain(scope, dead_letters, settler, keyed)
        paused = None if pauses is None else functools.partial(pauses.paused, topic, group)
        self._dispatcher = dispatcher = Dispatcher(scope, config, settler, keyed, chain.later,
                                                   metrics, backlog, credit, paused)
        self._redelivery = redelivery = Redelivery(store, scope, config, dispatcher, settler,
                                                   keyed, dead_letters, metrics)
        self._loop = ReadLoop(store, scope, config, dispatcher, redelivery, keyed, gate, pauses)
        self._task: asyncio.Task[None] | None = None

    # --- sessions ---------------------------------------------------------------------------------
    def attach(self, session: Session) -> None:
        """Serve ``session`` from now on; starts the loop on first use."""
        self._dispatcher.attach(session)
        if self._task is None:
            self._task = asyncio.create_task(
                self._loop.run(), name=f"reader-{self.topic}/{self.partition}/{self.group}")

    async def detach(self, session: Session) -> None:
        """Stop serving ``session`` and make its un-acked deliveries redeliverable at once."""
        self._dispatcher.detach(session)
        await self.release([offset for _, offset in session.take_back(self.partition)])

    @property
    def idle(self) -> bool:
        """No session is attached."""
        return not self._dispatcher.sessions

    async def aclose(self) -> None:
        """Stop the loop and hand the local backlog back to the group."""
        self._loop.stopping = True
        self._dispatcher.credit.set()
        task, self._task = self._task, None
        if task is not None:
            # On timeout wait_for cancels it; entries read meanwhile are reclaimed after their ack
            # timeout.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(task, READ_BLOCK_MS / 1000 * 4)
        backlog = self._dispatcher.backlog
        offsets = [d.entry.offset for d in backlog]
        if self._keyed is not None:
            offsets += await self._keyed.aclose()
        backlog.clear()
        with contextlib.suppress(StorageError):
            await self.release(offsets)

    # --- settled by sessions (any session, any gateway may settle) --------------------------------
    async def ack(self, refs: Sequence[MessageRef]) -> None:
        """Acknowledge deliveries; batched with this tick's other acks (``Settler``)."""
        await self._settler.ack(refs)
        self._metrics.acks.labels(*self._scope.labels).inc(len(refs))
        if self._keyed is not None:  # once acked: a failed XACK leaves the key in flight
            self._keyed.settled(map(_OFFSET_OF_REF, refs))

    async def nack(self, refs: Sequence[MessageRef], delay_ms: int) -> None:
        """Redeliver after ``delay_ms`` (0: as soon as possible, or after the group's retry
        backoff) without waiting for the ack timeout."""
        await self._redelivery.nack(refs, delay_ms)

    async def reject(self, refs: Sequence[MessageRef], reason: str) -> None:
        """Send deliveries to the dead-letter topic now, with ``reason``, and ack them here."""
        await self._redelivery.reject(refs, reason)

    async def extend(self, refs: Sequence[MessageRef]) -> None:
        """Restart the ack timeout of deliveries still being worked on."""
        await self._settler.set_idle([offset for _, offset in refs], 0)

    async def release(self, offsets: Sequence[str]) -> None:
        """Make deliveries redeliverable at once (their session went away or lost the partition)."""
        await self._redelivery.release(offsets)
