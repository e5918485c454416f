"""A real gateway (create_app) over the session's Redis Cluster and etcd."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from gateway.app import create_app
from gateway.settings import GatewaySettings


@pytest.fixture
def gateway_settings(redis_cluster: Any, etcd_server: Any) -> GatewaySettings:
    """Settings pointing at the session's servers, with a private etcd prefix per test."""
    return GatewaySettings(
        redis_nodes=tuple(f"{host}:{port}" for host, port in redis_cluster.startup_nodes),
        etcd_endpoints=(etcd_server.endpoint,),
        etcd_prefix=f"/streamgate-test-{uuid.uuid4().hex[:8]}/",
        min_insync_replicas=1,
        wait_timeout_ms=500,
        redis_write_deadline_s=3.0,
    )


@pytest.fixture
async def gateway(aiohttp_client: Any, gateway_settings: GatewaySettings) -> TestClient[Any, Any]:
    client: TestClient[Any, Any] = await aiohttp_client(create_app(gateway_settings))
    return client


@pytest.fixture
def topic_name() -> str:
    return f"it-{uuid.uuid4().hex[:10]}"


@dataclass
class GatewayProcess:
    """A `streamgate serve` child process."""

    url: str
    process: subprocess.Popen[bytes]


@pytest.fixture
def gateway_processes(gateway_settings: GatewaySettings) -> Iterator[list[GatewayProcess]]:
    """Two `streamgate serve` processes sharing the session's Redis Cluster and etcd (member lease TTL 2 s)."""
    env = {**os.environ,
           "STREAMGATE_REDIS_NODES": ",".join(gateway_settings.redis_nodes),
           "STREAMGATE_ETCD_ENDPOINTS": ",".join(gateway_settings.etcd_endpoints),
           "STREAMGATE_ETCD_PREFIX": gateway_settings.etcd_prefix,
           "STREAMGATE_MEMBER_LEASE_TTL_S": "2"}
    processes: list[subprocess.Popen[bytes]] = []
    urls = []
    try:
        for _ in range(2):
            port = free_port()
            processes.append(subprocess.Popen(
                [sys.executable, "-m", "gateway.cli", "--log-level", "warning", "serve", "--port", str(port)],
                env=env))
            urls.append(f"http://127.0.0.1:{port}")
        for url, process in zip(urls, processes, strict=True):
            wait_ready(url, process)
        yield [GatewayProcess(url, process) for url, process in zip(urls, processes, strict=True)]
    finally:
        for process in processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in processes:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


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
