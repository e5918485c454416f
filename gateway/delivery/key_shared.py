"""key_shared groups: each gateway holds one seat in the group's etcd membership, gets partitions as
an exclusive member does, and shares them among its local sessions by key (``key_order``).

One reader per partition in the whole group keeps a key on one session at a time; more sessions
than partitions all get keys, as long as they are on gateways that hold partitions. A partition
moving away keeps what its members hold theirs until they settle it or its ack timeout passes.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Callable, Iterable
from typing import Protocol

from gateway.delivery.group_config import GroupConfig
from gateway.delivery.membership import Membership, first_unless_lost
from gateway.delivery.session import Session
from gateway.delivery.wire import assignment_frame
from partitioner.errors import PartitionerError
from partitioner.tasks import cancel_until_done
from partitioner.topics import TopicMetadata
from storage.errors import StorageError

SeatKey = tuple[str, str]  # (topic, group)
SEAT_PREFIX = "seat-"  # a seat's member id in the group's membership


class Reader(Protocol):
    """What a seat needs of a partition's reader: to stop it reading and handing out (its sessions
    stay attached, so what they hold can still be settled)."""

    async def aclose(self) -> None: ...


class Readers(Protocol):
    """What a seat needs of the delivery hub: a session attached to a partition's reader, and
    detached."""

    async def attach(self, session: Session, partition: int, group: str,
                     config: GroupConfig) -> Reader: ...

    async def detach(self, session: Session, partition: int, group: str) -> None: ...


def is_seat(member_id: str) -> bool:
    """Whether a group member is a gateway's key_shared seat (not an exclusive session)."""
    return member_id.startswith(SEAT_PREFIX)


class Seat:
    """This gateway's member of one key_shared group and the local sessions sharing its
    partitions."""

    def __init__(self, membership: Membership | None, hub: Readers, topic: TopicMetadata,
                 group: str) -> None:
        self._membership, self._hub, self._topic, self._group = membership, hub, topic, group
        self._sessions: dict[Session, GroupConfig] = {}
        self._serving: list[int] = []
        self._readers: dict[int, Reader] = {}  # of the partitions served
        # revoked partitions whose sessions still hold deliveries: detached once those are settled
        self._draining: dict[int, asyncio.Task[None]] = {}
        self._generation: int | None = None  # None until the first assignment
        self._lock = asyncio.Lock()
        self.lost: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        # retrieved here too: a seat may be lost with no session left to hear of it
        self.lost.add_done_callback(lambda lost: lost.cancelled() or lost.exception())
        self._task = asyncio.create_task(self._run(), name=f"seat-{topic.name}/{group}")

    @property
    def empty(self) -> bool:
        """No local session is left."""
        return not self._sessions

    async def join(self, session: Session, config: GroupConfig) -> None:
        """Share the seat's partitions with ``session`` from now on."""
        async with self._lock:
            self._sessions[session] = config
            if self._generation is None:
                return
            session.send_control(assignment_frame(self._serving, self._generation))
            try:
                for partition in self._serving:
                    if partition not in self._draining:  # attached once the drain is over
                        await self._attach(session, partition, config)
            except BaseException:
                await self._detach(session)
                raise

    async def leave(self, session: Session) -> None:
        """Stop sharing with ``session``."""
        async with self._lock:
            await self._detach(session)

    async def aclose(self) -> None:
        """Leave the group (its partitions go to other gateways' seats)."""
        await cancel_until_done([self._task])
        await cancel_until_done(list(self._draining.values()))

    async def _attach(self, session: Session, partition: int, config: GroupConfig) -> None:
        self._readers[partition] = await self._hub.attach(session, partition, self._group, config)

    async def _detach(self, session: Session) -> None:
        """A session gone: what it held goes back to the group at once (drained partitions'
        too: its member is gone)."""
        if self._sessions.pop(session, None) is None:
            return
        for partition in sorted({*self._serving, *self._draining}):
            with contextlib.suppress(StorageError):
                await self._hub.detach(session, partition, self._group)

    async def _run(self) -> None:
        membership = self._membership
        if membership is None:
            self.lost.set_exception(PartitionerError("key_shared groups need etcd"))
            return
        member_id = f"{SEAT_PREFIX}{membership.node_id}-{uuid.uuid4().hex[:8]}"
        try:
            async with membership.member(self._topic, self._group, member_id) as member:
                lost = asyncio.ensure_future(member.wait_lost())
                try:
                    while True:
                        assignment = await first_unless_lost(member.next_assignment(), lost,
                                                             member)
                        await self._apply(sorted(assignment.partitions), assignment.generation)
                        await member.confirm(assignment.generation)
                finally:
                    lost.cancel()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if not self.lost.done():
                self.lost.set_exception(exc)
        finally:
            async with self._lock:
                for session in list(self._sessions):
                    await self._detach(session)

    async def _apply(self, wanted: list[int], generation: int) -> None:
        """Revoked partitions stopped before the frame, new ones attached after it (as an
        exclusive member does)."""
        async with self._lock:
            for partition in sorted(set(self._serving) - set(wanted)):
                await self._retire(partition)
            added = sorted(set(wanted) - set(self._serving))
            self._serving, self._generation = wanted, generation
            for session, config in list(self._sessions.items()):
                session.send_control(assignment_frame(wanted, generation))
                for partition in added:
                    if partition not in self._draining:  # attached once the drain is over
                        await self._attach(session, partition, config)

    async def _retire(self, partition: int) -> None:
        """A revoked partition's reader reads and hands out nothing more. What its sessions hold
        stays theirs (an ack still counts; the partition's next reader waits for those keys,
        ``key_fence``) until settled or past its ack timeout; then they detach (``_drain``)."""
        reader = self._readers.pop(partition, None)
        if reader is not None:
            await reader.aclose()
        if partition in self._draining:
            return
        if any(_holding(session, partition) for session in self._sessions):
            self._draining[partition] = asyncio.create_task(
                self._drain(partition), name=f"drain-{self._topic.name}/{self._group}/{partition}")
            return
        for session in self._sessions:
            with contextlib.suppress(StorageError):
                await self._hub.detach(session, partition, self._group)

    async def _drain(self, partition: int) -> None:
        """Wait until the sessions hold nothing of a revoked partition within its ack timeout,
        detach them, and attach them again if the partition came back meanwhile."""
        await until_settled(lambda: list(self._sessions), partition)
        async with self._lock:
            del self._draining[partition]
            for session in self._sessions:
                # past their ack timeout: not released, the next reader may have them already
                for ref in [ref for ref in session.in_flight if ref[0] == partition]:
                    session.forget(ref)
                with contextlib.suppress(StorageError):
                    await self._hub.detach(session, partition, self._group)
            if partition in self._serving:
                for session, config in list(self._sessions.items()):
                    await self._attach(session, partition, config)


def _holding(session: Session, partition: int) -> bool:
    return any(ref[0] == partition for ref in session.in_flight)


async def until_settled(sessions: Callable[[], Iterable[Session]], partition: int) -> None:
    """Until no session holds a delivery of ``partition`` within its ack deadline (woken by any
    credit a session gets back: a settle, a session gone)."""
    wake = asyncio.Event()
    watched: set[Session] = set()
    try:
        while True:
            now, deadlines = time.monotonic(), []
            for session in sessions():
                if session not in watched:
                    session.watch_credit(wake)
                    watched.add(session)
                deadlines += [deadline for ref, deadline in session.in_flight.items()
                              if ref[0] == partition and deadline > now]
            if not deadlines:
                return
            wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wake.wait(), min(deadlines) - now)
    finally:
        for session in watched:
            session.unwatch_credit(wake)


class Seats:
    """The gateway's seats, one per key_shared (topic, group) with local sessions."""

    def __init__(self, hub: Readers) -> None:
        self._hub = hub
        self._seats: dict[SeatKey, Seat] = {}
        self._lock = asyncio.Lock()

    async def serve(self, session: Session, membership: Membership | None, group: str,
                    config: GroupConfig, topic: TopicMetadata) -> None:
        """Serve ``session`` from its gateway's seat until it is cancelled or the seat is lost."""
        key = (topic.name, group)
        async with self._lock:
            seat = self._seats.get(key)
            if seat is None:
                seat = self._seats[key] = Seat(membership, self._hub, topic, group)
        try:
            await seat.join(session, config)
            await asyncio.shield(seat.lost)
        finally:
            await seat.leave(session)
            async with self._lock:
                if seat.empty and self._seats.get(key) is seat:
                    del self._seats[key]
                    await seat.aclose()

    async def aclose(self) -> None:
        """Leave every group."""
        seats, self._seats = list(self._seats.values()), {}
        for seat in seats:
            await seat.aclose()

