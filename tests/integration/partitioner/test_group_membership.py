"""Exclusive consumer-group membership against a real etcd (the session fixture ``etcd_server``).

Every member here is driven by a ``Consumer`` that behaves like the gateway: it starts serving a
partition the moment ``next_assignment`` returns it, stops serving revoked partitions after a small
random delay, and only then confirms. A shared ``Recorder`` fails the test if a partition is ever
served by two members at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from partitioner.errors import MembershipLost
from partitioner.etcd.connection import open_etcd
from partitioner.group_state import group_view, list_groups
from partitioner.membership import GroupMember, MemberAssignment

pytestmark = pytest.mark.integration

TTL_S = 2.0


class Recorder:
    """Who serves which partition right now; every overlap is recorded as a violation."""

    def __init__(self) -> None:
        self.serving: dict[int, str] = {}
        self.violations: list[str] = []

    def start(self, member: str, generation: int, partitions: set[int]) -> None:
        for p in sorted(partitions):
            holder = self.serving.get(p)
            if holder is not None and holder != member:
                self.violations.append(
                    f"gen {generation}: {member} took partition {p} still served by {holder}"
                )
            self.serving[p] = member

    def stop(self, member: str, partitions: set[int]) -> None:
        for p in partitions:
            if self.serving.get(p) == member:
                del self.serving[p]


class Consumer:
    """Drives one GroupMember the way the gateway does."""

    def __init__(self, member: GroupMember, recorder: Recorder, max_delay_s: float) -> None:
        self.member = member
        self.recorder = recorder
        self.max_delay_s = max_delay_s
        self.serving: set[int] = set()
        self.history: list[MemberAssignment] = []
        self.task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        name = self.member.member_id
        try:
            while True:
                assignment = await self.member.next_assignment()
                self.history.append(assignment)
                self.recorder.start(
                    name, assignment.generation, set(assignment.partitions) - self.serving
                )
                self.serving |= assignment.partitions
                await asyncio.sleep(random.uniform(0, self.max_delay_s))
                revoked = self.serving - assignment.partitions
                self.recorder.stop(name, revoked)
                self.serving -= revoked
                await self.member.confirm(assignment.generation)
        except MembershipLost:
            pass
        finally:
            self.recorder.stop(name, self.serving)
            self.serving = set()

    async def stop(self) -> None:
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task


class Group:
    """Members of one fresh (topic, group), each with its own etcd connection like separate
    gateways."""

    def __init__(self, endpoint: str, partitions: Callable[[], int]) -> None:
        self.endpoint = endpoint
        self.partitions = partitions
        self.topic = f"t-{uuid.uuid4().hex[:8]}"
        self.group = "g"
        self.prefix = f"/streamgate-test-{uuid.uuid4().hex}/"
        self.recorder = Recorder()
        self.consumers: dict[str, Consumer] = {}
        self._stack = contextlib.AsyncExitStack()

    async def join(self, name: str, max_delay_s: float = 0.2, ttl_s: float = TTL_S,
                   initial_delay_s: float = 0.0) -> Consumer:
        conn = await self._stack.enter_async_context(open_etcd([self.endpoint], timeout_s=2.0))
        member = GroupMember(
            conn, topic=self.topic, group=self.group, member_id=name, node=f"node-{name}",
            partition_count=self.partitions, prefix=self.prefix, lease_ttl_s=ttl_s,
            initial_assignment_delay_s=initial_delay_s,
        )
        await self._stack.enter_async_context(member)
        consumer = Consumer(member, self.recorder, max_delay_s)
        self.consumers[name] = consumer
        return consumer

    async def leave(self, name: str) -> None:
        consumer = self.consumers.pop(name)
        await consumer.stop()
        await consumer.member.aclose()

    def serving(self) -> dict[str, set[int]]:
        return {name: consumer.serving for name, consumer in self.consumers.items()}

    def balanced(self, partitions: int) -> bool:
        """Every partition served by exactly one live member, shares differing by at most one."""
        shares = [c.serving for c in self.consumers.values()]
        sizes = [len(share) for share in shares]
        return (sorted(p for share in shares for p in share) == list(range(partitions))
                and max(sizes) - min(sizes) <= 1)

    async def aclose(self) -> None:
        for consumer in self.consumers.values():
            await consumer.stop()
        await self._stack.aclose()


@pytest.fixture
async def make_group(etcd_server: Any) -> AsyncIterator[Callable[[Callable[[], int]], Group]]:
    groups: list[Group] = []

    def make(partitions: Callable[[], int]) -> Group:
        groups.append(Group(etcd_server.endpoint, partitions))
        return groups[-1]

    yield make
    for group in groups:
        await group.aclose()
        assert group.recorder.violations == []


async def _eventually(condition: Callable[[], bool], timeout_s: float, what: str) -> float:
    """Wait until ``condition()``; returns the seconds it took."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    while not condition():
        assert loop.time() - start < timeout_s, f"{what} not reached within {timeout_s}s"
        await asyncio.sleep(0.02)
    return loop.time() - start


async def test_second_member_splits_partitions_without_serving_twice(
        make_group: Callable[[Callable[[], int]], Group]) -> None:
    group = make_group(lambda: 6)
    a = await group.join("a")
    await _eventually(lambda: a.serving == set(range(6)), 3.0, "a serves all")
    b = await group.join("b")
    await _eventually(lambda: group.balanced(6) and len(b.serving) == 3, 3.0, "3/3 split")
    await _eventually(lambda: a.member.confirmed_generation == b.member.confirmed_generation
                      == b.history[-1].generation, 2.0, "both confirmed the final generation")

    assert group.recorder.violations == []
    assert a.history[0].partitions == frozenset(range(6))
    # Phase 1 took b's share away from a before phase 2 gave it to b, in a later generation.
    assert [len(x.partitions) for x in a.history] == [6, 3]
    assert b.history[-1].generation > a.history[-1].generation
    generations = [x.generation for x in a.history + b.history if x.partitions]
    assert generations == sorted(generations)
    assert b.history[-1].partitions.isdisjoint(a.history[-1].partitions)


async def test_members_joining_together_get_shares_without_revocation(
        make_group: Callable[[Callable[[], int]], Group]) -> None:
    group = make_group(lambda: 8)
    members = []
    for name in ("a", "b", "c", "d"):
        members.append(await group.join(name, initial_delay_s=0.6))
        await asyncio.sleep(0.05)
    await _eventually(lambda: group.balanced(8), 4.0, "2/2/2/2")
    for member in members:
        # one grant, the member's final share: nothing handed out and taken back
        assert [len(x.partitions) for x in member.history] == [2], member.member.member_id
    late = await group.join("e", initial_delay_s=0.6)
    # a group that has owners rebalances at once
    await _eventually(lambda: group.balanced(8) and len(late.serving) >= 1, 2.0, "e served")


async def test_slow_confirmer_churn_never_serves_a_partition_twice(
        make_group: Callable[[Callable[[], int]], Group]) -> None:
    group = make_group(lambda: 12)
    for name in ("a", "b", "c"):
        await group.join(name, max_delay_s=0.3)
    await group.join("d", max_delay_s=0.3)
    await group.leave("a")
    await group.join("e", max_delay_s=0.3)
    await _eventually(lambda: group.balanced(12), 6.0, "balanced after churn")
    assert group.recorder.violations == []


async def test_closed_member_partitions_move_to_survivors_quickly(
        make_group: Callable[[Callable[[], int]], Group]) -> None:
    group = make_group(lambda: 6)
    for name in ("a", "b", "c"):
        await group.join(name, max_delay_s=0.05)
    await _eventually(
        lambda: group.balanced(6) and len(group.consumers["c"].serving) == 2, 4.0, "2/2/2"
    )

    await group.leave("c")
    took_s = await _eventually(lambda: group.balanced(6), 2.0, "survivors own everything")
    assert took_s < 2.0


async def test_silent_member_is_lost_within_ttl_and_replaced(
        make_group: Callable[[Callable[[], int]], Group]) -> None:
    group = make_group(lambda: 6)
    a = await group.join("a", max_delay_s=0.05)
    b = await group.join("b", max_delay_s=0.05)
    await _eventually(lambda: group.balanced(6) and len(b.serving) == 3, 4.0, "3/3")
    loop = asyncio.get_running_loop()

    started = loop.time()
    b.member.simulate_keepalive_failure()
    await asyncio.wait_for(b.member.wait_lost(), TTL_S + 1.0)
    lost_after_s = loop.time() - started
    assert b.member.lost
    assert lost_after_s <= TTL_S + 0.2
    await _eventually(lambda: not b.serving, 0.5, "lost member stops serving")
    with pytest.raises(MembershipLost):
        await b.member.next_assignment()

    await _eventually(
        lambda: a.serving == set(range(6)), TTL_S + 3.0, "survivor takes over after expiry"
    )
    assert group.recorder.violations == []


async def test_dead_members_lease_never_holds_back_released_partition(
        make_group: Callable[[Callable[[], int]], Group]) -> None:
    ttl_s = 8.0  # a gateway killed with -9: its member's lease lives on until the TTL
    group = make_group(lambda: 6)
    a = await group.join("a", max_delay_s=0.05, ttl_s=ttl_s)
    b = await group.join("b", max_delay_s=0.05, ttl_s=ttl_s)
    await _eventually(lambda: group.balanced(6) and len(b.serving) == 3, 4.0, "3/3")
    await a.stop()  # a's gateway died: nothing of a confirms any more, its lease is still alive
    a.member.simulate_keepalive_failure()
    loop = asyncio.get_running_loop()
    rejoined = loop.time()
    # a's client rejoins through b's gateway
    c = await group.join("c", max_delay_s=0.05, ttl_s=ttl_s)
    took_s = await _eventually(lambda: len(c.serving) == 1 and len(b.serving) == 2, ttl_s / 2,
                               "b's released partition served by c")
    print(
        f"\n[dead member] b's released partition served by the rejoined member {took_s:.2f}s after "
        f"it joined; a's lease ends {ttl_s:.0f}s after its last keepalive"
    )
    assert loop.time() - rejoined < ttl_s / 2
    del group.consumers["a"]  # stopped above; its member is closed with the group


async def test_leaving_coordinator_hands_coordination_on(
        make_group: Callable[[Callable[[], int]], Group]) -> None:
    group = make_group(lambda: 6)
    for name in ("a", "b", "c"):
        await group.join(name, max_delay_s=0.05)
    await _eventually(
        lambda: group.balanced(6) and len(group.consumers["c"].serving) == 2, 4.0, "2/2/2"
    )
    [leader] = [name for name, c in group.consumers.items() if c.member.is_coordinator]

    await group.leave(leader)
    await _eventually(
        lambda: any(c.member.is_coordinator for c in group.consumers.values()), 2.0, "new leader"
    )
    await _eventually(lambda: group.balanced(6), 2.0, "survivors own everything")
    await group.join("d", max_delay_s=0.05)
    await _eventually(lambda: group.balanced(6) and len(group.consumers["d"].serving) == 2, 3.0,
                      "newcomer served after the handover")


async def test_growing_partition_count_assigns_the_new_partitions(
        make_group: Callable[[Callable[[], int]], Group]) -> None:
    count = [4]
    group = make_group(lambda: count[0])
    await group.join("a", max_delay_s=0.05)
    await group.join("b", max_delay_s=0.05)
    await _eventually(
        lambda: group.balanced(4) and len(group.consumers["b"].serving) == 2, 4.0, "2/2"
    )

    count[0] = 6
    await _eventually(lambda: group.balanced(6), 3.0, "3/3 after growth")
    assert group.serving()["a"] >= {0, 1} or group.serving()["a"] >= {2, 3}  # kept its old share


async def test_group_view_and_list_groups_describe_the_group(
        make_group: Callable[[Callable[[], int]], Group], etcd_server: Any) -> None:
    group = make_group(lambda: 2)
    await group.join("a")
    await group.join("b")
    await _eventually(
        lambda: group.balanced(2) and len(group.consumers["b"].serving) == 1, 4.0, "1/1"
    )

    async with open_etcd([etcd_server.endpoint], timeout_s=2.0) as conn:
        view = await group_view(conn, topic=group.topic, group=group.group, prefix=group.prefix)
        groups = await list_groups(conn, prefix=group.prefix)
    assert [(m.member_id, m.node) for m in view.members] == [("a", "node-a"), ("b", "node-b")]
    assert all(m.joined_at_ms > 1_600_000_000_000 for m in view.members)
    assert view.coordinator in {"a", "b"}
    assert sorted(p for parts in view.owners.values() for p in parts) == [0, 1]
    assert view.generation >= 1
    assert groups == [(group.topic, "g")]
