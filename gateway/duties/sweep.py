"""The owner's sweep of a partition's groups: acting for groups whose members may all be gone.

For each group on the partition that has a stored policy (``partitioner.group_policy``):

1. **Dead-lettering.** Pending entries idle past the group's ack timeout that have already been
   delivered ``max_deliveries`` times are claimed, appended to ``<topic>.dlq`` and acked: what a
   live reader does on its next reclaim, done without waiting for a member to come back. XCLAIM's
   min-idle lets only one of a live reader and the sweep win an entry; the DLQ append is idempotent.
2. **Releasing a dead node's deliveries.** A consumer named after a gateway node that is no longer
   registered (its lease expired) holds deliveries nobody will ack. Its pending entries move to the
   sweep's consumer with a ten-year idle and no delivery counted (XCLAIM ... IDLE JUSTID), so the
   group's next reader redelivers them at once instead of after the ack timeout; then the empty
   consumer is removed (only if it holds nothing, atomically). A consumer idle for less than
   ``dead_consumer_idle_ms`` is never touched, which covers a node that registered a moment ago and
   is not in this node's view yet; nor is one of ``service_consumers``.

Groups without a stored policy (made by hand, or by the Spark pipeline) are left alone.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from gateway.delivery.retry_policy import RELEASE_IDLE_MS, DeadLetterSink
from gateway.observe.metrics import GatewayMetrics
from partitioner.group_policy import GroupPolicy
from storage.groups_protocol import GroupStore
from storage.models import ConsumerInfo

log = logging.getLogger(__name__)

SWEEP_CONSUMER = "sg-sweep"
PAGE = 200
MAX_PAGES = 10


class ConsumerStore(Protocol):
    """The consumers inside a group on one partition."""

    async def consumers(self, topic: str, partition: int, group: str) -> list[ConsumerInfo]:
        """Every consumer of the group on the partition."""
        ...

    async def remove_if_empty(self, topic: str, partition: int, group: str, consumer: str) -> bool:
        """Delete the consumer if it holds no pending entry."""
        ...


class PolicySource(Protocol):
    """Where group policies are read."""

    async def for_topic(self, topic: str) -> Mapping[str, GroupPolicy]:
        """Every group's policy on ``topic``."""
        ...


@dataclass(frozen=True, slots=True)
class SweepSettings:
    """Who the sweep may treat as gone."""

    node_id: str
    dead_consumer_idle_ms: int
    service_consumers: frozenset[str] = frozenset()
    # whether a group is paused on a topic: a pause holds its deliveries, dead letters included
    paused: Callable[[str, str], bool] = lambda topic, group: False


class GroupSweep:
    """Sweeps the groups of one partition at a time."""

    def __init__(self, groups: GroupStore, consumers: ConsumerStore, policies: PolicySource,
                 dead_letters: DeadLetterSink, metrics: GatewayMetrics,
                 settings: SweepSettings) -> None:
        self._groups, self._consumers, self._policies = groups, consumers, policies
        self._dead_letters = dead_letters
        self._metrics = metrics
        self._settings = settings

    async def sweep(self, topic: str, partition: int, live_nodes: Collection[str]) -> None:
        """One pass over every group with a policy on (topic, partition)."""
        policies = await self._policies.for_topic(topic)
        if not policies:
            return
        for group in await self._groups.groups(topic, partition):
            policy = policies.get(group)
            if policy is None:
                continue
            if not self._settings.paused(topic, group):
                await self._dead_letter_exhausted(topic, partition, group, policy)
            # else this node's view of the live set is not to be trusted
            if self._settings.node_id in live_nodes:
                await self._release_dead_consumers(topic, partition, group, live_nodes)

    async def _dead_letter_exhausted(self, topic: str, partition: int, group: str,
                                     policy: GroupPolicy) -> None:
        after: str | None = None
        for _ in range(MAX_PAGES):
            page = await self._groups.expired(topic, partition, group,
                                              min_idle_ms=policy.ack_timeout_ms, count=PAGE,
                                              after=after)
            exhausted = [p for p in page if p.delivery_count >= policy.max_deliveries]
            if exhausted:
                claimed = await self._groups.claim(topic, partition, group, SWEEP_CONSUMER,
                                                   exhausted, min_idle_ms=policy.ack_timeout_ms)
                for delivery in claimed:
                    await self._dead_letters(topic, group, delivery, "max_deliveries exceeded")
                await self._groups.ack(topic, partition, group, [d.entry.offset for d in claimed])
            if len(page) < PAGE:
                return
            after = page[-1].offset

    async def _release_dead_consumers(self, topic: str, partition: int, group: str,
                                      live_nodes: Collection[str]) -> None:
        for consumer in await self._consumers.consumers(topic, partition, group):
            if self._is_dead(consumer, live_nodes):
                released = await self._release(topic, partition, group, consumer.name)
                if released:
                    self._metrics.group_orphans_released.labels(topic, group).inc(released)
                    log.info("released %d un-acked entries of dead consumer %s in %s/%s group %s",
                             released, consumer.name, topic, partition, group)
                if await self._consumers.remove_if_empty(topic, partition, group, consumer.name):
                    self._metrics.group_consumers_removed.labels(topic, group).inc()

    def _is_dead(self, consumer: ConsumerInfo, live_nodes: Collection[str]) -> bool:
        return (consumer.name not in live_nodes and consumer.name != SWEEP_CONSUMER
                and consumer.name not in self._settings.service_consumers
                and consumer.idle_ms >= self._settings.dead_consumer_idle_ms)

    async def _release(self, topic: str, partition: int, group: str, consumer: str) -> int:
        released = 0
        for _ in range(MAX_PAGES):
            held = await self._groups.expired(topic, partition, group, min_idle_ms=0, count=PAGE,
                                              consumer=consumer)
            offsets: Sequence[str] = [p.offset for p in held]
            if not offsets:
                break
            await self._groups.set_idle(topic, partition, group, SWEEP_CONSUMER, offsets,
                                        RELEASE_IDLE_MS)
            released += len(offsets)
        return released


__all__ = ["SWEEP_CONSUMER", "GroupSweep", "SweepSettings"]
