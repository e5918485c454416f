"""Membership of an exclusive consumer group in etcd: each partition is served by at most one live
member; one member also coordinates (``partitioner.group_coordinator``)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from types import TracebackType

import orjson

from partitioner.backoff import Backoff
from partitioner.errors import CoordinationUnavailable, MembershipLost
from partitioner.etcd.connection import EtcdConnection
from partitioner.etcd.values import DEFAULT_PREFIX, WatchEvent
from partitioner.group_coordinator import GroupCoordinator
from partitioner.group_state import (
    GroupKeys,
    GroupState,
    MemberInfo,
    parse_assignment,
    read_state,
    validate_name,
)
from partitioner.tasks import cancel_until_done

__all__ = ["GroupMember", "MemberAssignment"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class MemberAssignment:
    """The partitions this member may serve as of ``generation``."""

    generation: int
    partitions: frozenset[int]


class GroupMember:
    """One member's participation in an exclusive group. An async context manager; ``aclose`` is
    idempotent.

    Use: ``a = await member.next_assignment()``, stop serving what is not in ``a.partitions``, start
    serving what is, then ``await member.confirm(a.generation)``; stop everything when ``lost``
    turns True. The member holds a lease, announces itself under ``members/``, follows the group's
    keys with one watch (layout: ``partitioner.group_state``) and campaigns for the coordinator key.
    Member ids must be unique per incarnation (e.g. include a random suffix).
    """

    def __init__(self, conn: EtcdConnection, *, topic: str, group: str, member_id: str, node: str,
                 partition_count: Callable[[], int], prefix: str = DEFAULT_PREFIX,
                 lease_ttl_s: float = 10.0, initial_assignment_delay_s: float = 0.0) -> None:
        validate_name(member_id, "member_id")
        self._conn = conn
        self._keys = GroupKeys(prefix, topic, group)
        self.topic, self.group, self.member_id, self.node = topic, group, member_id, node
        self._ttl_s = lease_ttl_s
        self._lease_id = 0
        self._last_keepalive = 0.0  # loop clock when the last successful keepalive was *sent*
        self._keepalive_suspended = False
        self._tasks: list[asyncio.Task[None]] = []
        self._closed = False
        self._lost = asyncio.Event()
        self._news = asyncio.Event()  # a new assignment arrived or the member was lost
        self._latest: MemberAssignment | None = None
        self._returned: MemberAssignment | None = None
        # returned by next_assignment, not confirmed yet
        self._unconfirmed: list[MemberAssignment] = []
        # partitions of the last caller-confirmed one
        self._confirmed_base: frozenset[int] = frozenset()
        self._confirm_wanted = 0
        self._confirm_written = 0
        self._confirm_kick = asyncio.Event()
        self._coordinator = GroupCoordinator(
            conn, self._keys, member_id=member_id, lost=self._lost,
            partition_count=partition_count, lease_ttl_s=lease_ttl_s,
            initial_assignment_delay_s=initial_assignment_delay_s)

    # -- lifetime ----------------------------------------------------------------------------------

    async def __aenter__(self) -> GroupMember:
        loop = asyncio.get_running_loop()
        sent = loop.time()
        self._lease_id, _ = await self._conn.grant_lease(self._ttl_s)
        self._last_keepalive = sent
        info = MemberInfo(self.member_id, self.node, time.time_ns() // 1_000_000)
        try:
            await self._conn.put(self._keys.member(self.member_id), info.to_json(),
                                 lease_id=self._lease_id)
        except CoordinationUnavailable:
            await self._revoke()
            raise
        for name, duty in (("keepalive", self._keep_alive), ("watch", self._follow_group),
                           ("confirm", self._write_confirmations), ("coordinator", self._campaign)):
            self._tasks.append(asyncio.create_task(
                self._supervise(name, duty), name=f"streamgate-group-{name}-{self.member_id}"))
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Leave the group: stop the background tasks and revoke the lease (every key of ours
        vanishes)."""
        if self._closed:
            return
        self._closed = True
        self._set_lost()
        await self._cancel_tasks(self._tasks)
        await self._revoke()

    async def _revoke(self) -> None:
        if not self._lease_id:
            return
        try:
            await self._conn.revoke_lease(self._lease_id)
        except CoordinationUnavailable as exc:
            log.warning("could not revoke lease of member %s (retried until etcd answers): %s",
                        self.member_id, exc)
            self._conn.revoke_when_reachable(self._lease_id)

    @staticmethod
    async def _cancel_tasks(tasks: list[asyncio.Task[None]]) -> None:
        """Cancel and await every task but the caller. Cancellation is repeated because a cancel
        that lands inside a gRPC call can surface as an RPC error, which a retry loop would
        otherwise survive."""
        await cancel_until_done(tasks)

    async def _supervise(self, name: str, duty: Callable[[], Awaitable[None]]) -> None:
        """Run a duty; an unexpected crash marks the member lost instead of dying silently."""
        try:
            await duty()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("group member %s: background %s crashed; membership is lost",
                          self.member_id, name)
            await self._lose(revoke=True)

    # -- liveness ----------------------------------------------------------------------------------

    @property
    def lost(self) -> bool:
        """True once the member must stop serving everything (lease not kept alive for a TTL, or
        closed)."""
        return self._lost.is_set()

    @property
    def is_coordinator(self) -> bool:
        """True while this member holds the coordinator key."""
        return self._coordinator.holds_key

    async def wait_lost(self) -> None:
        """Return once ``lost`` is True."""
        await self._lost.wait()

    def simulate_keepalive_failure(self) -> None:
        """Test hook: stop refreshing the lease as if etcd were unreachable (``lost`` follows after
        a TTL)."""
        self._keepalive_suspended = True

    def _set_lost(self) -> None:
        self._lost.set()
        self._news.set()

    async def _lose(self, *, revoke: bool) -> None:
        """Stop everything; ``revoke`` hands our partitions over at once instead of after lease
        expiry."""
        if self._lost.is_set():
            return
        log.warning("group member %s of %s/%s lost its membership", self.member_id, self.topic,
                    self.group)
        self._set_lost()
        self._coordinator.step_down()
        await self._cancel_tasks(self._tasks)
        if revoke:
            await self._revoke()

    async def _keep_alive(self) -> None:
        """Refresh the lease every TTL/3; lost when no refresh succeeded for a TTL on our own
        clock."""
        loop = asyncio.get_running_loop()
        backoff = Backoff()
        while not self._lost.is_set():
            deadline = self._last_keepalive + self._ttl_s
            if loop.time() >= deadline:
                log.warning("member %s: no successful keepalive for %.1fs", self.member_id,
                            self._ttl_s)
                # etcd is unreachable or our lease is gone: nothing to revoke
                await self._lose(revoke=False)
                return
            if self._keepalive_suspended:
                await asyncio.sleep(min(self._ttl_s / 3, deadline - loop.time()))
                continue
            sent = loop.time()
            try:
                remaining_s = await asyncio.wait_for(self._conn.keep_alive(self._lease_id),
                                                     deadline - sent)
            except (TimeoutError, CoordinationUnavailable) as exc:
                log.warning("member %s: keepalive failed: %s", self.member_id, exc)
                await backoff.sleep(at_most_s=deadline - loop.time())
                continue
            if remaining_s <= 0:
                log.warning("member %s: etcd no longer knows our lease", self.member_id)
                await self._lose(revoke=False)
                return
            self._last_keepalive = sent
            backoff.reset()
            await asyncio.sleep(self._ttl_s / 3)

    # -- the member's side of assignments ----------------------------------------------------------

    async def next_assignment(self) -> MemberAssignment:
        """Wait for an assignment whose partition set differs from the last one returned (the first
        call returns the first one seen, even empty). Raises ``MembershipLost`` once the member is
        lost."""
        while True:
            if self._lost.is_set():
                raise MembershipLost(self.topic, self.group, self.member_id)
            latest, returned = self._latest, self._returned
            if latest is not None and (returned is None or (
                    latest.generation > returned.generation
                    and latest.partitions != returned.partitions)):
                self._returned = latest
                self._unconfirmed.append(latest)
                return latest
            self._news.clear()
            await self._news.wait()

    async def confirm(self, generation: int) -> None:
        """Declare that only the partitions of ``generation`` (returned by ``next_assignment``) are
        served.

        The confirmation is written in the background (retried while etcd is away); this does not
        block.
        """
        index = next((i for i, a in enumerate(self._unconfirmed) if a.generation == generation),
                     None)
        if index is None:
            if generation <= self._confirm_wanted:
                return
            raise ValueError(f"generation {generation} was not returned by next_assignment")
        self._confirmed_base = self._unconfirmed[index].partitions
        self._unconfirmed = self._unconfirmed[index + 1:]
        self._want_confirmed(generation)
        self._confirm_latest_if_covered()

    @property
    def confirmed_generation(self) -> int:
        """The newest generation whose confirmation is stored in etcd."""
        return self._confirm_written

    def _possibly_serving(self) -> frozenset[int]:
        return self._confirmed_base.union(*(a.partitions for a in self._unconfirmed))

    def _confirm_latest_if_covered(self) -> None:
        """Confirm the newest generation at once when it covers everything we may still serve."""
        latest = self._latest
        if latest is not None and self._possibly_serving() <= latest.partitions:
            self._want_confirmed(latest.generation)

    def _want_confirmed(self, generation: int) -> None:
        if generation > self._confirm_wanted:
            self._confirm_wanted = generation
            self._confirm_kick.set()

    async def _write_confirmations(self) -> None:
        backoff = Backoff()
        key = self._keys.confirmed(self.member_id)
        while not self._lost.is_set():
            await self._confirm_kick.wait()
            self._confirm_kick.clear()
            while self._confirm_written < self._confirm_wanted and not self._lost.is_set():
                generation = self._confirm_wanted
                try:
                    await self._conn.put(key, orjson.dumps({"generation": generation}),
                                         lease_id=self._lease_id)
                except CoordinationUnavailable as exc:
                    log.warning("member %s: writing confirmation %d failed: %s", self.member_id,
                                generation, exc)
                    await backoff.sleep()
                    continue
                self._confirm_written = max(self._confirm_written, generation)
                backoff.reset()

    def _apply_assignment(self, generation: int, owners: Mapping[str, tuple[int, ...]]) -> None:
        if self._latest is not None and generation <= self._latest.generation:
            return
        self._latest = MemberAssignment(generation, frozenset(owners.get(self.member_id, ())))
        self._confirm_latest_if_covered()
        self._news.set()

    # -- following the group's keys ----------------------------------------------------------------

    async def _follow_group(self) -> None:
        """Snapshot the group, then watch it from the snapshot's revision + 1; start over when the
        watch dies."""
        backoff = Backoff()
        while not self._lost.is_set():
            try:
                state = await read_state(self._conn, self._keys)
                self._apply_state(state)
                watch = await self._conn.watch_prefix(self._keys.root, state.revision + 1)
            except CoordinationUnavailable as exc:
                log.warning("member %s: group watch unavailable: %s", self.member_id, exc)
                await backoff.sleep()
                continue
            backoff.reset()
            try:
                async for event in watch.events():
                    self._apply_event(event)
            except CoordinationUnavailable as exc:
                log.warning("member %s: group watch lost: %s", self.member_id, exc)
            finally:
                await watch.cancel()
            await backoff.sleep()

    def _apply_state(self, state: GroupState) -> None:
        if state.generation:
            self._apply_assignment(state.generation, state.owners)
        self._coordinator.group_changed(vacant=state.coordinator is None)

    def _apply_event(self, event: WatchEvent) -> None:
        if event.key == self._keys.assignment and event.kind == "put":
            try:
                self._apply_assignment(*parse_assignment(event.value))
            except (ValueError, KeyError, TypeError):
                log.warning("ignoring unreadable assignment at %r", event.key)
        self._coordinator.group_changed(
            vacant=event.key == self._keys.coordinator and event.kind == "delete")

    # -- coordination ------------------------------------------------------------------------------

    async def _campaign(self) -> None:
        """Campaign for the coordinator key with our lease; coordinate while we hold it."""
        await self._coordinator.campaign(self._lease_id)
