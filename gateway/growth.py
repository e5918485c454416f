"""Growing a topic's partitions at one cut, so no consumer sees a key's new message before its
older ones.

The gateway asked to grow a topic marks it growing in etcd; every gateway then refuses new
publishes to it (503) and, once its publishes placed by the old count are written, says so in etcd
(``GrowthAcks``). When every live gateway has, the old partitions' last offsets become the growth's
fences and the new count is stored with them; consumers hold a partition's entries past its fence
until the keys that may have moved there were consumed up to theirs
(``gateway.delivery.growth_gate``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from types import TracebackType

from gateway.errors import unavailable
from gateway.publish.in_flight import InFlight
from partitioner.cache import TopicCache
from partitioner.errors import ConcurrentModification, PartitionerError
from partitioner.growth import PauseAcks
from partitioner.registry import TopicRegistry
from partitioner.tasks import cancel_until_done
from partitioner.topics import TopicMetadata
from storage.protocol import StreamStore

log = logging.getLogger(__name__)

ACK_POLL_S = 0.02
EMPTY_FENCE = "0-0"


class Growth:
    """Grows topics for the PATCH route (one per gateway process)."""

    def __init__(self, registry: TopicRegistry, cache: TopicCache, store: StreamStore,
                 acks: PauseAcks, pause_limit_s: float) -> None:
        self._registry, self._cache, self._store, self.acks = registry, cache, store, acks
        self.pause_limit_s = pause_limit_s

    async def grow(self, name: str, partitions: int) -> TopicMetadata:
        """Grow ``name`` to ``partitions`` (or finish such a growth under way); 503 when some
        gateway did not pause in time (nothing changed then)."""
        current = await self._registry.get(name)
        if current.growing_to is None and current.partitions == partitions:
            return current
        if current.growing_to is None:
            current = await self._step(current.growing(partitions, time.time_ns() // 1_000_000))
        elif current.growing_to != partitions:
            raise ConcurrentModification(name)
        if not current.fenced:
            await self._wait_for_pauses(current)
            last = await self._store.last_offsets(name, range(current.partitions))
            current = await self._step(
                current.with_fences([last[p] or EMPTY_FENCE for p in range(current.partitions)]))
        # every gateway knows the fences before any publish lands past them
        await self._wait_for_pauses(current)
        grown = await self._step(current.grown())
        with contextlib.suppress(PartitionerError):
            await self.acks.clear(name)
        return grown

    async def _step(self, metadata: TopicMetadata) -> TopicMetadata:
        try:
            stored = await self._registry.update(metadata)
        except ConcurrentModification:
            raise unavailable(f"the growth of {metadata.name!r} was abandoned or changed "
                              "meanwhile; try again", 1) from None
        self._cache.remember(stored)
        return stored

    async def _wait_for_pauses(self, growing: TopicMetadata) -> None:
        deadline = time.monotonic() + self.pause_limit_s
        while waiting := await self.acks.waiting_for(growing.name, growing.version):
            if time.monotonic() > deadline:
                await self.abandon(growing)
                raise unavailable(f"gateways {', '.join(waiting)} did not pause publishing to "
                                  f"{growing.name!r} in time; nothing changed, try again", 1)
            await asyncio.sleep(ACK_POLL_S)

    async def abandon(self, growing: TopicMetadata) -> None:
        """Undo a growth that did not finish (publishes resume with the old count)."""
        with contextlib.suppress(ConcurrentModification):
            self._cache.remember(await self._registry.update(growing.growth_abandoned()))
        with contextlib.suppress(PartitionerError):
            await self.acks.clear(growing.name)


class GrowthPauses:
    """This gateway's side of every growth: acknowledge a pause once the topic's publishes under
    way are written, and abandon a growth whose gateway went away mid-way (an async context
    manager)."""

    def __init__(self, cache: TopicCache, in_flight: InFlight, growth: Growth,
                 node_id: str) -> None:
        self._cache, self._in_flight, self._growth, self._node_id = (cache, in_flight, growth,
                                                                     node_id)
        self._pending: set[str] = set()
        self._changed = asyncio.Event()
        self._unwatch = cache.watch_changes(self._note)
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> GrowthPauses:
        for topic in self._cache.all():
            self._note(topic)
        self._task = asyncio.create_task(self._run(), name="growth-pauses")
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Stop acknowledging (idempotent)."""
        self._unwatch()
        self._unwatch = lambda: None
        task, self._task = self._task, None
        if task is not None:
            await cancel_until_done([task])

    def _note(self, topic: TopicMetadata) -> None:
        if topic.growing_to is not None:
            self._pending.add(topic.name)
            self._changed.set()

    async def _run(self) -> None:
        acked: dict[str, int] = {}  # topic -> the growing version acknowledged
        while True:
            self._changed.clear()
            for name in sorted(self._pending):
                current = self._cache.get(name)
                if current is None or current.growing_to is None:
                    self._pending.discard(name)
                    acked.pop(name, None)
                    continue
                try:
                    await self._step(current, acked)
                except PartitionerError as exc:
                    log.warning("growth pause of %s not acknowledged yet: %s", name, exc)
                    await asyncio.sleep(ACK_POLL_S * 10)
                    self._changed.set()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(),
                                       self._growth.pause_limit_s if self._pending else None)

    async def _step(self, growing: TopicMetadata, acked: dict[str, int]) -> None:
        if acked.get(growing.name) != growing.version:
            await self._in_flight.drained(growing.name)
            await self._growth.acks.acknowledge(growing.name, self._node_id, growing.version)
            acked[growing.name] = growing.version
        elif _stale(growing, self._growth.pause_limit_s * 2):
            # the gateway that asked went away mid-way: publishes must not pause for good
            log.warning("abandoning the stale growth of %s", growing.name)
            await self._growth.abandon(growing)


def _stale(topic: TopicMetadata, older_than_s: float) -> bool:
    since = topic.growth_since_ms or 0
    return time.time_ns() // 1_000_000 - since > older_than_s * 1000
