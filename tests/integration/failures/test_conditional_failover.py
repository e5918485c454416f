"""A conditional append across a primary's kill -9: the position read before the kill still
admits the writer that read it, refuses a stale one, and a retry of the write is a duplicate."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from failure_cluster import Client, GatewayFactory

from streamgate_devstack import RedisClusterProcess

RETRY_FOR_S = 30.0


async def append(gateway: Client, topic: str, value: str, expected: str,
                 idempotency_key: str | None = None) -> tuple[int, dict[str, Any]]:
    message: dict[str, Any] = {"key": "order-7", "value": value, "expected_offset": expected}
    if idempotency_key is not None:
        message["idempotency_key"] = idempotency_key
    response = await gateway.post(f"/v1/topics/{topic}/messages",
                                  json={"acks": "all", "messages": [message]})
    return response.status, await response.json()


async def until_answered(gateway: Client, topic: str, value: str, expected: str,
                         idempotency_key: str) -> tuple[int, dict[str, Any]]:
    """The request retried, as a client does, while the failover answers 503."""
    deadline = time.monotonic() + RETRY_FOR_S
    while True:
        status, body = await append(gateway, topic, value, expected, idempotency_key)
        if status != 503 or time.monotonic() > deadline:
            return status, body
        await asyncio.sleep(0.2)


async def test_positions_read_before_failover_still_decide_after(
        cluster_3x2: RedisClusterProcess, gateway_on: GatewayFactory, topic_name: str) -> None:
    gateway = await gateway_on(cluster_3x2)
    created = await gateway.post("/v1/topics", json={"name": topic_name, "partitions": 1,
                                                     "key_index": True})
    assert created.status == 201
    status, body = await append(gateway, topic_name, "created", "none")
    assert status == 200, body
    first = body["results"][0]["offset"]
    read = await (await gateway.get(f"/v1/topics/{topic_name}/history",
                                    params={"key": "order-7", "order": "desc",
                                            "limit": "1"})).json()
    assert [m["offset"] for m in read["messages"]] == [first]

    victim = cluster_3x2.primary_for_key(f"sg:{{{topic_name}/0}}:log")
    await asyncio.to_thread(victim.kill)
    try:
        status, body = await until_answered(gateway, topic_name, "paid", first, "pay-1")
        assert status == 200, body
        paid = body["results"][0]
        assert paid["duplicate"] is False
        stale_status, stale = await until_answered(gateway, topic_name, "cancelled", first,
                                                   "cancel-1")
        assert stale_status == 409, stale
        assert (stale["expected"], stale["current"]) == (first, paid["offset"])
        status, again = await until_answered(gateway, topic_name, "paid", first, "pay-1")
        assert status == 200, again
        assert again["results"][0] == {**paid, "duplicate": True}
    finally:
        await asyncio.to_thread(victim.start)
    history = await (await gateway.get(f"/v1/topics/{topic_name}/history",
                                       params={"key": "order-7"})).json()
    assert [m["value"] for m in history["messages"]] == ["created", "paid"]
