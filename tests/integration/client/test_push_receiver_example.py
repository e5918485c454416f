"""examples/push_receiver.py, run as a user would: it accepts a signed push request and prints
its message, and refuses an unsigned one."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from gateway.push.signing import new_secret, secret_key, webhook_headers
from streamgate_devstack.ports import free_port

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "push_receiver.py"
DEADLINE_S = 30.0


async def line_containing(stream: asyncio.StreamReader, text: str) -> str:
    """The first line of the stream containing `text` (within the deadline)."""
    async with asyncio.timeout(DEADLINE_S):
        while line := (await stream.readline()).decode():
            if text in line:
                return line
    raise AssertionError(f"the receiver ended without printing {text!r}")


@pytest.fixture
def secret() -> str:
    return new_secret()


@pytest.fixture
async def receiver(secret: str) -> AsyncIterator[tuple[str, asyncio.StreamReader]]:
    port = free_port()
    env = {**os.environ, "STREAMGATE_PUSH_SECRET": secret,
           "PYTHONPATH": os.pathsep.join([str(ROOT / "client"), str(ROOT)])}
    process = await asyncio.create_subprocess_exec(
        sys.executable, str(EXAMPLE), "--port", str(port), env=env,
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
    )
    assert process.stdout is not None
    try:
        await line_containing(process.stdout, f":{port}")
        yield f"http://127.0.0.1:{port}/hooks", process.stdout
    finally:
        os.kill(process.pid, signal.SIGTERM)
        await process.wait()


async def test_a_signed_push_is_answered_204_and_its_message_printed(
    receiver: tuple[str, asyncio.StreamReader], secret: str,
) -> None:
    url, output = receiver
    message = {"topic": "orders", "partition": 2, "offset": "1700000000000-0", "key": "alice",
               "value": {"total": 42}, "headers": {}, "timestamp_ms": 1700000000000,
               "delivery_count": 1}
    body = json.dumps({"subscription": {"topic": "orders", "group": "hooks"},
                       "messages": [message]}).encode()
    headers = {"Content-Type": "application/json",
               **webhook_headers([secret_key(secret)], "orders:2:1700000000000-0", body)}
    async with (aiohttp.ClientSession() as session,
                session.post(url, data=body, headers=headers) as response):
        assert response.status == 204
    printed = await line_containing(output, "orders/2@1700000000000-0")
    assert "key=alice" in printed
    assert '"total": 42' in printed


async def test_an_unsigned_push_is_refused_with_401(
    receiver: tuple[str, asyncio.StreamReader],
) -> None:
    url, _ = receiver
    async with (aiohttp.ClientSession() as session,
                session.post(url, json={"messages": []}) as response):
        assert response.status == 401
