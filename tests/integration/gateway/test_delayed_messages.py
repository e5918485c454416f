"""Delayed messages end to end: they appear when due, once, in due order, also when their owner
dies."""

from __future__ import annotations

import asyncio
import signal
import time
from collections import Counter
from typing import Any

import aiohttp
from aiohttp.test_utils import TestClient
from processes import GatewayProcess

Client = TestClient[Any, Any]


async def all_values(http: Any, base: str, topic: str, partitions: int) -> list[Any]:
    values = []
    for partition in range(partitions):
        async with http.get(f"{base}/v1/topics/{topic}/partitions/{partition}/messages",
                            params={"limit": "1000"}) as response:
            values += [m["value"] for m in (await response.json())["messages"]]
    return values


async def test_delayed_messages_join_the_stream_when_due_in_due_order(
    gateway: Client, topic_name: str
) -> None:
    assert (
        await gateway.post("/v1/topics", json={"name": topic_name, "partitions": 1})
    ).status == 201
    now_ms = int(time.time() * 1000)
    body = {"messages": [{"value": "third", "deliver_at_ms": now_ms + 1500},
                         {"value": "first", "delay_ms": 700},
                         {"value": "second", "deliver_at_ms": now_ms + 1100}]}
    results = (
        await (await gateway.post(f"/v1/topics/{topic_name}/messages", json=body)).json()
    )["results"]
    assert [r["offset"] for r in results] == [None, None, None]
    page = await (await gateway.get(f"/v1/topics/{topic_name}/partitions/0/messages")).json()
    assert page["messages"] == []
    seen_at: dict[str, float] = {}
    deadline = time.monotonic() + 10
    while len(seen_at) < 3 and time.monotonic() < deadline:
        page = await (await gateway.get(f"/v1/topics/{topic_name}/partitions/0/messages")).json()
        for message in page["messages"]:
            seen_at.setdefault(message["value"], time.time() * 1000)
        await asyncio.sleep(0.02)
    page = await (await gateway.get(f"/v1/topics/{topic_name}/partitions/0/messages")).json()
    assert [m["value"] for m in page["messages"]] == ["first", "second", "third"]
    lateness = {
        "first": seen_at["first"] - (now_ms + 700),
        "third": seen_at["third"] - (now_ms + 1500),
    }
    assert all(-50 <= late < 1000 for late in lateness.values()), lateness
    assert page["messages"][0]["timestamp_ms"] >= now_ms + 700


async def test_delayed_messages_fire_once_when_the_owner_dies(
        gateway_processes: list[GatewayProcess], topic_name: str) -> None:
    survivor, doomed = gateway_processes
    partitions = 8
    async with aiohttp.ClientSession() as http:
        async with http.post(
            f"{survivor.url}/v1/topics", json={"name": topic_name, "partitions": partitions}
        ) as r:
            assert r.status == 201
        body = {
            "messages": [
                {"value": i, "partition": i % partitions, "delay_ms": 2500 + (i % 7) * 100}
                for i in range(200)
            ]
        }
        async with http.post(
            f"{doomed.url}/v1/topics/{topic_name}/messages", json=body
        ) as response:
            assert response.status == 200
        await asyncio.sleep(0.5)
        doomed.process.send_signal(signal.SIGKILL)
        doomed.process.wait()
        deadline = time.monotonic() + 15
        values: list[Any] = []
        while time.monotonic() < deadline:
            values = await all_values(http, survivor.url, topic_name, partitions)
            if len(values) >= 200:
                break
            await asyncio.sleep(0.2)
        await asyncio.sleep(1.0)
        values = await all_values(http, survivor.url, topic_name, partitions)
    counts = Counter(values)
    assert set(counts) == set(range(200)), f"missing: {sorted(set(range(200)) - set(counts))[:10]}"
    assert max(counts.values()) == 1, "a delayed message fired twice"
