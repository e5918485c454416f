"""The push row of bench/run.py: a push subscription drains a prefilled topic into a local
endpoint that answers at once (bench/push_receiver.py), timed until the group has settled."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import orjson
from deliver import create_topic, publish

from streamgate_devstack.ports import free_port

PUSH_RECEIVER = Path(__file__).resolve().parent / "push_receiver.py"
GROUP = "bench-push"
# the gateway's CPU reading before and after, and the text of their difference per message
CpuReadings = tuple[Callable[[], Any], Callable[[Any, Any, int], str]]


async def push_drain(base: str, messages: int, key_ordered: bool,
                     quiet: Callable[[], Awaitable[None]], cpu: CpuReadings) -> tuple[float, str]:
    """Prefill ``messages`` into 8 partitions, let ``quiet`` settle the machine, then time a push
    subscription (start earliest) from its creation until the receiver counted every message and
    the group shows nothing pending or unread: the rate and the row's note."""
    topic = "bench-push-keyed" if key_ordered else "bench-push"
    async with aiohttp.ClientSession() as http:
        await create_topic(http, base, topic)
        await publish(http, base, topic, messages)
    await quiet()
    port = free_port()
    receiver = await asyncio.create_subprocess_exec(
        sys.executable, str(PUSH_RECEIVER), "--port", str(port), "--total", str(messages),
        stdout=asyncio.subprocess.PIPE)
    reading, per_message = cpu
    try:
        assert receiver.stdout is not None
        assert (await receiver.stdout.readline()).strip() == b"READY"
        async with aiohttp.ClientSession() as http:
            before = reading()
            started = time.time()
            await put_push_subscription(http, base, topic, port, key_ordered)
            out, _ = await asyncio.wait_for(receiver.communicate(), 600)
            counted = orjson.loads(out.strip().splitlines()[-1])
            settled_at = await group_settled(http, base, topic, GROUP)
            after = reading()
            async with http.delete(f"{base}/v1/topics/{topic}/push/{GROUP}") as response:
                assert response.status == 204, await response.text()
    finally:
        if receiver.returncode is None:
            receiver.kill()
            await receiver.wait()
    elapsed = max(counted["last_ts"], settled_at) - started
    note = (f"{messages:,} messages, 8 partitions, one push subscription (start earliest, "
            f"batch_max_messages 100, max_in_flight 64, key_ordered {str(key_ordered).lower()}) "
            f"to bench/push_receiver.py (answers 204 at once, counts by a byte scan): "
            f"{counted['received']:,} received in {counted['requests']:,} requests, timed from "
            f"the subscription's creation until the group showed pending 0 and lag 0; "
            f"{per_message(before, after, messages)}")
    return min(counted["received"], messages) / max(elapsed, 1e-9), note


async def put_push_subscription(http: aiohttp.ClientSession, base: str, topic: str, port: int,
                                key_ordered: bool) -> None:
    """The push row's subscription, to the receiver on ``port``."""
    body = {"endpoint": f"http://127.0.0.1:{port}/hook", "start": "earliest",
            "batch_max_messages": 100, "max_in_flight": 64, "key_ordered": key_ordered}
    async with http.put(f"{base}/v1/topics/{topic}/push/{GROUP}", json=body) as response:
        assert response.status == 201, await response.text()


async def group_settled(http: aiohttp.ClientSession, base: str, topic: str, group: str,
                        timeout_s: float = 120.0) -> float:
    """When (wall clock) the group was first seen with nothing pending and nothing unread."""
    deadline = time.monotonic() + timeout_s
    while True:
        async with http.get(f"{base}/v1/groups/{group}", params={"topic": topic}) as response:
            doc = await response.json()
        if response.status == 200 and all(p["pending"] == 0 and p["lag"] == 0
                                          for p in doc["topics"][0]["partitions"]):
            return time.time()
        if time.monotonic() > deadline:
            raise RuntimeError(f"the push group never settled: {str(doc)[:200]}")
        await asyncio.sleep(0.02)
