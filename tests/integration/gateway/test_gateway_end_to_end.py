"""The whole path on real servers: HTTP -> gateway -> Redis Cluster (AOF, replicas) and etcd."""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp.test_utils import TestClient
from processes import until_ready

from gateway.app import create_app
from gateway.settings import GatewaySettings
from partitioner.hashing import partition_for

Client = TestClient[Any, Any]


async def create(client: Client, name: str, partitions: int = 6) -> None:
    response = await client.post("/v1/topics", json={"name": name, "partitions": partitions})
    assert response.status == 201, await response.text()


async def publish(
    client: Client, topic: str, messages: list[dict[str, Any]], acks: str = "1",
    headers: dict[str, str] | None = None,
) -> Any:
    return await client.post(
        f"/v1/topics/{topic}/messages", json={"messages": messages, "acks": acks}, headers=headers
    )


async def test_published_messages_replay_in_order_from_every_partition(
    gateway: Client, topic_name: str
) -> None:
    await create(gateway, topic_name)
    messages = [{"key": f"user-{i % 20}", "value": {"seq": i}} for i in range(300)]
    response = await publish(gateway, topic_name, messages, acks="all")
    assert response.status == 200, await response.text()
    results = (await response.json())["results"]
    assert [r["partition"] for r in results] == [
        partition_for(f"user-{i % 20}".encode(), 6) for i in range(300)
    ]
    replayed: dict[int, list[int]] = {}
    for partition in range(6):
        page = await (await gateway.get(
            f"/v1/topics/{topic_name}/partitions/{partition}/messages?limit=1000")).json()
        replayed[partition] = [m["value"]["seq"] for m in page["messages"]]
    expected = {p: [i for i, r in enumerate(results) if r["partition"] == p] for p in range(6)}
    assert replayed == expected


async def test_describe_reports_lengths_and_bounds_from_redis(
    gateway: Client, topic_name: str
) -> None:
    await create(gateway, topic_name, partitions=2)
    results = (
        await (
            await publish(gateway, topic_name, [{"value": i, "partition": 1} for i in range(5)])
        ).json()
    )["results"]
    body = await (await gateway.get(f"/v1/topics/{topic_name}")).json()
    assert body["partition_details"][0]["length"] == 0
    expected = {"partition": 1, "length": 5, "first_offset": results[0]["offset"],
                "last_offset": results[-1]["offset"]}
    assert {k: body["partition_details"][1][k] for k in expected} == expected


async def test_idempotent_retry_on_the_cluster_is_a_duplicate(
    gateway: Client, topic_name: str
) -> None:
    await create(gateway, topic_name)
    batch = [{"value": "a", "idempotency_key": "k1"}, {"value": "b", "idempotency_key": "k2"}]
    first = (await (await publish(gateway, topic_name, batch, acks="all")).json())["results"]
    retry = (await (await publish(gateway, topic_name, batch, acks="all")).json())["results"]
    assert [(r["partition"], r["offset"]) for r in retry] == [
        (r["partition"], r["offset"]) for r in first
    ]
    assert [r["duplicate"] for r in retry] == [True, True]
    details = (await (await gateway.get(f"/v1/topics/{topic_name}")).json())["partition_details"]
    assert sum(d["length"] for d in details) == 2


async def test_retried_batch_is_answered_as_duplicates(gateway: Client, topic_name: str) -> None:
    await create(gateway, topic_name)
    batch = [{"value": i, **({"key": f"k{i}"} if i % 3 else {})} for i in range(30)]
    header = {"Idempotency-Key": "batch-1"}
    first = (await (await publish(gateway, topic_name, batch, "all", header)).json())["results"]
    retry = (await (await publish(gateway, topic_name, batch, "all", header)).json())["results"]
    assert [(r["partition"], r["offset"]) for r in retry] == [
        (r["partition"], r["offset"]) for r in first]
    assert all(r["duplicate"] for r in retry)
    assert not any(r["duplicate"] for r in first)
    assert len({r["partition"] for r, m in zip(first, batch, strict=True) if "key" not in m}) == 1
    changed = await publish(gateway, topic_name, [{"value": 0}, {"value": 99}], "1", header)
    assert changed.status == 422
    assert (await changed.json())["type"].endswith("idempotency-key-reused")
    details = (await (await gateway.get(f"/v1/topics/{topic_name}")).json())["partition_details"]
    assert sum(d["length"] for d in details) == 30


async def test_acks_all_with_the_replica_stopped_is_503_never_success(
        gateway: Client, topic_name: str, redis_cluster: Any) -> None:
    await create(gateway, topic_name, partitions=1)
    primary = redis_cluster.primary_for_key(f"sg:{{{topic_name}/0}}:log")
    replicas = [r for r in redis_cluster.replicas
                if int(r.client().info("replication")["master_port"]) == primary.port]
    assert replicas, "the partition's primary has no replica"
    for replica in replicas:
        replica.pause()
    try:
        response = await publish(gateway, topic_name, [{"value": 1}], acks="all")
        assert response.status == 503
        assert int(response.headers["Retry-After"]) >= 1
        assert response.content_type == "application/problem+json"
        leader_only = await publish(gateway, topic_name, [{"value": 2}], acks="1")
        assert leader_only.status == 200
    finally:
        for replica in replicas:
            replica.resume()
    for _ in range(50):
        recovered = await publish(gateway, topic_name, [{"value": 3}], acks="all")
        if recovered.status == 200:
            break
        await asyncio.sleep(0.2)
    assert recovered.status == 200


async def test_topic_created_on_one_gateway_is_published_on_another(
    aiohttp_client: Any, gateway: Client, gateway_settings: GatewaySettings, topic_name: str
) -> None:
    other: Client = await aiohttp_client(create_app(gateway_settings))
    await create(gateway, topic_name)
    response = await publish(other, topic_name, [{"value": "hello"}])
    assert response.status == 200
    await other.delete(f"/v1/topics/{topic_name}")
    for _ in range(50):
        gone = await publish(gateway, topic_name, [{"value": "late"}])
        if gone.status == 404:
            break
        await asyncio.sleep(0.05)
    assert gone.status == 404


async def test_readyz_is_ready_on_a_healthy_stack(gateway: Client) -> None:
    await until_ready(gateway)
    response = await gateway.get("/readyz")
    assert response.status == 200, await response.text()
    assert set((await response.json())["checks"]) == {"redis", "etcd", "topic_watch", "duties"}
