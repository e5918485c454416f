"""A request body, and a request head, must arrive within ``body_read_timeout_s``: a trickling
client gets 408 and its connection closed, and nothing holds it open for long."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import orjson
import pytest
from aiohttp.test_utils import TestClient

from gateway.settings import GatewaySettings

Client = TestClient[Any, Any]
DEADLINE_S = 0.5


@pytest.fixture
def settings() -> GatewaySettings:
    return GatewaySettings(auth_mode="none", body_read_timeout_s=DEADLINE_S)


async def read_until_closed(reader: asyncio.StreamReader, limit_s: float) -> bytes:
    received = b""
    async with asyncio.timeout(limit_s):
        while chunk := await reader.read(65536):
            received += chunk
    return received


async def test_trickling_body_is_408_and_closed(client: Client, orders: str) -> None:
    reader, writer = await asyncio.open_connection(client.host, client.port)
    writer.write(
        (
            f"POST /v1/topics/{orders}/messages HTTP/1.1\r\nHost: x\r\n"
            "Content-Type: application/json\r\n"
            "Content-Length: 1000\r\n\r\n{"
        ).encode()
    )
    started = time.monotonic()

    async def trickle() -> None:
        while True:
            await asyncio.sleep(0.1)
            writer.write(b" ")

    trickling = asyncio.create_task(trickle())
    try:
        async with asyncio.timeout(10):
            received = await reader.read(65536)
        # the answer is in: stop writing, or a byte sent after the gateway closed makes the
        # kernel reset the connection, and the rest of the answer with it
        trickling.cancel()
        with contextlib.suppress(ConnectionResetError):
            received += await read_until_closed(reader, 10)
    finally:
        trickling.cancel()
        writer.close()
    elapsed = time.monotonic() - started
    head, _, body = received.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408"), head
    assert b"application/problem+json" in head
    assert orjson.loads(body)["type"].endswith("/request-timeout")
    assert DEADLINE_S <= elapsed < DEADLINE_S + 4, (
        "closed by the deadline (plus the short lingering read)"
    )


async def test_complete_body_keeps_the_connection(client: Client, orders: str) -> None:
    for _ in range(2):  # the second request goes over the same kept-alive connection
        response = await client.post(
            f"/v1/topics/{orders}/messages", json={"messages": [{"value": 1}]}
        )
        assert response.status == 200


async def test_unfinished_request_head_is_closed_at_the_deadline(client: Client) -> None:
    reader, writer = await asyncio.open_connection(client.host, client.port)
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ")
    started = time.monotonic()
    try:
        received = await read_until_closed(reader, 10)
    finally:
        writer.close()
    assert received == b""
    assert time.monotonic() - started < DEADLINE_S + 2
