"""The partition owner's sweep acts for groups whose members are gone: dead letters and a dead
node's deliveries."""

from __future__ import annotations

import asyncio
import dataclasses
import signal
import time
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestClient
from group_readings import group_partitions, metric
from processes import GatewayProcess
from subscribers import subscribe, subscribe_at, wait_until

from gateway.app import create_app
from gateway.settings import GatewaySettings

Client = TestClient[Any, Any]


@pytest.fixture
async def sweeping_gateway(aiohttp_client: Any, gateway_settings: GatewaySettings) -> Client:
    settings = dataclasses.replace(gateway_settings, sweep_interval_s=0.2, owner_lease_ttl_s=2.0)
    client: Client = await aiohttp_client(create_app(settings))
    return client


async def dead_letters(client: Client, topic: str) -> list[dict[str, Any]]:
    response = await client.get(
        f"/v1/topics/{topic}.dlq/partitions/0/messages", params={"limit": "1000"}
    )
    if response.status == 404:
        return []
    return list((await response.json())["messages"])


async def eventually(check: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not await check():
        assert time.monotonic() < deadline, f"timed out after {timeout_s}s waiting for {what}"
        await asyncio.sleep(0.1)


async def test_memberless_group_dead_letters_exhausted_entries(
        sweeping_gateway: Client, topic_name: str) -> None:
    client = sweeping_gateway
    assert (
        await client.post("/v1/topics", json={"name": topic_name, "partitions": 1})
    ).status == 201
    member = await subscribe(client, "only", auto=False, topic=topic_name, group="g", mode="shared",
                             ack_timeout_ms=5000, max_deliveries=1)
    await wait_until(lambda: member.partitions == [0], what="the assignment")
    body = {"messages": [{"key": f"k{i}", "value": i} for i in range(20)]}
    assert (await client.post(f"/v1/topics/{topic_name}/messages", json=body)).status == 200
    await wait_until(lambda: len(member.messages) == 20, what="every message delivered once")
    await member.close()  # leaves without acking anything: nobody is left to reclaim them

    async def settled() -> bool:
        return len(await dead_letters(client, topic_name)) == 20 and \
            (await group_partitions(client, "g", topic_name))[0]["pending"] == 0

    await eventually(settled, 15, "the owner to dead-letter the exhausted entries")
    letters = await dead_letters(client, topic_name)
    assert sorted(m["value"] for m in letters) == list(range(20))
    assert {m["headers"]["sg-dlq-group"] for m in letters} == {"g"}
    assert {m["headers"]["sg-dlq-delivery-count"] for m in letters} == {"1"}
    metrics = await (await client.get("/metrics")).text()
    assert metric(metrics, "streamgate_group_dead_lettered_total", 'by="sweep"') == 20


async def test_entries_with_deliveries_left_stay_pending(
        sweeping_gateway: Client, topic_name: str) -> None:
    client = sweeping_gateway
    assert (
        await client.post("/v1/topics", json={"name": topic_name, "partitions": 1})
    ).status == 201
    first = await subscribe(client, "first", auto=False, topic=topic_name, group="g", mode="shared",
                            ack_timeout_ms=300, max_deliveries=3)
    await wait_until(lambda: first.partitions == [0], what="the assignment")
    body = {"messages": [{"value": i} for i in range(10)]}
    assert (await client.post(f"/v1/topics/{topic_name}/messages", json=body)).status == 200
    await wait_until(lambda: len(first.messages) == 10, what="every message delivered")
    await first.close()
    await asyncio.sleep(1.5)  # several sweeps with nobody subscribed
    assert await dead_letters(client, topic_name) == []
    assert (await group_partitions(client, "g", topic_name))[0]["pending"] == 10
    second = await subscribe(client, "second", topic=topic_name, group="g", mode="shared",
                             ack_timeout_ms=300, max_deliveries=3)
    await wait_until(lambda: len(second.messages) == 10, what="the next member to get them")
    assert {m.delivery_count for m in second.messages} == {2}
    await second.close()


async def test_dead_gateways_deliveries_are_redelivered_early(
        gateway_processes: list[GatewayProcess], topic_name: str) -> None:
    survivor_gw, doomed_gw = gateway_processes
    async with aiohttp.ClientSession() as http:
        async with http.post(
            f"{survivor_gw.url}/v1/topics", json={"name": topic_name, "partitions": 2}
        ) as r:
            assert r.status == 201
        params = {"topic": topic_name, "group": "g", "mode": "shared", "ack_timeout_ms": 120_000}
        doomed = await subscribe_at(http, doomed_gw.url, "doomed", auto=False, **params)
        await wait_until(lambda: doomed.partitions == [0, 1], what="the doomed member's assignment")
        body = {"messages": [{"key": f"k{i}", "value": i} for i in range(100)]}
        async with http.post(f"{survivor_gw.url}/v1/topics/{topic_name}/messages", json=body) as r:
            assert r.status == 200
        await wait_until(
            lambda: len(doomed.messages) == 100, what="the doomed member to hold every message"
        )
        doomed_gw.process.send_signal(signal.SIGKILL)
        doomed_gw.process.wait()
        killed_at = time.monotonic()
        late = await subscribe_at(http, survivor_gw.url, "late", **params)
        await wait_until(
            lambda: len({m.value for m in late.messages}) == 100,
            timeout_s=30,
            what="the dead gateway's un-acked messages, long before their 120 s ack timeout",
        )
        print(
            "a dead gateway's 100 un-acked messages redelivered "
            f"{time.monotonic() - killed_at:.1f}s after kill -9"
        )
        assert {m.delivery_count for m in late.messages} == {2}

        async def consumers_removed() -> bool:
            async with http.get(f"{survivor_gw.url}/metrics") as r:
                metrics = await r.text()
            assert metric(metrics, "streamgate_group_orphans_released_total") == 100
            return metric(metrics, "streamgate_group_consumers_removed_total") == 2

        await eventually(
            consumers_removed, 10, "the dead node's consumer to leave both partitions' group"
        )
        await late.close()
