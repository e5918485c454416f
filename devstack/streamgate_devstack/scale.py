"""Scaling a running `streamgate dev` out: `streamgate dev-add-shard` asks it (SIGUSR1) to add a
Redis shard.

The running stack owns its server processes, so it is the one that starts the new primary and
replica, joins them and rebalances slots (`RedisClusterProcess.add_shard`) while it keeps serving.
It reports the outcome in a small JSON file in the data dir, which the command waits for.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING

from streamgate_devstack.stack import DevStack

if TYPE_CHECKING:  # the hook runs inside the gateway's aiohttp app; the stack needs no aiohttp
    from aiohttp import web

log = logging.getLogger(__name__)

PID_FILE = "streamgate-dev.pid"
RESULT_FILE = "add-shard-result.json"
ADD_SHARD_TIMEOUT_S = 180.0


def write_pid(data_dir: Path) -> Path:
    """Record the running dev stack's pid in its data dir."""
    path = data_dir / PID_FILE
    path.write_text(str(os.getpid()))
    return path


def add_shard_hook(stack: DevStack, data_dir: Path) -> Callable[[web.Application], Awaitable[None]]:
    """An on_startup hook: SIGUSR1 adds one shard (one at a time) without blocking the event
    loop."""
    lock = asyncio.Lock()
    running: set[asyncio.Task[None]] = set()

    async def add_one() -> None:
        async with lock:
            result: dict[str, object]
            try:
                primary = await asyncio.to_thread(stack.redis.add_shard)
                result = {
                    "ok": True,
                    "primaries": len(stack.redis.primaries),
                    "new_primary_port": primary.port,
                }
                print(
                    f"streamgate dev: added a shard, new primary at 127.0.0.1:{primary.port}",
                    flush=True,
                )
            except Exception as exc:  # reported; the stack keeps serving
                log.error("adding a shard failed: %s", exc)
                result = {"ok": False, "error": str(exc)}
            (data_dir / RESULT_FILE).write_text(json.dumps(result))

    def on_signal() -> None:
        task = asyncio.get_running_loop().create_task(add_one())
        running.add(task)
        task.add_done_callback(running.discard)

    async def hook(app: web.Application) -> None:
        asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, on_signal)

    return hook


def request_add_shard(data_dir: Path, timeout_s: float = ADD_SHARD_TIMEOUT_S) -> dict[str, object]:
    """Signal the dev stack of ``data_dir`` and wait for its report; raises on failure or
    timeout."""
    pid = int((data_dir / PID_FILE).read_text())
    result_path = data_dir / RESULT_FILE
    result_path.unlink(missing_ok=True)
    os.kill(pid, signal.SIGUSR1)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if result_path.exists():
            result: dict[str, object] = json.loads(result_path.read_text())
            if not result.get("ok"):
                raise RuntimeError(f"adding a shard failed: {result.get('error')}")
            return result
        time.sleep(0.2)
    raise TimeoutError(
        f"streamgate dev (pid {pid}) did not add a shard in {timeout_s:.0f}s; see its output"
    )
