"""Gateway child processes (`streamgate serve`) for tests that need more than one gateway, and
readiness waits."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from typing import Any


@dataclass
class GatewayProcess:
    """A `streamgate serve` child process."""

    url: str
    process: subprocess.Popen[bytes]


def start_gateway(port: int, env: dict[str, str], *args: str,
                  log_level: str = "warning") -> subprocess.Popen[bytes]:
    """`streamgate serve` on ``port`` with ``env`` (and more ``args``)."""
    command = [sys.executable, "-m", "gateway.cli", "--log-level", log_level, "serve"]
    return subprocess.Popen([*command, "--port", str(port), *args], env=env)


def stop_gateways(processes: list[subprocess.Popen[bytes]], timeout_s: float = 20) -> None:
    """SIGTERM to every gateway still running, then wait for each (SIGKILL past ``timeout_s``)."""
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    for process in processes:
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def wait_ready(url: str, process: subprocess.Popen[bytes], timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert process.poll() is None, f"gateway at {url} exited with {process.returncode}"
        try:
            with urllib.request.urlopen(url + "/readyz", timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"gateway at {url} not ready in {timeout_s}s")


async def until_ready(client: Any, timeout_s: float = 30) -> None:
    """Poll an in-process gateway's /readyz until 200 (partition duties are healthy once their lease
    is held)."""
    deadline = time.monotonic() + timeout_s
    while (response := await client.get("/readyz")).status != 200:
        assert time.monotonic() < deadline, await response.text()
        await asyncio.sleep(0.1)
