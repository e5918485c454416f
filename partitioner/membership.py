"""Membership of an exclusive consumer group in etcd: each partition is served by at most one live
member.

A ``GroupMember`` holds a lease, announces itself under ``members/``, follows the group's keys with
one watch, and campaigns for the ``coordinator`` key. The coordinator turns membership into
assignments with a two-phase cooperative rebalance (layout and JSON shapes:
``partitioner.group_state``).

The safety rule: a member confirms generation ``g`` only while everything it may still serve is
inside its share of ``g``. The coordinator writes a generation that hands any partition to a new
owner only after every live member has confirmed the latest generation (a member whose key vanished
counts as confirmed: it stopped on its own clock before its lease expired). So a rebalance first
writes "current owners minus the moving partitions", waits for those confirmations, then writes the
target. A member whose set only grows, or who never served anything, confirms by itself at once, so
only members that give something up are waited for.

Liveness: a member stuck without confirming a revocation stalls the rebalance until its lease
expires. Member ids must be unique per incarnation (e.g. include a random suffix).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from types import TracebackType

import orjson

from partitioner.assignment import assign
from partitioner.backoff import MAX_BACKOFF_S, Backoff
from partitioner.errors import CoordinationUnavailable, MembershipLost
from partitioner.etcd import DEFAULT_PREFIX, EtcdConnection, Guard, WatchEvent
from partitioner.group_state import (
    GroupKeys,
    GroupState,
    MemberInfo,
    Released,
    assignment_json,
    parse_assignment,
    read_state,
    validate_name,
)
from partitioner.tasks import cancel_until_done

__all__ = ["AssignmentStep", "GroupMember", "MemberAssignment", "plan_step"]

log = logging.getLogger(__name__)

COORDINATOR_POLL_S = 1.0  # the coordinator re-reads partition_count() at least this often


@dataclass(frozen=True, slots=True)
class AssignmentStep:
    """What the coordinator writes next: the owners, and the partitions released but not handed on
    yet."""

    owners: dict[str, tuple[int, ...]]
    released: Released


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
    turns True.
    """

    def __init__(self, conn: EtcdConnection, *, topic: str, group: str, member_id: str, node: str,
                 partition_count: Callable[[], int], prefix: str = DEFAULT_PREFIX,
                 lease_ttl_s: float = 10.0, initial_assignment_delay_s: float = 0.0) -> None:
        validate_name(member_id, "member_id")
        self._conn = conn
        self._keys = GroupKeys(prefix, topic, group)
        self.topic, self.group, self.member_id, self.node = topic, group, member_id, node
        self._partition_count = partition_count
        self._ttl_s = lease_ttl_s
        self._lease_id = 0
        self._last_keepalive = 0.0  # loop clock when the last successful keepalive was *sent*
        self._keepalive_suspended = False
        self._tasks: list[asyncio.Task[None]] = []
        self._closed = False
        self._lost = asyncio.Event()
        self._news = asyncio.Event()  # a new assignment arrived or the member was lost
        self._group_changed = asyncio.Event()  # anything under the group's keys changed
        self._coordinator_vacant = asyncio.Event()
        self._coordinator_revision = 0  # create_revision of the coordinator key while we hold it
        self._latest: MemberAssignment | None = None
        self._returned: MemberAssignment | None = None
        # returned by next_assignment, not confirmed yet
        self._unconfirmed: list[MemberAssignment] = []
        # partitions of the last caller-confirmed one
        self._confirmed_base: frozenset[int] = frozenset()
        self._confirm_wanted = 0
        self._confirm_written = 0
        self._confirm_kick = asyncio.Event()
        # an empty group's first assignment waits this long for the members joining with the first
        self._initial_delay_s = initial_assignment_delay_s
        self._forming_since: float | None = None  # loop clock when coordination saw it empty
        self._look_again_s = COORDINATOR_POLL_S

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
        return self._coordinator_revision != 0

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
        self._coordinator_revision = 0
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
                await asyncio.sleep(max(0.0, min(backoff.delay_s, deadline - loop.time())))
                backoff.delay_s = min(backoff.delay_s * 2, MAX_BACKOFF_S)
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
        if state.coordinator is None:
            self._coordinator_vacant.set()
        self._group_changed.set()

    def _apply_event(self, event: WatchEvent) -> None:
        if event.key == self._keys.assignment and event.kind == "put":
            try:
                self._apply_assignment(*parse_assignment(event.value))
            except (ValueError, KeyError, TypeError):
                log.warning("ignoring unreadable assignment at %r", event.key)
        elif event.key == self._keys.coordinator and event.kind == "delete":
            self._coordinator_vacant.set()
        self._group_changed.set()

    # -- coordination ------------------------------------------------------------------------------

    async def _campaign(self) -> None:
        """Try to become coordinator whenever the coordinator key is vacant; coordinate while we
        hold it."""
        backoff = Backoff()
        value = orjson.dumps({"member_id": self.member_id, "lease_id": self._lease_id})
        while not self._lost.is_set():
            self._coordinator_vacant.clear()
            try:
                revision = await self._claim_coordinator(value)
            except CoordinationUnavailable as exc:
                log.warning("member %s: coordinator campaign failed: %s", self.member_id, exc)
                await backoff.sleep()
                continue
            backoff.reset()
            if revision:
                await self._coordinate(revision)
                continue
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._coordinator_vacant.wait(),
                                       max(COORDINATOR_POLL_S, self._ttl_s / 2))

    async def _claim_coordinator(self, value: bytes) -> int:
        """The coordinator key's create_revision if it is (now) ours, else 0."""
        revision = await self._conn.put_if_absent(self._keys.coordinator, value,
                                                  lease_id=self._lease_id)
        if revision is not None:
            return revision
        # A campaign whose reply was lost may have won: the key then carries our lease.
        existing = await self._conn.get(self._keys.coordinator)
        if existing is not None and orjson.loads(existing.value).get("lease_id") == self._lease_id:
            return existing.create_revision
        return 0

    async def _coordinate(self, revision: int) -> None:
        """Rebalance on every group change (and every second) until the coordinator key is no longer
        ours."""
        log.info("member %s coordinates group %s/%s", self.member_id, self.topic, self.group)
        self._coordinator_revision = revision
        backoff = Backoff()
        try:
            while not self._lost.is_set():
                self._group_changed.clear()
                try:
                    state = await read_state(self._conn, self._keys)
                    if state.coordinator_create_revision != revision:
                        log.info("member %s is no longer coordinator", self.member_id)
                        return
                    await self._rebalance_step(state, revision)
                except CoordinationUnavailable as exc:
                    log.warning("coordinator %s: %s", self.member_id, exc)
                    await backoff.sleep()
                    continue
                backoff.reset()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._group_changed.wait(), self._look_again_s)
        finally:
            self._coordinator_revision = 0

    async def _rebalance_step(self, state: GroupState, revision: int) -> None:
        """Write at most one generation towards the target; the resulting watch event brings the
        next step."""
        partitions = self._read_partition_count()
        if partitions is None:
            return
        self._look_again_s = COORDINATOR_POLL_S
        if (forming_left_s := self._forming_left_s(state)) > 0:
            self._look_again_s = min(COORDINATOR_POLL_S, forming_left_s)
            return
        step = plan_step(state, partitions)
        if step is None:
            return
        guards = [Guard(self._keys.coordinator, revision, "create"),
                  Guard(self._keys.assignment, state.assignment_mod_revision, "mod")]
        generation = state.generation + 1
        written = await self._conn.put_if(self._keys.assignment,
                                          assignment_json(generation, step.owners, step.released),
                                          guards=guards)
        if written is not None:
            log.info("group %s/%s generation %d: %s", self.topic, self.group, generation,
                     step.owners)

    def _forming_left_s(self, state: GroupState) -> float:
        """How much longer an empty group waits for members joining together (0: assign now).

        Assigning to the first member and then moving partitions to each one that joins a moment
        later would redeliver what the first was handed meanwhile (Kafka's
        ``group.initial.rebalance.delay.ms``). Timed on this coordinator's own clock, from when it
        first saw the group with members and nothing owned.
        """
        if any(state.owners.get(member) for member in state.members):
            self._forming_since = None
            return 0.0
        now = asyncio.get_running_loop().time()
        if self._forming_since is None:
            self._forming_since = now
        return max(0.0, self._forming_since + self._initial_delay_s - now)

    def _read_partition_count(self) -> int | None:
        try:
            return max(0, int(self._partition_count()))
        except Exception:
            log.exception("coordinator %s: partition_count() failed; rebalance postponed",
                          self.member_id)
            return None


def plan_step(state: GroupState, partitions: int) -> AssignmentStep | None:
    """The next assignment the coordinator should write, or None when there is nothing to write yet.

    Phase 1 (some live member gives partitions up): current owners minus the moving partitions, each
    moving partition recorded as released by its member in the new generation. Phase 2: the target's
    new grants of every partition that is free to move: not released, released by a member that is
    gone, or by one that has confirmed a generation at least as new as the release. So a member that
    stops confirming (its gateway died) holds back only what it gave up, never a partition a healthy
    member released. An assignment that records no releases (an earlier version wrote it) grants
    only once every live member has confirmed it.
    """
    live = sorted(state.members)
    current = {m: tuple(p for p in state.owners.get(m, ()) if p < partitions) for m in live}
    target = assign(live, partitions, current)
    if target == state.owners:
        return None
    kept = {m: tuple(p for p in current[m] if p in set(target[m])) for m in live}
    released = {p: r for p, r in (state.released or {}).items()
                if p < partitions and r[0] in state.members}
    if kept != current:
        for member in live:
            released.update((p, (member, state.generation + 1)) for p in current[member]
                            if p not in kept[member])
        return AssignmentStep(kept, released)
    if state.released is None:
        confirmed = all(state.confirmed.get(m, 0) >= state.generation for m in live)
        return AssignmentStep(target, {}) if confirmed or state.generation == 0 else None
    step = {m: tuple(sorted({*current[m],
                             *(p for p in target[m] if _free_to_move(state, released, p, m))}))
            for m in live}
    if step == current:
        return None
    granted = {p for parts in step.values() for p in parts}
    return AssignmentStep(step, {p: r for p, r in released.items() if p not in granted})


def _free_to_move(state: GroupState, released: Released, partition: int, to: str) -> bool:
    """Whether ``partition`` may be granted to ``to`` now (see ``plan_step``)."""
    release = released.get(partition)
    if release is None:
        return True
    member, generation = release
    return member == to or state.confirmed.get(member, 0) >= generation
