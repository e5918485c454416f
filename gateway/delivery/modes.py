"""How a subscription is served in each mode: broadcast through the shared tails (or a reader per
partition without a delivery hub), shared and exclusive groups through the hub's group readers."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Callable, Coroutine, Iterable, Mapping
from typing import Any

from gateway.delivery.broadcast import follow_partition, resolve_start
from gateway.delivery.expiry import BroadcastCounts
from gateway.delivery.group_config import GroupConfig
from gateway.delivery.hub import DeliveryHub
from gateway.delivery.membership import Membership, first_unless_lost
from gateway.delivery.params import Mode, SubscribeParams
from gateway.delivery.ports import DeliveryPorts
from gateway.delivery.session import Session
from gateway.delivery.tail import BroadcastFollow
from gateway.delivery.wire import assignment_frame, gap_frame
from partitioner.errors import PartitionerError
from partitioner.topics import TopicMetadata
from storage.errors import StorageError
from storage.groups_protocol import GroupStore


def serve(session: Session, ports: DeliveryPorts,
          topic: TopicMetadata) -> Coroutine[Any, Any, None]:
    """The coroutine serving a group session, or a broadcast one where there is no delivery hub."""
    if session.params.mode is Mode.BROADCAST:
        return _run_broadcast(session, ports, topic)
    return _run_group(session, ports, topic)


async def _run_group(session: Session, ports: DeliveryPorts, topic: TopicMetadata) -> None:
    params, hub = session.params, ports.hub
    if hub is None or params.group is None:
        raise PartitionerError("group subscriptions need a group and a delivery hub")
    config = GroupConfig(params.ack_timeout_ms, params.max_deliveries, params.filter,
                         _group_start(params), params.auto_ack,
                         params.mode in (Mode.EXCLUSIVE, Mode.KEY_SHARED), params.retry_backoff,
                         pinned=params.pinned)
    ports.note_group_policy(topic.name, params.group, params.ack_timeout_ms,
                            params.max_deliveries, params.retry_backoff)
    hub.pauses.join(session, params.group)  # told of the group's pauses while a member
    try:
        await _run_mode(session, ports, hub, params.group, config, topic)
    finally:
        hub.pauses.leave(session, params.group)


async def _run_mode(session: Session, ports: DeliveryPorts, hub: DeliveryHub, group: str,
                    config: GroupConfig, topic: TopicMetadata) -> None:
    mode = session.params.mode
    if mode is Mode.SHARED:
        await _run_shared(session, ports, hub, group, config, topic)
    elif mode is Mode.KEY_SHARED:
        await hub.seats.serve(session, ports.membership, group,
                              dataclasses.replace(config, key_ordered=True), topic)
    else:
        await _run_exclusive(session, ports.membership, hub, group, config, topic)


def _group_start(params: SubscribeParams) -> str:
    if params.start == "cursor":
        # A group has one position per partition; a cursor names them, the lowest is used where
        # absent.
        return min(params.cursor.values())
    return params.start


async def start_broadcast(session: Session, ports: DeliveryPorts, hub: DeliveryHub,
                          topic: TopicMetadata,
                          on_error: Callable[[Session, BaseException], None]) -> BroadcastFollow:
    """Pin the start positions, send the assignment, and follow every partition through the shared
    tails."""
    positions = await resolve_start(ports.store, session, topic.partitions)
    session.cursor.update({p: o for p, o in positions.items() if o is not None})
    _send_assignment(session, range(topic.partitions))
    if session.params.start == "cursor":
        await tell_of_gaps(session, hub.store, positions)
    counts = BroadcastCounts.of(ports.metrics, session.topic)
    return BroadcastFollow(hub.tails, ports.store, session, positions, counts, ports.cache,
                           on_growth=lambda count: _send_assignment(session, range(count)),
                           on_error=lambda exc: on_error(session, exc))


async def _run_broadcast(session: Session, ports: DeliveryPorts, topic: TopicMetadata) -> None:
    """Broadcast without a delivery hub (no shared tails): one reader per partition."""
    positions = await resolve_start(ports.store, session, topic.partitions)
    session.cursor.update({p: o for p, o in positions.items() if o is not None})
    _send_assignment(session, range(topic.partitions))
    await asyncio.gather(*(follow_partition(ports.store, session, p, after, ports.metrics)
                           for p, after in positions.items()))


async def tell_of_gaps(session: Session, store: GroupStore,
                       positions: Mapping[int, str | None]) -> None:
    """A ``gap`` frame for each partition whose resume position retention passed (never a silent
    jump)."""
    found = await asyncio.gather(*(store.lost_after(session.topic, p, after)
                                   for p, after in positions.items()
                                   if after is not None and after != "0-0"))
    for lost in found:
        if lost is not None:
            session.send_control(gap_frame(lost))


def _send_assignment(session: Session, partitions: Iterable[int], generation: int = 0) -> None:
    session.send_control(assignment_frame(partitions, generation))


async def _run_shared(session: Session, ports: DeliveryPorts, hub: DeliveryHub, group: str,
                      config: GroupConfig, topic: TopicMetadata) -> None:
    """Serve every partition of the topic, also those added while the subscription lasts (until
    cancelled)."""
    partitions: list[int] = []
    grown = asyncio.Event()
    unwatch = ports.cache.watch_growth(topic.name, lambda _count: grown.set())
    try:
        while True:
            # read after the watch is set: no growth slips between
            current = ports.cache.get(topic.name)
            count = max(topic.partitions, current.partitions if current is not None else 0)
            if count > len(partitions):
                # the assignment goes first: a client never sees a partition's message before it
                # was told the partition is its own
                added = range(len(partitions), count)
                _send_assignment(session, [*partitions, *added])
                for partition in added:
                    await hub.attach(session, partition, group, config)
                    partitions.append(partition)
            await grown.wait()
            grown.clear()
    finally:
        unwatch()
        await _detach_all(hub, session, partitions, group)


async def _run_exclusive(session: Session, membership: Membership | None, hub: DeliveryHub,
                         group: str, config: GroupConfig, topic: TopicMetadata) -> None:
    if membership is None:
        raise PartitionerError("exclusive groups need etcd and a delivery hub")
    serving: set[int] = set()
    async with membership.member(topic, group, session.id) as member:
        lost = asyncio.ensure_future(member.wait_lost())
        try:
            while True:
                assignment = await first_unless_lost(member.next_assignment(), lost, member)
                wanted = set(assignment.partitions)
                for partition in sorted(serving - wanted):
                    await hub.detach(session, partition, group)
                    serving.discard(partition)
                # revoked partitions are detached before the frame, new ones attached after it: a
                # client sees a partition's messages only while its latest assignment names it
                _send_assignment(session, sorted(wanted), assignment.generation)
                for partition in sorted(wanted - serving):
                    await hub.attach(session, partition, group, config)
                    serving.add(partition)
                await member.confirm(assignment.generation)
        finally:
            lost.cancel()
            await _detach_all(hub, session, sorted(serving), group)


async def _detach_all(hub: DeliveryHub, session: Session, partitions: list[int],
                      group: str) -> None:
    for partition in partitions:
        with contextlib.suppress(StorageError):
            await hub.detach(session, partition, group)
