"""The coordinator of an exclusive consumer group: one member, elected through a leased etcd key,
turns membership into assignments with a two-phase cooperative rebalance (``plan_step``)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass

import orjson

from partitioner.assignment import assign
from partitioner.backoff import Backoff
from partitioner.errors import CoordinationUnavailable
from partitioner.etcd.connection import EtcdConnection
from partitioner.etcd.values import Guard
from partitioner.group_state import GroupKeys, GroupState, Released, assignment_json, read_state

__all__ = ["AssignmentStep", "GroupCoordinator", "plan_step"]

log = logging.getLogger(__name__)

COORDINATOR_POLL_S = 1.0  # the coordinator re-reads the group at least this often
# ...and partition_count() (no I/O) this often: a grown topic's partitions are handed out at once
COUNT_CHECK_S = 0.1


@dataclass(frozen=True, slots=True)
class AssignmentStep:
    """What the coordinator writes next: the owners, and the partitions released but not handed on
    yet."""

    owners: dict[str, tuple[int, ...]]
    released: Released


class GroupCoordinator:
    """A member's campaign for the ``coordinator`` key and, while it holds the key, the rebalance.

    The safety rule: a member confirms generation ``g`` only while everything it may still serve is
    inside its share of ``g``. The coordinator writes a generation that hands any partition to a new
    owner only after every live member has confirmed the latest generation (a member whose key
    vanished counts as confirmed: it stopped on its own clock before its lease expired). So a
    rebalance first writes "current owners minus the moving partitions", waits for those
    confirmations, then writes the target. A member whose set only grows, or who never served
    anything, confirms by itself at once, so only members that give something up are waited for.

    Liveness: a member stuck without confirming a revocation stalls the rebalance until its lease
    expires.
    """

    def __init__(self, conn: EtcdConnection, keys: GroupKeys, *, member_id: str,
                 lost: asyncio.Event, partition_count: Callable[[], int], lease_ttl_s: float,
                 initial_assignment_delay_s: float) -> None:
        self._conn = conn
        self._keys = keys
        self._member_id = member_id
        self._lost = lost  # the member's: set once it must stop everything
        self._partition_count = partition_count
        self._ttl_s = lease_ttl_s
        self._vacant = asyncio.Event()
        self._changed = asyncio.Event()  # anything under the group's keys changed
        self._revision = 0  # create_revision of the coordinator key while we hold it
        # an empty group's first assignment waits this long for the members joining with the first
        self._initial_delay_s = initial_assignment_delay_s
        self._forming_since: float | None = None  # loop clock when coordination saw it empty
        self._look_again_s = COORDINATOR_POLL_S
        self._planned_for: int | None = None  # the partition count of the last rebalance step

    @property
    def holds_key(self) -> bool:
        """True while this member holds the coordinator key."""
        return self._revision != 0

    def group_changed(self, *, vacant: bool) -> None:
        """The member's watch saw the group change; ``vacant``: the coordinator key is gone."""
        if vacant:
            self._vacant.set()
        self._changed.set()

    def step_down(self) -> None:
        """Stop counting as coordinator at once (the member is lost)."""
        self._revision = 0

    async def campaign(self, lease_id: int) -> None:
        """Try to become coordinator whenever the coordinator key is vacant; coordinate while we
        hold it."""
        backoff = Backoff()
        value = orjson.dumps({"member_id": self._member_id, "lease_id": lease_id})
        while not self._lost.is_set():
            self._vacant.clear()
            try:
                revision = await self._claim(value, lease_id)
            except CoordinationUnavailable as exc:
                log.warning("member %s: coordinator campaign failed: %s", self._member_id, exc)
                await backoff.sleep()
                continue
            backoff.reset()
            if revision:
                await self._coordinate(revision)
                continue
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._vacant.wait(),
                                       max(COORDINATOR_POLL_S, self._ttl_s / 2))

    async def _claim(self, value: bytes, lease_id: int) -> int:
        """The coordinator key's create_revision if it is (now) ours, else 0."""
        revision = await self._conn.put_if_absent(self._keys.coordinator, value, lease_id=lease_id)
        if revision is not None:
            return revision
        # A campaign whose reply was lost may have won: the key then carries our lease.
        existing = await self._conn.get(self._keys.coordinator)
        if existing is not None and orjson.loads(existing.value).get("lease_id") == lease_id:
            return existing.create_revision
        return 0

    async def _coordinate(self, revision: int) -> None:
        """Rebalance on every group change (and every second) until the coordinator key is no longer
        ours."""
        log.info("member %s coordinates group %s/%s", self._member_id, self._keys.topic,
                 self._keys.group)
        self._revision = revision
        backoff = Backoff()
        try:
            while not self._lost.is_set():
                self._changed.clear()
                try:
                    state = await read_state(self._conn, self._keys)
                    if state.coordinator_create_revision != revision:
                        log.info("member %s is no longer coordinator", self._member_id)
                        return
                    await self._rebalance_step(state, revision)
                except CoordinationUnavailable as exc:
                    log.warning("coordinator %s: %s", self._member_id, exc)
                    await backoff.sleep()
                    continue
                backoff.reset()
                await self._wait_for_change()
        finally:
            self._revision = 0

    async def _wait_for_change(self) -> None:
        """Until the group changes, the partition count moves, or it is time to look again."""
        loop = asyncio.get_running_loop()
        until = loop.time() + self._look_again_s
        while (left_s := until - loop.time()) > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), min(COUNT_CHECK_S, left_s))
                return
            with contextlib.suppress(Exception):  # a failing count is logged by the next step
                if self._partition_count() != self._planned_for:
                    return

    async def _rebalance_step(self, state: GroupState, revision: int) -> None:
        """Write at most one generation towards the target; the resulting watch event brings the
        next step."""
        partitions = self._planned_for = self._read_partition_count()
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
            log.info("group %s/%s generation %d: %s", self._keys.topic, self._keys.group,
                     generation, step.owners)

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
                          self._member_id)
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
