"""A subscriber that stops reading is closed with 4008 and its cursor, and resumes without gap or
duplicate."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

from aiohttp.test_utils import TestClient
from subscribers import read_frames, subscribe, upgrade, wait_until

from gateway.app import create_app
from gateway.settings import GatewaySettings

Client = TestClient[Any, Any]
VALUE = "v" * 100_000
MESSAGES = 120


async def test_slow_client_is_closed_with_cursor_and_resumes(
        aiohttp_client: Any, gateway_settings: GatewaySettings, topic_name: str) -> None:
    settings = dataclasses.replace(gateway_settings, slow_client_timeout_s=1.0)
    client: Client = await aiohttp_client(create_app(settings))
    assert (
        await client.post("/v1/topics", json={"name": topic_name, "partitions": 2})
    ).status == 201
    for start in range(0, MESSAGES, 20):
        batch = [{"value": {"n": n, "pad": VALUE}} for n in range(start, start + 20)]
        response = await client.post(f"/v1/topics/{topic_name}/messages", json={"messages": batch})
        assert response.status == 200
    sock = await asyncio.to_thread(upgrade, client.host, client.port,
                                   f"/v1/subscribe?topic={topic_name}&from=earliest&max_in_flight=50")
    try:
        await asyncio.sleep(4)  # never read: the server's writes back up and it gives up on us
        frames, code, reason = await asyncio.to_thread(read_frames, sock)
    finally:
        sock.close()
    assert code == 4008
    assert reason.startswith("slow consumer; from=")
    got_before = [f["value"]["n"] for f in frames if f["type"] == "message"]
    assert len(got_before) < MESSAGES
    cursor = reason.removeprefix("slow consumer; from=")
    [last_word] = [f for f in frames if f["type"] == "error"]
    assert last_word["code"] == "slow-consumer"
    assert last_word["cursor"] == cursor
    resumed = await subscribe(client, "resumed", topic=topic_name, **{"from": cursor})
    await wait_until(lambda: len(got_before) + len(resumed.messages) >= MESSAGES, what="the rest")
    await asyncio.sleep(0.3)
    got_after = [m.value["n"] for m in resumed.messages]
    assert sorted(got_before + got_after) == list(range(MESSAGES)), (
        "gap or duplicate across the resume"
    )
    await resumed.close()
