"""Partition ownership against a real etcd (the session fixture ``etcd_server``), including etcd
restarts.

A ``Recorder`` samples every node's ``owned`` every 20 ms and fails the test if a partition is ever
in two nodes' ``owned`` in the same sample, or if a node keeps a partition in ``owned`` across an
etcd read that shows the owner key naming someone else (or nobody).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import pytest

from partitioner.errors import CoordinationUnavailable
from partitioner.etcd.connection import EtcdConnection, open_etcd
from partitioner.ownership import PartitionOwnership
from partitioner.ownership_keys import partition_owners
from partitioner.rendezvous import desired_partitions

pytestmark = pytest.mark.integration

TTL_S = 2.0
TOPICS = {"orders": 8, "clicks": 4}
Partition = tuple[str, int]


def _all(topics: Mapping[str, int]) -> frozenset[Partition]:
    return frozenset((t, p) for t, n in topics.items() for p in range(n))


class Recorder:
    """Samples ``owned`` of every node; collects double ownership and ownership without the key."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.violations: list[str] = []
        self.samples = 0
        self.checked_reads = 0
        self._stopped = False
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    def _sample(self) -> dict[str, frozenset[Partition]]:
        owned = {name: node.owned for name, node in self.cluster.nodes.items()}
        seen: dict[Partition, str] = {}
        for name, partitions in owned.items():
            for p in partitions:
                if p in seen:
                    self.violations.append(
                        f"{time.monotonic():.3f}: {p} owned by {seen[p]} and {name}"
                    )
                seen[p] = name
        self.samples += 1
        return owned

    async def _run(self) -> None:
        while not self._stopped:
            before = self._sample()
            try:
                holders = await asyncio.wait_for(
                    partition_owners(self.cluster.admin, prefix=self.cluster.prefix), 1.0
                )
            except (CoordinationUnavailable, TimeoutError):
                holders = None
            after = self._sample()
            if holders is not None:
                self.checked_reads += 1
                for name in before.keys() & after.keys():
                    for p in before[name] & after[name]:
                        if holders.get(p) != name:
                            self.violations.append(
                                f"{name} acted on {p} while its key named {holders.get(p)}"
                            )
            await asyncio.sleep(0.02)

    async def stop(self) -> None:
        # A cancel landing inside a gRPC call can surface as CoordinationUnavailable,
        # which the loop survives: the flag ends it regardless.
        self._stopped = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


class Cluster:
    """Nodes under one fresh prefix, each with its own etcd connection like separate gateways."""

    def __init__(self, endpoint: str, admin: EtcdConnection) -> None:
        self.endpoint = endpoint
        self.admin = admin
        self.prefix = f"/streamgate-test-{uuid.uuid4().hex}/"
        self.topics = dict(TOPICS)
        self.nodes: dict[str, PartitionOwnership] = {}
        self.recorder = Recorder(self)
        self._stacks: dict[str, contextlib.AsyncExitStack] = {}

    async def join(self, name: str) -> PartitionOwnership:
        stack = contextlib.AsyncExitStack()
        conn = await stack.enter_async_context(open_etcd([self.endpoint], timeout_s=1.0))
        node = PartitionOwnership(
            conn, node_id=name, partitions=lambda: self.topics, prefix=self.prefix,
            lease_ttl_s=TTL_S,
        )
        await stack.enter_async_context(node)
        self._stacks[name] = stack
        self.nodes[name] = node
        return node

    async def leave(self, name: str) -> None:
        # owned empties at once, before the node leaves the recorder's view
        await self.nodes[name].aclose()
        del self.nodes[name]
        await self._stacks.pop(name).aclose()

    def converged(self) -> bool:
        """Every node owns exactly its rendezvous share of the current partitions."""
        names = sorted(self.nodes)
        return all(node.owned == desired_partitions(names, self.topics, name)
                   for name, node in self.nodes.items())

    async def aclose(self) -> None:
        await self.recorder.stop()
        for name in list(self.nodes):
            await self.leave(name)


@pytest.fixture
async def cluster(etcd_server: Any) -> AsyncIterator[Cluster]:
    async with open_etcd([etcd_server.endpoint], timeout_s=1.0) as admin:
        made = Cluster(etcd_server.endpoint, admin)
        made.recorder.start()
        try:
            yield made
        finally:
            await made.aclose()
        assert made.recorder.violations == []
        assert made.recorder.samples > 0


async def _eventually(condition: Callable[[], bool], timeout_s: float, what: str) -> float:
    """Wait until ``condition()``; returns the seconds it took."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    while not condition():
        assert loop.time() - start < timeout_s, f"{what} not reached within {timeout_s}s"
        await asyncio.sleep(0.01)
    return loop.time() - start


async def test_joining_node_converges_without_double_ownership(cluster: Cluster) -> None:
    a = await cluster.join("a")
    await _eventually(lambda: a.owned == _all(TOPICS) and a.healthy, 2.0, "a owns everything")
    assert a.live_nodes == ["a"]

    b = await cluster.join("b")
    took_s = await _eventually(cluster.converged, 3.0, "rendezvous split")
    print(f"converged after join in {took_s:.3f}s")
    assert b.owned
    assert a.owned
    assert a.live_nodes == b.live_nodes == ["a", "b"]
    owners = await partition_owners(cluster.admin, prefix=cluster.prefix)
    assert owners == {p: ("a" if p in a.owned else "b") for p in _all(TOPICS)}
    for p in b.owned:
        assert b.epoch(*p) is not None
        assert a.epoch(*p) is None
    assert cluster.recorder.violations == []


async def test_closed_nodes_partitions_move_to_survivor_in_a_second(cluster: Cluster) -> None:
    a = await cluster.join("a")
    await cluster.join("b")
    await _eventually(cluster.converged, 3.0, "rendezvous split")

    await cluster.leave("b")
    took_s = await _eventually(lambda: a.owned == _all(TOPICS), 1.5, "survivor owns everything")
    print(f"graceful takeover in {took_s:.3f}s")
    assert took_s < 1.0


async def test_node_without_keepalives_stops_and_survivor_takes_over(cluster: Cluster) -> None:
    a = await cluster.join("a")
    b = await cluster.join("b")
    await _eventually(cluster.converged, 3.0, "rendezvous split")
    loop = asyncio.get_running_loop()

    started = loop.time()
    b.simulate_keepalive_failure()
    await _eventually(lambda: not b.owned, TTL_S, "stalled node stops acting")
    stopped_s = loop.time() - started
    took_s = await _eventually(
        lambda: a.owned == _all(TOPICS), TTL_S + 1.5, "survivor owns everything"
    )
    total_s = loop.time() - started
    print(
        f"stalled node stopped acting after {stopped_s:.3f}s; "
        f"survivor took over after {total_s:.3f}s"
    )
    assert stopped_s < TTL_S
    assert took_s > 0
    assert total_s < TTL_S + 1.0
    assert a.live_nodes == ["a"]


async def test_etcd_restart_never_double_owns_and_ownership_converges(
        cluster: Cluster, etcd_server: Any) -> None:
    a = await cluster.join("a")
    b = await cluster.join("b")
    await _eventually(cluster.converged, 3.0, "rendezvous split")

    try:
        await asyncio.to_thread(etcd_server.restart)
    finally:
        etcd_server.start()  # no-op when running: never leave the session's etcd down
    took_s = await _eventually(
        lambda: cluster.converged() and a.healthy and b.healthy, 2 * TTL_S, "recovered"
    )
    print(f"recovered {took_s:.3f}s after etcd came back")

    await cluster.join("c")  # the resumed watches must see the newcomer and hand over its share
    await _eventually(cluster.converged, 3.0, "three-way split after the restart")
    assert a.live_nodes == ["a", "b", "c"]
    assert cluster.recorder.checked_reads > 0


async def test_etcd_pause_of_half_a_ttl_never_double_owns(
        cluster: Cluster, etcd_server: Any) -> None:
    a = await cluster.join("a")
    b = await cluster.join("b")
    await _eventually(cluster.converged, 3.0, "rendezvous split")
    before = (a.owned, b.owned)

    etcd_server.pause()
    try:
        await asyncio.sleep(TTL_S / 2)
    finally:
        etcd_server.resume()
    await _eventually(
        lambda: cluster.converged() and a.healthy and b.healthy, 2 * TTL_S, "recovered"
    )
    assert (a.owned, b.owned) == before


async def test_grown_partitions_get_owners(cluster: Cluster) -> None:
    a = await cluster.join("a")
    b = await cluster.join("b")
    await _eventually(cluster.converged, 3.0, "rendezvous split")

    cluster.topics = {"orders": 12, "clicks": 4, "new": 3}
    await _eventually(cluster.converged, 2.5, "new partitions owned")
    assert a.owned | b.owned == _all(cluster.topics)
    owners = await partition_owners(cluster.admin, prefix=cluster.prefix)
    assert set(owners) == _all(cluster.topics)
