"""The process-wide registry of group readers (one per (topic, partition, group)) and broadcast
tails."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from types import TracebackType

from gateway.delivery.group_config import GroupConfig
from gateway.delivery.group_reader import GroupReader
from gateway.delivery.growth_gate import Gate
from gateway.delivery.key_shared import Seats
from gateway.delivery.pause_gate import PauseGate
from gateway.delivery.retry_policy import DeadLetterSink
from gateway.delivery.session import MessageRef, Session
from gateway.delivery.tail import BroadcastTails
from gateway.observe.metrics import GatewayMetrics
from storage.groups_protocol import GroupStore

ReaderKey = tuple[str, int, str]


class GroupConflict(Exception):
    """A session asked for a group that this gateway already serves with other settings."""


class DeliveryHub:
    """Creates readers on first use, stops them when their last session leaves (async context
    manager)."""

    def __init__(self, store: GroupStore, consumer: str, dead_letters: DeadLetterSink,
                 metrics: GatewayMetrics | None = None,
                 gates: Callable[[str, str], Gate] | None = None,
                 pauses: PauseGate | None = None) -> None:
        self.store = store
        self.gates = gates  # (topic, group) -> the group's growth gate; None: never held
        self.pauses = pauses or PauseGate()  # paused groups (none without a source)
        self._metrics = metrics or GatewayMetrics.create()
        self._consumer = consumer
        self._dead_letters = dead_letters
        self._readers: dict[ReaderKey, GroupReader] = {}
        self._lock = asyncio.Lock()
        # broadcast subscriptions share one reader per partition too
        self.tails = BroadcastTails(store)
        self.seats = Seats(self)  # this gateway's members of key_shared groups

    async def __aenter__(self) -> DeliveryHub:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Stop every reader; idempotent."""
        await self.seats.aclose()
        readers, self._readers = list(self._readers.values()), {}
        await asyncio.gather(*(reader.aclose() for reader in readers), return_exceptions=True)
        await self.tails.aclose()

    async def attach(self, session: Session, partition: int, group: str,
                     config: GroupConfig) -> GroupReader:
        """Serve ``session`` from the reader of (topic, partition, group), creating it if needed."""
        async with self._lock:
            key = (session.topic, partition, group)
            reader = self._readers.get(key)
            if reader is not None and _differs(reader.config, config):
                raise GroupConflict(f"group {group!r} is served here with other settings "
                                    "(mode, filter, ack timeout, max deliveries, auto_ack "
                                    "or schema_version must match)")
            if reader is None:
                gate = None if self.gates is None else self.gates(session.topic, group)
                reader = GroupReader(session.topic, partition, group, config, self.store,
                                     self._consumer, self._dead_letters, self._metrics, gate,
                                     self.pauses)
                self._readers[key] = reader
            reader.attach(session)
            return reader

    async def detach(self, session: Session, partition: int, group: str) -> None:
        """Stop serving ``session`` from that reader; the reader stops when nobody is left."""
        async with self._lock:
            key = (session.topic, partition, group)
            reader = self._readers.get(key)
            if reader is None:
                return
            await reader.detach(session)
            if reader.idle:
                del self._readers[key]
                await reader.aclose()

    async def settle(self, session: Session, partition: int, refs: list[MessageRef], action: str,
                     delay_ms: int = 0, reason: str = "") -> int:
        """Apply ack / nack / extend / reject of one partition's deliveries from a session; how
        many it concerned. The session forgets them only once the store took it: after a failure
        (raised) they are still held, and the same refs sent again settle them."""
        held = session.extend(refs).get(partition, []) if action == "extend" \
            else session.held(refs)
        reader = self._readers.get((session.topic, partition, session.params.group or ""))
        if reader is None:  # detached meanwhile: its deliveries went back to the group then
            return 0
        if action == "ack":
            await reader.ack(held)
        elif action == "nack":
            await reader.nack(held, delay_ms)
        elif action == "reject":
            await reader.reject(held, reason)
        else:
            await reader.extend(held)
        if action != "extend":
            session.settle(held)
        return len(held)


def _differs(current: GroupConfig, wanted: GroupConfig) -> bool:
    """Everything but the start position (which only matters when the group is created) must
    match."""
    return dataclasses.replace(current, start=wanted.start) != wanted
