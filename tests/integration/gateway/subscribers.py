"""A test subscriber: records every frame it gets and acks on request."""

from __future__ import annotations

import asyncio
import base64
import os
import socket
import struct
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson
from aiohttp.test_utils import TestClient


@dataclass
class Received:
    partition: int
    offset: str
    key: str | None
    value: Any
    headers: dict[str, str]
    delivery_count: int
    at: float
    generation: int
    acked: bool


@dataclass
class Subscriber:
    """Collects message frames; ``auto`` acks each message as it arrives."""

    name: str
    ws: aiohttp.ClientWebSocketResponse
    auto: bool = True
    messages: list[Received] = field(default_factory=list)
    assignments: list[tuple[int, list[int], float]] = field(default_factory=list)
    errors: list[dict[str, Any]] = field(default_factory=list)
    close_code: int | None = None
    close_reason: str = ""
    _task: asyncio.Task[None] | None = None

    @property
    def generation(self) -> int:
        return self.assignments[-1][0] if self.assignments else -1

    @property
    def partitions(self) -> list[int]:
        return self.assignments[-1][1] if self.assignments else []

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        while True:
            frame = await self.ws.receive()
            if frame.type is aiohttp.WSMsgType.TEXT:
                await self._handle(frame.json())
                continue
            if frame.type is aiohttp.WSMsgType.CLOSE:
                self.close_reason = frame.extra or ""
            break
        self.close_code = self.ws.close_code

    async def _handle(self, doc: dict[str, Any]) -> None:
        kind = doc["type"]
        if kind == "assignment":
            self.assignments.append((doc["generation"], doc["partitions"], time.monotonic()))
        elif kind == "error":
            self.errors.append(doc)
        elif kind == "message":
            assert doc["partition"] in self.partitions, (
                f"{self.name} got partition {doc['partition']} "
                f"outside its assignment {self.partitions}"
            )
            self.messages.append(
                Received(
                    doc["partition"], doc["offset"], doc["key"], doc.get("value"), doc["headers"],
                    doc["delivery_count"], time.monotonic(), self.generation, self.auto,
                )
            )
            if self.auto:
                await self.ack([(doc["partition"], doc["offset"])])

    async def ack(self, refs: list[tuple[int, str]]) -> None:
        await self._settle("ack", refs)

    async def nack(self, refs: list[tuple[int, str]], delay_ms: int = 0) -> None:
        await self._settle("nack", refs, delay_ms=delay_ms)

    async def extend(self, refs: list[tuple[int, str]]) -> None:
        await self._settle("extend", refs)

    async def _settle(self, kind: str, refs: list[tuple[int, str]], **extra: Any) -> None:
        await self.ws.send_json(
            {"type": kind, "messages": [{"partition": p, "offset": o} for p, o in refs], **extra}
        )

    async def close(self) -> None:
        await self.ws.close()
        if self._task is not None:
            await asyncio.wait_for(self._task, 10)


def query_pairs(params: dict[str, Any]) -> list[tuple[str, str]]:
    query = {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in params.items()
             if not isinstance(v, list)}
    return list(query.items()) + [
        (k, item) for k, v in params.items() if isinstance(v, list) for item in v
    ]


async def subscribe_at(http: aiohttp.ClientSession, base_url: str, name: str, auto: bool = True,
                       **params: Any) -> Subscriber:
    """Subscribe through a gateway process at ``base_url``."""
    ws = await http.ws_connect(f"{base_url}/v1/subscribe", params=query_pairs(params))
    subscriber = Subscriber(name, ws, auto=auto)
    subscriber.start()
    return subscriber


async def subscribe(
    client: TestClient[Any, Any], name: str, auto: bool = True, **params: Any
) -> Subscriber:
    ws = await client.ws_connect("/v1/subscribe", params=query_pairs(params))
    subscriber = Subscriber(name, ws, auto=auto)
    subscriber.start()
    return subscriber


async def wait_until(predicate: Any, timeout_s: float = 20.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")


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
