"""PartitionOwnership against an in-memory fake of etcd: acquisition, hand-over, own-clock liveness,
recovery."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import math
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import cast

import orjson
import pytest

from partitioner.errors import CoordinationUnavailable
from partitioner.etcd.connection import EtcdConnection
from partitioner.etcd.values import Guard, Snapshot, StoredValue, WatchEvent
from partitioner.ownership import PartitionOwnership
from partitioner.ownership_keys import OwnershipKeys, partition_owners
from partitioner.rendezvous import desired_partitions

PREFIX = "/t/"
KEYS = OwnershipKeys(PREFIX)
TTL_S = 0.4


class _FakeWatch:
    def __init__(self, queue: asyncio.Queue[WatchEvent]) -> None:
        self.queue = queue

    async def events(self) -> AsyncIterator[WatchEvent]:
        while True:
            yield await self.queue.get()

    async def cancel(self) -> None:
        return None


class FakeEtcd:
    """Just enough of EtcdConnection: keys with leases, guarded puts/deletes, prefix watches."""

    def __init__(self) -> None:
        self.kv: dict[bytes, StoredValue] = {}
        self.revision = 1
        self.leases: set[int] = set()
        self.lease_ids = itertools.count(100)
        self.watches: list[tuple[bytes, asyncio.Queue[WatchEvent]]] = []
        self.lose_next_put_if_reply = False

    def _emit(self, event: WatchEvent) -> None:
        for prefix, queue in self.watches:
            if event.key.startswith(prefix):
                queue.put_nowait(event)

    def expire_lease(self, lease_id: int) -> None:
        """What etcd does when a lease runs out: every key attached to it is deleted in one
        revision."""
        self.leases.discard(lease_id)
        doomed = [key for key, stored in self.kv.items() if stored.lease_id == lease_id]
        if doomed:
            self.revision += 1
        for key in doomed:
            del self.kv[key]
            self._emit(WatchEvent("delete", key, b"", self.revision))

    async def grant_lease(self, ttl_s: float) -> tuple[int, int]:
        lease_id = next(self.lease_ids)
        self.leases.add(lease_id)
        return lease_id, math.ceil(ttl_s)

    async def keep_alive(self, lease_id: int) -> int:
        return 2 if lease_id in self.leases else 0

    async def revoke_lease(self, lease_id: int) -> None:
        self.expire_lease(lease_id)

    async def put(self, key: bytes, value: bytes, lease_id: int | None = None) -> int:
        if lease_id and lease_id not in self.leases:
            raise CoordinationUnavailable("etcd put failed: requested lease not found")
        self.revision += 1
        old = self.kv.get(key)
        created = old.create_revision if old else self.revision
        self.kv[key] = StoredValue(key, value, created, self.revision, lease_id or 0)
        self._emit(WatchEvent("put", key, value, self.revision, created, lease_id or 0))
        return self.revision

    def _guards_hold(self, guards: Sequence[Guard]) -> bool:
        for guard in guards:
            stored = self.kv.get(guard.key)
            actual = 0 if stored is None else (stored.create_revision if guard.target == "create"
                                               else stored.mod_revision)
            if actual != guard.revision:
                return False
        return True

    async def put_if(self, key: bytes, value: bytes, *, guards: Sequence[Guard],
                     lease_id: int | None = None) -> int | None:
        if not self._guards_hold(guards):
            return None
        revision = await self.put(key, value, lease_id)
        if self.lose_next_put_if_reply:
            self.lose_next_put_if_reply = False
            raise CoordinationUnavailable("etcd transaction failed: connection reset")
        return revision

    async def delete_if(self, key: bytes, *, guards: Sequence[Guard]) -> bool:
        if not self._guards_hold(guards) or key not in self.kv:
            return False
        self.revision += 1
        del self.kv[key]
        self._emit(WatchEvent("delete", key, b"", self.revision))
        return True

    async def get(self, key: bytes) -> StoredValue | None:
        return self.kv.get(key)

    async def get_prefix(self, prefix: bytes) -> Snapshot:
        return Snapshot(
            [self.kv[k] for k in sorted(self.kv) if k.startswith(prefix)], self.revision
        )

    async def watch_prefix(self, prefix: bytes, start_revision: int) -> _FakeWatch:
        queue: asyncio.Queue[WatchEvent] = asyncio.Queue()
        self.watches.append((prefix, queue))
        return _FakeWatch(queue)

    def owners(self) -> dict[tuple[str, int], str]:
        found = {
            KEYS.parse_owner(k): v.value.decode()
            for k, v in self.kv.items()
            if k.startswith(KEYS.owners)
        }
        return {p: node for p, node in found.items() if p is not None}


def _node(fake: FakeEtcd, node_id: str, partitions: Callable[[], Mapping[str, int]],
          ttl_s: float = TTL_S, address: str | None = None) -> PartitionOwnership:
    return PartitionOwnership(
        cast(EtcdConnection, fake), node_id=node_id, partitions=partitions, prefix=PREFIX,
        lease_ttl_s=ttl_s, address=address
    )


def _all(topics: Mapping[str, int]) -> frozenset[tuple[str, int]]:
    return frozenset((t, p) for t, n in topics.items() for p in range(n))


async def _eventually(condition: Callable[[], bool], timeout_s: float = 1.0) -> float:
    loop = asyncio.get_running_loop()
    start = loop.time()
    while not condition():
        assert loop.time() - start < timeout_s, "condition not met in time"
        await asyncio.sleep(0.005)
    return loop.time() - start


class Sampler:
    """Samples every node's ``owned`` every few ms; records overlaps and partitions owned without
    the key."""

    def __init__(self, fake: FakeEtcd, nodes: dict[str, PartitionOwnership]) -> None:
        self.fake, self.nodes = fake, nodes
        self.violations: list[str] = []
        self.task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        while True:
            seen: dict[tuple[str, int], str] = {}
            holders = self.fake.owners()
            for name, node in self.nodes.items():
                for p in node.owned:
                    if p in seen:
                        self.violations.append(f"{p} owned by {seen[p]} and {name}")
                    if holders.get(p) != name:
                        self.violations.append(
                            f"{name} acts on {p} but the key names {holders.get(p)}"
                        )
                    seen[p] = name
            await asyncio.sleep(0.002)

    async def stop(self) -> None:
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task


TOPICS = {"orders": 8, "clicks": 4}


async def test_single_node_registers_and_owns_every_partition() -> None:
    fake = FakeEtcd()
    async with _node(fake, "a", lambda: TOPICS) as node:
        owned = await asyncio.wait_for(node.wait_changed(frozenset()), 1.0)
        await _eventually(lambda: node.owned == _all(TOPICS))
        assert owned <= _all(TOPICS)
        assert node.live_nodes == ["a"]
        assert node.healthy
        info = orjson.loads(fake.kv[KEYS.node("a")].value)
        assert info["node_id"] == "a"
        assert info["started_at_ms"] > 1_600_000_000_000
        epoch = node.epoch("orders", 3)
        assert epoch == fake.kv[KEYS.owner(("orders", 3))].create_revision
        assert node.epoch("orders", 99) is None
        assert await partition_owners(cast(EtcdConnection, fake), prefix=PREFIX) == dict.fromkeys(
            _all(TOPICS), "a"
        )
    assert fake.kv == {}  # closing revoked the lease: every key vanished at once
    assert node.owned == frozenset()
    await node.aclose()  # idempotent


async def test_second_node_takes_its_rendezvous_share_without_overlap() -> None:
    fake = FakeEtcd()
    nodes: dict[str, PartitionOwnership] = {}
    sampler = Sampler(fake, nodes)
    async with _node(fake, "a", lambda: TOPICS) as a:
        nodes["a"] = a
        await _eventually(lambda: a.owned == _all(TOPICS))
        async with _node(fake, "b", lambda: TOPICS) as b:
            nodes["b"] = b
            await _eventually(
                lambda: (
                    b.owned == desired_partitions(["a", "b"], TOPICS, "b")
                    and bool(b.owned)
                    and a.owned == desired_partitions(["a", "b"], TOPICS, "a")
                )
            )
            assert a.live_nodes == b.live_nodes == ["a", "b"]
        await _eventually(lambda: a.owned == _all(TOPICS))
    await sampler.stop()
    assert sampler.violations == []


async def test_churn_of_three_nodes_never_owns_a_partition_twice() -> None:
    fake = FakeEtcd()
    nodes: dict[str, PartitionOwnership] = {}
    sampler = Sampler(fake, nodes)
    topics = {"orders": 24}
    async with contextlib.AsyncExitStack() as stack:
        for name in ("a", "b", "c"):
            nodes[name] = await stack.enter_async_context(_node(fake, name, lambda: topics))
            await asyncio.sleep(0.01)
        await _eventually(
            lambda: all(
                node.owned == desired_partitions(["a", "b", "c"], topics, name)
                for name, node in nodes.items()
            )
        )
        await nodes["b"].aclose()
        await _eventually(lambda: nodes["a"].owned | nodes["c"].owned == _all(topics))
        assert nodes["a"].live_nodes == ["a", "c"]
    await sampler.stop()
    assert sampler.violations == []


async def test_keepalive_failure_empties_owned_on_the_nodes_own_clock() -> None:
    fake = FakeEtcd()
    loop = asyncio.get_running_loop()
    async with _node(fake, "a", lambda: TOPICS) as node:
        await _eventually(lambda: node.owned == _all(TOPICS))
        node.simulate_keepalive_failure()
        started = loop.time()
        assert await asyncio.wait_for(node.wait_changed(), TTL_S) == frozenset()
        assert loop.time() - started <= TTL_S - node.safety_margin_s + 0.02
        assert not node.healthy
        # the keys outlive our right to act
        assert fake.owners() == dict.fromkeys(_all(TOPICS), "a")

        # etcd still knows the lease: ownership resumes as it was
        node.simulate_keepalive_failure(False)
        assert await asyncio.wait_for(node.wait_changed(frozenset()), TTL_S) == _all(TOPICS)


async def test_new_lease_reacquires_partitions_with_new_epochs() -> None:
    fake = FakeEtcd()
    async with _node(fake, "a", lambda: TOPICS) as node:
        await _eventually(lambda: node.owned == _all(TOPICS))
        old_epoch = node.epoch("orders", 0)
        node.simulate_keepalive_failure()
        await _eventually(lambda: not node.owned, TTL_S)
        [lease] = fake.leases
        fake.expire_lease(lease)
        assert fake.kv == {}
        node.simulate_keepalive_failure(False)
        await _eventually(lambda: node.owned == _all(TOPICS), 2.0)
        assert KEYS.node("a") in fake.kv
        new_epoch = node.epoch("orders", 0)
        assert old_epoch is not None
        assert new_epoch is not None
        assert new_epoch > old_epoch


async def test_registration_announces_the_address_once_per_lease() -> None:
    fake = FakeEtcd()
    async with _node(fake, "a", lambda: TOPICS, address="http://10.0.0.7:8080") as node:
        await _eventually(lambda: node.owned == _all(TOPICS))
        registered = fake.kv[KEYS.node("a")]
        assert KEYS.parse_node(registered).address == "http://10.0.0.7:8080"
        assert registered.mod_revision == registered.create_revision  # owning wrote no more
        node.simulate_keepalive_failure()
        await _eventually(lambda: not node.owned, TTL_S)
        [lease] = fake.leases
        fake.expire_lease(lease)
        node.simulate_keepalive_failure(False)
        await _eventually(lambda: KEYS.node("a") in fake.kv, 2.0)
        again = KEYS.parse_node(fake.kv[KEYS.node("a")])
    assert again.address == "http://10.0.0.7:8080"
    assert again.started_at_ms is not None


async def test_a_node_without_an_address_registers_none() -> None:
    fake = FakeEtcd()
    async with _node(fake, "a", lambda: {}):
        info = orjson.loads(fake.kv[KEYS.node("a")].value)
    assert set(info) == {"node_id", "started_at_ms"}


async def test_partition_held_elsewhere_is_taken_only_once_released() -> None:
    fake = FakeEtcd()
    stranger = await fake.grant_lease(10)
    await fake.put(KEYS.owner(("orders", 1)), b"zombie", lease_id=stranger[0])
    async with _node(fake, "a", lambda: {"orders": 2}) as node:
        await _eventually(lambda: ("orders", 0) in node.owned)
        await asyncio.sleep(0.05)
        assert ("orders", 1) not in node.owned
        fake.expire_lease(stranger[0])
        await _eventually(lambda: node.owned == {("orders", 0), ("orders", 1)})


async def test_a_create_whose_reply_was_lost_is_adopted() -> None:
    fake = FakeEtcd()
    fake.lose_next_put_if_reply = True
    async with _node(fake, "a", lambda: {"orders": 1}) as node:
        await _eventually(lambda: node.owned == {("orders", 0)})
        assert node.epoch("orders", 0) == fake.kv[KEYS.owner(("orders", 0))].create_revision


async def test_partition_growth_and_topic_removal_follow_partitions() -> None:
    fake = FakeEtcd()
    topics = {"orders": 2, "clicks": 1}
    async with _node(fake, "a", lambda: dict(topics)) as node:
        await _eventually(lambda: node.owned == _all(topics))
        topics["orders"] = 4
        del topics["clicks"]
        # no etcd event: the 1 s poll finds it
        await _eventually(lambda: node.owned == _all(topics), 2.0)
        await _eventually(lambda: set(fake.owners()) == _all(topics))


async def test_failing_partitions_callback_postpones_ownership() -> None:
    fake = FakeEtcd()
    calls = itertools.count()

    def flaky() -> Mapping[str, int]:
        if next(calls) == 0:
            raise RuntimeError("topic cache not ready")
        return {"orders": 1}

    async with _node(fake, "a", flaky) as node:
        await _eventually(lambda: node.owned == {("orders", 0)}, 2.0)
        assert node.healthy


async def test_crashed_task_gives_everything_up_and_turns_unhealthy() -> None:
    fake = FakeEtcd()
    async with _node(fake, "a", lambda: {"orders": 2}) as node:
        await _eventually(lambda: len(node.owned) == 2)

        async def broken(key: bytes, *, guards: Sequence[Guard]) -> bool:
            raise AssertionError("bug")

        fake.delete_if = broken  # type: ignore[method-assign]
        waiter = asyncio.create_task(node.wait_changed())
        async with _node(fake, "b", lambda: {"orders": 2}):
            await _eventually(lambda: not node.healthy)
            assert node.owned == frozenset()
            assert await asyncio.wait_for(waiter, 1.0) == frozenset()


async def test_owner_keys_are_parsed_and_rejected() -> None:
    assert KEYS.parse_owner(KEYS.owner(("a.b-c", 12))) == ("a.b-c", 12)
    assert KEYS.parse_owner(b"/t/owners/orders/x") is None
    assert KEYS.parse_owner(b"/t/nodes/a") is None
    with pytest.raises(ValueError, match="node_id"):
        _node(FakeEtcd(), "a/b", dict)
