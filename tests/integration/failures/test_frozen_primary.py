"""A frozen (SIGSTOP) Redis primary: its own partitions fail over, every other partition keeps being
served.

The gateway runs with its default deadlines; the cluster with the devstack's default node timeout.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from failure_cluster import Client
from failure_traffic import Outcome, Producers, duplicated, replay_topic

from gateway.app import create_app
from gateway.settings import GatewaySettings
from streamgate_devstack import EtcdProcess, RedisClusterProcess, RedisNode
from tests.own_cluster import own_cluster

PARTITIONS = 6
FREEZE_S = 12.0
NODE_TIMEOUT_MS = 3000  # the devstack's default
# a request to a healthy shard never waits on the frozen one: one that did would wait for the
# failover, past the node timeout; below it, what a loaded machine adds to a healthy request
HEALTHY_STALL_LIMIT_S = 2.5
# the frozen shard's partitions are served again soon after the promotion
FAILOVER_FOLLOW_LIMIT_S = 2.0


def log_key(topic: str, partition: int) -> str:
    return f"sg:{{{topic}/{partition}}}:log"


@pytest.fixture
def cluster(tmp_path: Path, devstack_binaries: None) -> Any:
    with own_cluster(tmp_path / "redis", cluster_node_timeout_ms=NODE_TIMEOUT_MS) as started:
        yield started


@pytest.fixture
async def gateway(aiohttp_client: Any, cluster: RedisClusterProcess, etcd_server: EtcdProcess,
                  tmp_path: Path) -> Client:
    settings = GatewaySettings(auth_mode="none",
                               redis_nodes=tuple(f"{h}:{p}" for h, p in cluster.startup_nodes),
                               etcd_endpoints=(etcd_server.endpoint,),
                               etcd_prefix=f"/streamgate-frozen-{tmp_path.name}/")
    client: Client = await aiohttp_client(create_app(settings))
    return client


class Readers:
    """A replay loop per partition, keeping each read's outcome."""

    def __init__(self, client: Client, topic: str, partitions: list[int]) -> None:
        self.outcomes: list[Outcome] = []
        self._client, self._topic = client, topic
        self._stop = asyncio.Event()
        self._tasks = [asyncio.create_task(self._read(p)) for p in partitions]

    async def _read(self, partition: int) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            response = await self._client.get(
                f"/v1/topics/{self._topic}/partitions/{partition}/messages", params={"limit": "10"}
            )
            await response.read()
            self.outcomes.append(Outcome(started, time.monotonic(), response.status, partition))
            await asyncio.sleep(0.02)

    async def finish(self) -> None:
        self._stop.set()
        await asyncio.gather(*self._tasks)


async def promoted_at(replica: RedisNode, since: float) -> float:
    """When ``replica`` reports itself primary (polled every 50 ms)."""
    client = replica.client(socket_timeout=1.0)
    try:
        while time.monotonic() - since < 60:
            role = await asyncio.to_thread(lambda: client.info("replication")["role"])
            if role == "master":
                return time.monotonic()
            await asyncio.sleep(0.05)
    finally:
        client.close()
    raise AssertionError("the replica was never promoted")


def worst_latency(
    outcomes: list[Outcome], partitions: list[int], start: float, end: float
) -> float:
    return max((o.answered - o.started for o in outcomes
                if o.partition in partitions and start <= o.started <= end), default=0.0)


def first_success(outcomes: list[Outcome], partitions: list[int], after: float) -> float:
    """When every one of ``partitions`` had a 200 for a request started after ``after``."""
    firsts = [
        min(
            (
                o.answered
                for o in outcomes
                if o.partition == p and o.status == 200 and o.started > after
            ),
            default=float("inf"),
        )
        for p in partitions
    ]
    return max(firsts)


async def test_frozen_primary_stalls_only_its_own_partitions(
        cluster: RedisClusterProcess, gateway: Client, topic_name: str) -> None:
    response = await gateway.post("/v1/topics", json={"name": topic_name, "partitions": PARTITIONS})
    assert response.status == 201
    victim = cluster.primary_for_key(log_key(topic_name, 0))
    [replica] = [
        n for n in cluster.replicas if n.current_role() == "replica" and _follows(n, victim)
    ]
    frozen = [
        p for p in range(PARTITIONS) if cluster.primary_for_key(log_key(topic_name, p)) is victim
    ]
    healthy = [p for p in range(PARTITIONS) if p not in frozen]
    producers = Producers(
        gateway, topic_name, PARTITIONS, acks="1", deadline_s=10.0, per_partition=1
    )
    producers.start()
    readers = Readers(gateway, topic_name, healthy)
    try:
        await asyncio.sleep(1.0)
        frozen_at = time.monotonic()
        await asyncio.to_thread(victim.pause)
        promoted = await promoted_at(replica, frozen_at)
        await asyncio.sleep(max(0.0, frozen_at + FREEZE_S - time.monotonic()))
        served_again = first_success(producers.outcomes, frozen, promoted)
    finally:
        await asyncio.to_thread(victim.resume)
        await readers.finish()
        await producers.finish()
    end = frozen_at + FREEZE_S
    write_stall = worst_latency(producers.outcomes, healthy, frozen_at, end)
    read_stall = worst_latency(readers.outcomes, healthy, frozen_at, end)
    print(
        f"\n[primary SIGSTOP {FREEZE_S:.0f}s] frozen partitions {frozen}, healthy {healthy}; "
        f"promoted after {promoted - frozen_at:.2f}s; frozen partitions served "
        f"{served_again - promoted:.2f}s after it; healthy worst latency: writes "
        f"{write_stall:.3f}s, reads {read_stall:.3f}s; writes {dict(producers.statuses())}, reads "
        f"{dict(_statuses(readers.outcomes))}"
    )
    assert write_stall < HEALTHY_STALL_LIMIT_S
    assert read_stall < HEALTHY_STALL_LIMIT_S
    assert [o for o in readers.outcomes if o.status != 200 and o.partition in healthy] == []
    assert served_again - promoted < FAILOVER_FOLLOW_LIMIT_S
    assert producers.others() == []
    await asyncio.to_thread(cluster.wait_ready, 30)
    stored = await replay_topic(gateway, topic_name, PARTITIONS)
    assert duplicated(stored) == []


def _follows(replica: RedisNode, primary: RedisNode) -> bool:
    client = replica.client(socket_timeout=1.0)
    try:
        return int(client.info("replication")["master_port"]) == primary.address[1]
    finally:
        client.close()


def _statuses(outcomes: list[Outcome]) -> dict[int, int]:
    counts: dict[int, int] = {}
    for outcome in outcomes:
        counts[outcome.status] = counts.get(outcome.status, 0) + 1
    return counts
