"""The memory watch's view of each node: polled INFO memory, the estimate between polls, and the
publish watermark that refuses appends before they are written."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from storage.errors import StorageFull
from storage.memory import MemoryWatch, cluster_nodes

MIB = 1024 * 1024


class FakeCluster:
    """A router and node lanes in one: CLUSTER NODES lists ``memory``'s ports (7000-7002
    primaries), INFO memory answers per node; a node in ``down`` does not answer."""

    def __init__(self, memory: dict[int, tuple[int, int]]) -> None:
        self.memory = memory
        self.down: set[int] = set()

    def primaries(self) -> list[tuple[str, int]]:
        return [("127.0.0.1", port) for port in self.memory if port < 7003]

    async def execute(self, address: tuple[str, int], commands: list[tuple[str, ...]], *,
                      exclusive: bool) -> list[Any]:
        (command,) = commands
        if address[1] in self.down:
            return [ConnectionError("node away")]
        if command == ("CLUSTER", "NODES"):
            return ["\n".join(
                f"id{port} 127.0.0.1:{port}@{port + 10000} "
                f"{'myself,master' if port < 7003 else 'slave'} - 0 0 1 connected"
                for port in self.memory).encode()]
        assert command == ("INFO", "memory")
        used, cap = self.memory[address[1]]
        return [f"# Memory\r\nused_memory:{used}\r\nmaxmemory:{cap}\r\n".encode()]


def _watch(cluster: FakeCluster, watermark: float, interval_s: float = 0) -> MemoryWatch:
    return MemoryWatch(cluster, cluster, watermark, interval_s)  # type: ignore[arg-type]


def _node_of(slot: int) -> tuple[str, int]:
    return ("127.0.0.1", 7000)


async def test_a_node_past_the_watermark_refuses_appends_to_its_partitions() -> None:
    cluster = FakeCluster({7000: (95 * MIB, 100 * MIB), 7001: (10 * MIB, 100 * MIB)})
    watch = _watch(cluster, 0.9)
    await watch.poll()
    assert watch.over
    with pytest.raises(StorageFull) as refused:
        watch.check_room("t", [0, 1], _node_of)
    assert refused.value.reason == "watermark"
    assert refused.value.node == "127.0.0.1:7000"
    watch.check_room("t", [0], lambda slot: ("127.0.0.1", 7001))  # room there


async def test_writes_between_polls_count_towards_the_watermark() -> None:
    cluster = FakeCluster({7000: (80 * MIB, 100 * MIB)})
    watch = _watch(cluster, 0.9)
    await watch.poll()
    assert not watch.over
    watch.note_written(("127.0.0.1", 7000), 5 * MIB)
    assert not watch.over
    watch.note_written(("127.0.0.1", 7000), 5 * MIB)
    assert watch.over
    cluster.memory[7000] = (70 * MIB, 100 * MIB)  # retention made room: the next poll says so
    await watch.poll()
    assert not watch.over


async def test_nodes_without_maxmemory_or_answer_never_refuse() -> None:
    cluster = FakeCluster({7000: (500 * MIB, 0), 7003: (99 * MIB, 100 * MIB)})
    cluster.down.add(7003)
    watch = _watch(cluster, 0.5)
    await watch.poll()
    assert not watch.over
    assert list(watch.nodes) == [("127.0.0.1", 7000)]
    assert watch.nodes[("127.0.0.1", 7000)].fill() is None


async def test_polling_runs_in_the_background_until_closed() -> None:
    cluster = FakeCluster({7000: (10 * MIB, 100 * MIB), 7003: (10 * MIB, 100 * MIB)})
    watching = _watch(cluster, 0.9, 0.01)
    async with watching as watch:
        while len(watch.nodes) < 2:  # noqa: ASYNC110
            await asyncio.sleep(0.01)
        assert {memory.role for memory in watch.nodes.values()} == {"primary", "replica"}
    await watch.aclose()  # idempotent


def test_cluster_nodes_are_named_as_announced_and_failed_ones_left_out() -> None:
    reply = ("a 10.0.0.1:6379@16379,redis-0.redis myself,master - 0 0 1 connected 0-5460\n"
             "b 10.0.0.2:6379@16379,redis-1.redis slave a 0 0 1 connected\n"
             "c 10.0.0.3:6379@16379 master,fail - 0 0 1 disconnected\n"
             "d 10.0.0.4:6380@16380 slave a 0 0 1 connected\n")
    assert cluster_nodes(reply.encode()) == {("redis-0.redis", 6379): "primary",
                                             ("redis-1.redis", 6379): "replica",
                                             ("10.0.0.4", 6380): "replica"}
