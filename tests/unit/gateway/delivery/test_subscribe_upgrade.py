"""The subscribe route's upgrade: a bad handshake is a 400 problem, a good one a served lean
socket."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
from aiohttp import WSMsgType
from aiohttp.test_utils import TestClient

from gateway.errors import PROBLEM_CONTENT_TYPE
from gateway.services import Services

Client = TestClient[Any, Any]


async def test_subscribe_without_websocket_handshake_is_400(client: Client, orders: str) -> None:
    response = await client.get(f"/v1/subscribe?topic={orders}")
    assert response.status == 400
    assert response.content_type == PROBLEM_CONTENT_TYPE
    assert "WebSocket" in (await response.json())["detail"]
    response = await client.get(f"/v1/subscribe?topic={orders}", headers={
        "Upgrade": "websocket", "Connection": "Upgrade", "Sec-WebSocket-Version": "13",
        "Sec-WebSocket-Key": "too-short"})
    assert response.status == 400
    assert "Sec-WebSocket-Key" in (await response.json())["detail"]


async def test_broadcast_socket_gets_assignment_messages_and_close(
        client: Client, orders: str, services: Services) -> None:
    async with client.ws_connect(f"/v1/subscribe?topic={orders}&from=earliest") as ws:
        assignment = orjson.loads((await ws.receive(timeout=5)).data)
        assert assignment == {"type": "assignment", "generation": 0, "partitions": [0, 1, 2]}
        assert len(services.subscriptions) == 1
        response = await client.post(
            f"/v1/topics/{orders}/messages",
            json={"messages": [{"key": f"k{i}", "value": i} for i in range(20)]},
        )
        assert response.status == 200
        values: list[int] = []
        while len(values) < 20:
            frame = orjson.loads((await ws.receive(timeout=5)).data)
            assert frame["type"] == "message"
            values.append(frame["value"])
        assert sorted(values) == list(range(20))
        await ws.send_str('{"type": "ack", "messages": [{"partition": 0, "offset": "1-0"}]}')
        error = orjson.loads((await ws.receive(timeout=5)).data)
        assert error["type"] == "error"
        assert "only meaningful in a group" in error["detail"]
    assert ws.close_code == 1000
    for _ in range(100):  # the cleanup runs once the connection is gone
        if not services.subscriptions:
            break
        await asyncio.sleep(0.01)
    assert not services.subscriptions
    assert services.connections.open_count("anonymous") == 0


async def test_shutdown_closes_subscriptions_with_1001(
    client: Client, orders: str, services: Services
) -> None:
    async with client.ws_connect(f"/v1/subscribe?topic={orders}") as ws:
        await ws.receive(timeout=5)  # assignment
        shutdown = asyncio.create_task(client.app.shutdown())
        message = await ws.receive(timeout=5)  # the client answers the close frame as it reads it
        assert message.type is WSMsgType.CLOSE
        assert message.data == 1001
        await asyncio.wait_for(shutdown, 2)  # well before the 5 s a silent client would take
    assert not services.subscriptions
