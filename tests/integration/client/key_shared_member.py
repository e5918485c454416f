"""A member of a key_shared group for the console's browser test, on an event loop in a thread of
its own (the test's thread runs Playwright's): it nacks the first delivery of each message whose
key starts with ``poison`` (so that key parks) and acks everything else."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import aiohttp

POISON = "poison"


async def serve_member(url: str, params: dict[str, str], received: list[dict[str, Any]],
                       joined: asyncio.Event) -> None:
    async with aiohttp.ClientSession() as session, session.ws_connect(
            url, params=params) as ws:
        joined.set()
        async for frame in ws:
            if frame.type is not aiohttp.WSMsgType.TEXT:
                return
            doc = frame.json()
            if doc["type"] != "message":
                continue
            received.append(doc)
            fails = str(doc["key"]).startswith(POISON) and doc["delivery_count"] == 1
            await ws.send_json({"type": "nack" if fails else "ack", "messages": [
                {"partition": doc["partition"], "offset": doc["offset"]}]})


async def joined_member(url: str, params: dict[str, str],
                        received: list[dict[str, Any]]) -> asyncio.Task[None]:
    """The member's task, once its socket is open (raising why when it could not connect)."""
    joined = asyncio.Event()
    task = asyncio.create_task(serve_member(url, params, received, joined))
    waiting = asyncio.create_task(joined.wait())
    await asyncio.wait({task, waiting}, return_when=asyncio.FIRST_COMPLETED)
    waiting.cancel()
    if task.done():
        task.result()
    return task


async def stopped(task: asyncio.Task[None]) -> None:
    task.cancel()  # leaving the socket's and the session's context managers closes them
    with contextlib.suppress(asyncio.CancelledError):
        await task


@contextmanager
def key_shared_member(base: str, topic: str, group: str) -> Iterator[list[dict[str, Any]]]:
    """The member, connected, its parked keys waiting a minute on their own; yields the message
    frames it receives, in order. Closed, and its thread joined, afterwards."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="key-shared-member", daemon=True)
    thread.start()
    received: list[dict[str, Any]] = []
    url = base.replace("http", "ws", 1) + "/v1/subscribe"
    params = {"topic": topic, "group": group, "mode": "key_shared",
              "retry_backoff_ms": "60000", "max_deliveries": "10"}
    try:
        task = asyncio.run_coroutine_threadsafe(
            joined_member(url, params, received), loop).result(timeout=30)
        try:
            yield received
        finally:
            asyncio.run_coroutine_threadsafe(stopped(task), loop).result(timeout=15)
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=30)
        loop.close()
