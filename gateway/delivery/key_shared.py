"""key_shared groups: each gateway holds one seat in the group's etcd membership, gets partitions as
an exclusive member does, and shares them among its local sessions by key (``key_order``).

One reader per partition in the whole group keeps a key on one session at a time; more sessions
than partitions all get keys, as long as they are on gateways that hold partitions.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
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


class Readers(Protocol):
    """What a seat needs of the delivery hub: a session attached to a partition's reader, and
    detached."""

    async def attach(self, session: Session, partition: int, group: str,
                     config: GroupConfig) -> object: ...

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
                    await self._hub.attach(session, partition, self._group, config)
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

    async def _detach(self, session: Session) -> None:
        if self._sessions.pop(session, None) is None:
            return
        for partition in self._serving:
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
        """Revoked partitions detached before the frame, new ones attached after it (as an
        exclusive member does)."""
        async with self._lock:
            for partition in sorted(set(self._serving) - set(wanted)):
                for session in self._sessions:
                    with contextlib.suppress(StorageError):
                        await self._hub.detach(session, partition, self._group)
            added = sorted(set(wanted) - set(self._serving))
            self._serving, self._generation = wanted, generation
            for session, config in list(self._sessions.items()):
                session.send_control(assignment_frame(wanted, generation))
                for partition in added:
                    await self._hub.attach(session, partition, self._group, config)


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

