"""Acks under a frozen (SIGSTOP) Redis primary: a member's ack frames settle the partitions of
healthy primaries at once, a part that fails on the frozen shard is reported with its partition,
and the same frame sent again once the shard is back settles it."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from failure_cluster import WRITE_DEADLINE_S, Client, GatewayFactory
from test_frozen_primary import log_key

from streamgate_devstack import RedisClusterProcess, RedisNode
from tests.own_cluster import own_cluster

PARTITIONS = 6
GROUP = "workers"
# no failover during the freeze (the gateway's write deadline, WRITE_DEADLINE_S, fails an XACK to
# the frozen shard well within it): the shard comes back as it was
NODE_TIMEOUT_MS = 30_000
assert WRITE_DEADLINE_S * 1000 < NODE_TIMEOUT_MS / 4


@pytest.fixture
def cluster(tmp_path: Path, devstack_binaries: None) -> Any:
    with own_cluster(tmp_path / "redis", cluster_node_timeout_ms=NODE_TIMEOUT_MS) as started:
        yield started


def pending(node: RedisNode, topic: str, partition: int) -> int:
    client = node.client(socket_timeout=1.0)
    try:
        return int(client.xpending(log_key(topic, partition), GROUP)["pending"])
    finally:
        client.close()


async def frames_of(ws: Any, kind: str, count: int) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    while len(found) < count:
        frame = await ws.receive_json(timeout=20)
        if frame["type"] == kind:
            found.append(frame)
    return found


def ack_frame(refs: list[tuple[int, str]]) -> dict[str, Any]:
    return {"type": "ack", "messages": [{"partition": p, "offset": o} for p, o in refs]}


async def test_a_frozen_shard_holds_up_no_ack_of_a_healthy_one_and_a_resend_settles_it(
        cluster: RedisClusterProcess, gateway_on: GatewayFactory, topic_name: str) -> None:
    gateway: Client = await gateway_on(cluster)
    assert (await gateway.post("/v1/topics", json={"name": topic_name,
                                                   "partitions": PARTITIONS})).status == 201
    body = {"messages": [{"value": {"n": n}, "partition": n % PARTITIONS}
                         for n in range(2 * PARTITIONS)]}
    assert (await gateway.post(f"/v1/topics/{topic_name}/messages", json=body)).status == 200
    victim = cluster.primary_for_key(log_key(topic_name, 0))
    primaries = {p: cluster.primary_for_key(log_key(topic_name, p)) for p in range(PARTITIONS)}
    frozen = [p for p, node in primaries.items() if node is victim]
    healthy = [p for p in range(PARTITIONS) if p not in frozen]
    ws = await gateway.ws_connect("/v1/subscribe", params={
        "topic": topic_name, "group": GROUP, "from": "earliest", "ack_timeout_ms": "60000"})
    refs = [(m["partition"], m["offset"]) for m in await frames_of(ws, "message", 2 * PARTITIONS)]
    first = [min(r for r in refs if r[0] == p) for p in range(PARTITIONS)]
    second = [max(r for r in refs if r[0] == p) for p in range(PARTITIONS)]
    await asyncio.to_thread(victim.pause)
    try:
        await ws.send_json(ack_frame(first))  # names the frozen shard's partitions first
        await ws.send_json(ack_frame([r for r in second if r[0] in healthy]))
        errors = await frames_of(ws, "error", len(frozen))
        # while the shard is still frozen: every healthy partition settled, both frames
        assert [pending(primaries[p], topic_name, p) for p in healthy] == [0] * len(healthy)
    finally:
        await asyncio.to_thread(victim.resume)
    assert sorted(e["code"] for e in errors) == ["unavailable"] * len(frozen)
    assert sorted(e["partition"] for e in errors) == frozen
    await ws.send_json(ack_frame(first + [r for r in second if r[0] in frozen]))
    for _ in range(200):
        if not any(pending(primaries[p], topic_name, p) for p in frozen):
            break
        await asyncio.sleep(0.05)
    else:
        raise AssertionError("the frame sent again did not settle the frozen shard's part")
    await ws.close()
