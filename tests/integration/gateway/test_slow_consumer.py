"""A subscriber that stops reading is closed with 4008 and its cursor, and resumes without gap or
duplicate."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import os
import socket
import struct
from typing import Any

import orjson
from aiohttp.test_utils import TestClient
from subscribers import subscribe, wait_until

from gateway.app import create_app
from gateway.settings import GatewaySettings

Client = TestClient[Any, Any]
VALUE = "v" * 100_000
MESSAGES = 120


def upgrade(host: str, port: int, path: str) -> socket.socket:
    """A raw WebSocket client socket with a tiny receive buffer, past the handshake."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect((host, port))
    key = base64.b64encode(os.urandom(16)).decode()
    sock.sendall(
        (
            f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\nConnection: "
            f"Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
        ).encode()
    )
    head = b""
    while b"\r\n\r\n" not in head:
        head += sock.recv(1)
    assert head.startswith(b"HTTP/1.1 101"), head
    return sock


def read_frames(sock: socket.socket) -> tuple[list[dict[str, Any]], int, str]:
    """Every text frame up to the close frame, then the close code and reason."""
    sock.settimeout(20)
    buffer = bytearray()

    def take(n: int) -> bytes:
        while len(buffer) < n:
            chunk = sock.recv(1 << 20)
            assert chunk, "connection ended without a close frame"
            buffer.extend(chunk)
        data = bytes(buffer[:n])
        del buffer[:n]
        return data

    frames: list[dict[str, Any]] = []
    while True:
        first, second = take(2)
        length = second & 0x7F
        if length == 126:
            (length,) = struct.unpack("!H", take(2))
        elif length == 127:
            (length,) = struct.unpack("!Q", take(8))
        payload, opcode = take(length), first & 0x0F
        if opcode == 1:
            frames.append(orjson.loads(payload))
        elif opcode == 8:
            return frames, struct.unpack("!H", payload[:2])[0], payload[2:].decode()


async def test_slow_broadcast_client_is_closed_with_cursor_and_resumes_exactly(
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
