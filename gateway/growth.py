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
import dataclasses
import logging
import time
from collections import Counter
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
# how often a gateway paused for a growth looks whether the gateway growing it is still alive
GROWER_CHECK_S = 0.1
EMPTY_FENCE = "0-0"


class Growth:
    """Grows topics for the PATCH route (one per gateway process, ``node_id`` its node's)."""

    def __init__(self, registry: TopicRegistry, cache: TopicCache, store: StreamStore,
                 acks: PauseAcks, pause_limit_s: float, node_id: str = "") -> None:
        self._registry, self._cache, self._store, self.acks = registry, cache, store, acks
        self.pause_limit_s, self.node_id = pause_limit_s, node_id
        self.running: Counter[str] = Counter()  # the topics this process is growing now

    async def grow(self, name: str, partitions: int) -> TopicMetadata:
        """Grow ``name`` to ``partitions`` (or finish such a growth under way); 503 when some
        gateway did not pause in time (nothing changed then)."""
        self.running[name] += 1
        try:
            return await self._grow(name, partitions)
        finally:
            self.running -= Counter({name: 1})  # drops the topic at 0

    async def _grow(self, name: str, partitions: int) -> TopicMetadata:
        current = await self._registry.get(name)
        if current.growing_to is None and current.partitions == partitions:
            return current
        if current.growing_to is None:
            current = await self._step(current.growing(partitions, time.time_ns() // 1_000_000,
                                                       by=self.node_id or None))
        elif current.growing_to != partitions:
            raise ConcurrentModification(name)
        elif current.growth_by != (self.node_id or None):
            # finishing another gateway's growth: if that one dies, this one carries it on
            current = await self._step(dataclasses.replace(current, growth_by=self.node_id or None))
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
                                       GROWER_CHECK_S if self._pending else None)

    async def _step(self, growing: TopicMetadata, acked: dict[str, int]) -> None:
        if acked.get(growing.name) != growing.version:
            await self._in_flight.drained(growing.name)
            await self._growth.acks.acknowledge(growing.name, self._node_id, growing.version)
            acked[growing.name] = growing.version
        elif await self._grower_gone(growing) or _stale(growing, self._growth.pause_limit_s * 2):
            # the gateway growing it went away mid-way: publishes must not pause for good
            log.warning("abandoning the growth of %s by %s: that gateway is gone", growing.name,
                        growing.growth_by)
            await self._growth.abandon(growing)

    async def _grower_gone(self, growing: TopicMetadata) -> bool:
        """Whether the gateway growing the topic is known to be dead: its node key is gone (its
        lease expired), or it is this process, which is not growing it (it restarted)."""
        grower = growing.growth_by
        if grower is None:
            return False  # written before growths named their gateway: only the age tells
        if grower == self._node_id:
            return growing.name not in self._growth.running
        return not await self._growth.acks.is_live(grower)


def _stale(topic: TopicMetadata, older_than_s: float) -> bool:
    since = topic.growth_since_ms or 0
    return time.time_ns() // 1_000_000 - since > older_than_s * 1000
