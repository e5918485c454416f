"""A partition's only replica dies: acks=1 keeps working, acks=all answers 503 until the replica is
back."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import redis
from failure_cluster import (
    WAIT_TIMEOUT_MS,
    WRITE_DEADLINE_S,
    Client,
    GatewayFactory,
    create,
    log_key,
)
from failure_traffic import missing_acked, replay_topic

from streamgate_devstack import RedisClusterProcess, RedisNode


def replica_of(cluster: RedisClusterProcess, primary: RedisNode) -> RedisNode:
    for node in cluster.replicas:
        with node.client() as conn:
            if int(conn.info("replication")["master_port"]) == primary.port:
                return node
    raise AssertionError(f"primary {primary.port} has no replica")


def link_is_up(node: RedisNode) -> bool:
    try:
        with node.client(socket_timeout=0.5) as conn:
            return bool(conn.info("replication").get("master_link_status") == "up")
    except (redis.RedisError, OSError):
        return False


async def publish(client: Client, topic: str, value: str, acks: str) -> Any:
    body = {"acks": acks, "messages": [{"partition": 0, "value": value, "idempotency_key": value}]}
    return await client.post(f"/v1/topics/{topic}/messages", json=body)


async def test_acks_all_503_while_replica_down_and_acks_1_works(
        cluster_3x1: RedisClusterProcess, gateway_on: GatewayFactory, topic_name: str) -> None:
    cluster = cluster_3x1
    gateway = await gateway_on(cluster)
    await create(gateway, topic_name, 1)
    replica = replica_of(cluster, cluster.primary_for_key(log_key(topic_name, 0)))
    acked: dict[str, tuple[int, str]] = {}

    async def accepted(value: str, acks: str) -> None:
        response = await publish(gateway, topic_name, value, acks)
        assert response.status == 200, await response.text()
        result = (await response.json())["results"][0]
        acked[value] = (result["partition"], result["offset"])

    await accepted("before", "all")
    await asyncio.to_thread(replica.kill)
    for i in range(3):
        started = time.monotonic()
        refused = await publish(gateway, topic_name, f"during-all-{i}", "all")
        elapsed = time.monotonic() - started
        assert refused.status == 503, await refused.text()
        assert refused.content_type == "application/problem+json"
        assert int(refused.headers["Retry-After"]) >= 1
        assert elapsed < WRITE_DEADLINE_S + 1.0
        await accepted(f"during-one-{i}", "1")
    print(
        f"\n[replica kill -9] acks=all refused in {elapsed:.2f}s "
        f"(WAIT timeout {WAIT_TIMEOUT_MS} ms)"
    )

    restarted_at = time.monotonic()
    await asyncio.to_thread(replica.restart)
    await asyncio.to_thread(cluster.wait_ready, 30)
    assert link_is_up(replica)
    await accepted("during-all-0", "all")  # the refused message retried with its idempotency key
    back_after = time.monotonic() - restarted_at
    await accepted("after", "all")
    print(
        f"[replica kill -9] acks=all answered 200 again {back_after:.2f}s after the replica restart"
    )

    stored = await replay_topic(gateway, topic_name, 1)
    assert missing_acked(acked, stored) == []
    values = [value for _, value in stored[0]]
    assert values.count("during-all-0") == 1, "the retry of a 503 must not store the message twice"
