"""A gateway as its own process (``python -m gateway.cli serve``) and the CLI as subprocesses, for
tests that start processes: a test process holding the etcd client's gRPC threads (an in-process
gateway) must not fork."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

import orjson

from streamgate_devstack.ports import free_port


def wait_ready(url: str, process: subprocess.Popen[bytes], timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert process.poll() is None, "the gateway exited during start-up"
        try:
            with urllib.request.urlopen(f"{url}/readyz", timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"gateway at {url} not ready after {timeout_s}s")


def serve_gateway(redis_cluster: Any, etcd_server: Any, settings: dict[str, str] | None = None,
                  program: Sequence[str] = (sys.executable, "-m", "gateway.cli")) -> Iterator[str]:
    """``python -m gateway.cli serve`` (or ``program serve``) on a free port (auth off unless
    ``settings``, environment variables, say otherwise); stopped by PID afterwards."""
    port = free_port()
    env = os.environ | {
        "STREAMGATE_REDIS_NODES": ",".join(
            f"{host}:{p}" for host, p in redis_cluster.startup_nodes
        ),
        "STREAMGATE_ETCD_ENDPOINTS": etcd_server.endpoint,
        "STREAMGATE_ETCD_PREFIX": f"/streamgate-cli-{uuid.uuid4().hex[:8]}/",
        "STREAMGATE_AUTH_MODE": "none",
    } | (settings or {})
    process = subprocess.Popen(
        [*program, "serve", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url, process)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def streamgate(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gateway.cli", "--log-level", "warning", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def json_lines(text: str) -> list[Any]:
    return [orjson.loads(line) for line in text.splitlines()]


