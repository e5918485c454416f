"""Gateway processes dying or stopping: members move, un-acked messages come back, clients are
told."""

from __future__ import annotations

import asyncio
import signal
from typing import Any

import aiohttp
from processes import GatewayProcess
from subscribers import subscribe_at, wait_until


async def create_topic(http: aiohttp.ClientSession, url: str, topic: str, partitions: int) -> None:
    async with http.post(f"{url}/v1/topics",
                         json={"name": topic, "partitions": partitions}) as r:
        assert r.status == 201


async def test_killed_gateway_loses_members_but_no_messages(
        gateway_processes: list[GatewayProcess], topic_name: str) -> None:
    survivor_gw, doomed_gw = gateway_processes
    async with aiohttp.ClientSession() as http:
        await create_topic(http, survivor_gw.url, topic_name, 6)
        survivor = await subscribe_at(
            http, survivor_gw.url, "survivor", topic=topic_name, group="g"
        )
        doomed = await subscribe_at(
            http, doomed_gw.url, "doomed", auto=False, topic=topic_name, group="g"
        )
        await wait_until(lambda: len(survivor.partitions) == 3 and len(doomed.partitions) == 3,
                         what="a 3/3 split over the two gateways")
        body = {"messages": [{"key": f"k{i}", "value": i} for i in range(600)]}
        async with http.post(f"{survivor_gw.url}/v1/topics/{topic_name}/messages", json=body) as r:
            assert r.status == 200
        await wait_until(
            lambda: len(doomed.messages) >= 50, what="the doomed member to hold messages"
        )
        held = {m.value for m in doomed.messages}
        doomed_gw.process.send_signal(signal.SIGKILL)
        doomed_gw.process.wait()
        await wait_until(lambda: len(survivor.partitions) == 6, timeout_s=15,
                         what="the survivor to take every partition after the lease TTL")
        await wait_until(
            lambda: {m.value for m in survivor.messages} >= set(range(600)),
            timeout_s=20,
            what="every message, including the dead gateway's un-acked ones",
        )
        assert held <= {m.value for m in survivor.messages}
        redelivered = [m for m in survivor.messages if m.value in held]
        assert all(m.delivery_count >= 2 for m in redelivered), (
            "takeover must count the earlier delivery"
        )
        await survivor.close()


async def test_graceful_shutdown_closes_subscriptions_with_1001(
        gateway_processes: list[GatewayProcess], topic_name: str) -> None:
    gateway = gateway_processes[0]
    async with aiohttp.ClientSession() as http:
        await create_topic(http, gateway.url, topic_name, 1)
        member: Any = await subscribe_at(http, gateway.url, "m", topic=topic_name, group="g")
        await wait_until(lambda: member.partitions == [0], what="assignment")
        gateway.process.send_signal(signal.SIGTERM)
        await wait_until(
            lambda: member.close_code is not None, timeout_s=15, what="the socket to close"
        )
        assert member.close_code == 1001
        await asyncio.to_thread(gateway.process.wait, 15)
        assert gateway.process.returncode == 0


async def test_graceful_shutdown_answers_publish_frames_in_flight_then_closes_with_1001(
        gateway_processes: list[GatewayProcess], topic_name: str) -> None:
    gateway = gateway_processes[0]
    async with aiohttp.ClientSession() as http:
        await create_topic(http, gateway.url, topic_name, 1)
        answers: dict[str, Any] = {}
        async with http.ws_connect(f"{gateway.url}/v1/publish") as ws:
            assert (await ws.receive_json(timeout=5))["type"] == "ready"
            for n in range(100):
                await ws.send_json({"type": "publish", "id": str(n), "topic": topic_name,
                                    "acks": "all", "messages": [{"value": n}]})
            gateway.process.send_signal(signal.SIGTERM)
            while (frame := await ws.receive(timeout=15)).type is aiohttp.WSMsgType.TEXT:
                answer = frame.json()
                answers[answer["id"]] = answer
            assert (frame.type, ws.close_code) == (aiohttp.WSMsgType.CLOSE, 1001)
        await asyncio.to_thread(gateway.process.wait, 15)
        assert gateway.process.returncode == 0
    published = {int(i) for i, a in answers.items() if a["type"] == "published"}
    assert published, answers
    # what was answered was written; the rest (refused while stopping, or never read) is the
    # client's to send again
    assert all(a["type"] in ("published", "problem") for a in answers.values())
    survivor = gateway_processes[1]
    async with aiohttp.ClientSession() as http, http.get(
            f"{survivor.url}/v1/topics/{topic_name}/partitions/0/messages",
            params={"limit": "1000"}) as r:
        stored = {m["value"] for m in (await r.json())["messages"]}
    assert published <= stored
