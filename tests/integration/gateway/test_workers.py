"""`streamgate serve --workers N`: worker processes share the port, each its own node; SIGTERM stops
them all."""

from __future__ import annotations

import json
import os
import re
import signal
import ssl
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from processes import start_gateway, wait_ready

from gateway.settings import GatewaySettings
from streamgate_devstack.certs import self_signed
from streamgate_devstack.ports import free_port, free_port_block

pytestmark = pytest.mark.integration


@dataclass
class Workers:
    """A running `serve --workers 2` parent and what the test needs to reach its workers."""

    process: subprocess.Popen[bytes]
    url: str
    worker_urls: list[str]
    node_id: str
    context: ssl.SSLContext | None = None


def children_of(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as children:
        return [int(child) for child in children.read().split()]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return not Path(f"/proc/{pid}/stat").read_text().split(") ")[1].startswith("Z")


def get(url: str, context: ssl.SSLContext | None = None, data: bytes | None = None) -> Any:
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"},
                                     method="POST" if data is not None else "GET")
    # a new connection each time
    with urllib.request.urlopen(request, timeout=10, context=context) as response:
        body = response.read()
        return (
            json.loads(body)
            if response.headers.get_content_type() == "application/json"
            else body.decode()
        )


def start_workers(settings: GatewaySettings, tmp_path: Path, tls: bool) -> Workers:
    port, metrics_port = free_port(), free_port_block(2)
    node_id = f"wtest-{uuid.uuid4().hex[:6]}"
    env = {**os.environ, "STREAMGATE_REDIS_NODES": ",".join(settings.redis_nodes),
           "STREAMGATE_ETCD_ENDPOINTS": ",".join(settings.etcd_endpoints),
           "STREAMGATE_ETCD_PREFIX": settings.etcd_prefix,
           "STREAMGATE_AUTH_MODE": "none", "STREAMGATE_NODE_ID": node_id,
           "STREAMGATE_WORKER_METRICS_PORT": str(metrics_port)}
    context = None
    if tls:
        cert, key = self_signed(tmp_path)
        env |= {"STREAMGATE_TLS_CERT_PATH": str(cert), "STREAMGATE_TLS_KEY_PATH": str(key)}
        context = ssl.create_default_context(cafile=str(cert))
    process = start_gateway(port, env, "--workers", "2")
    scheme = "https" if tls else "http"
    workers = Workers(
        process,
        f"{scheme}://127.0.0.1:{port}",
        [f"{scheme}://127.0.0.1:{metrics_port + i}" for i in range(2)],
        node_id,
        context,
    )
    for url in workers.worker_urls:
        wait_until_ready(url, process, context)
    return workers


def wait_until_ready(
    url: str, process: subprocess.Popen[bytes], context: ssl.SSLContext | None
) -> None:
    if context is None:
        wait_ready(url, process)
        return
    deadline = time.monotonic() + 30
    while True:
        assert process.poll() is None, "the gateway exited"
        try:
            if get(url + "/readyz", context)["status"] == "ready":
                return
        except OSError:
            pass
        assert time.monotonic() < deadline, f"{url} never became ready"
        time.sleep(0.1)


@pytest.fixture
def workers(gateway_settings: GatewaySettings, tmp_path: Path) -> Iterator[Workers]:
    yield from running_workers(gateway_settings, tmp_path, tls=False)


@pytest.fixture(params=[False, True], ids=["http", "https"])
def any_workers(request: pytest.FixtureRequest, gateway_settings: GatewaySettings,
                tmp_path: Path) -> Iterator[Workers]:
    yield from running_workers(gateway_settings, tmp_path, tls=request.param)


def running_workers(settings: GatewaySettings, tmp_path: Path, tls: bool) -> Iterator[Workers]:
    running = start_workers(settings, tmp_path, tls)
    try:
        yield running
    finally:
        pids = children_of(running.process.pid) if running.process.poll() is None else []
        running.process.terminate()
        running.process.wait(timeout=90)
        for pid in pids:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


def published_requests(metrics_text: str, topic: str) -> int:
    pattern = rf'^streamgate_publish_requests_total{{outcome="ok",topic="{topic}"}} (\S+)$'
    return sum(int(float(value)) for value in re.findall(pattern, metrics_text, re.MULTILINE))


def etcd_node_ids(settings: GatewaySettings) -> set[str]:
    listing = subprocess.run(
        [
            "etcdctl", "--endpoints", settings.etcd_endpoints[0], "get", "--prefix", "--keys-only",
            f"{settings.etcd_prefix}nodes/",
        ],
        capture_output=True,
        check=True,
        text=True,
    )
    return {line.rsplit("/", 1)[1] for line in listing.stdout.split() if line}


def test_both_workers_serve_one_port_as_own_nodes(
    any_workers: Workers, topic_name: str, gateway_settings: GatewaySettings
) -> None:
    workers = any_workers
    get(
        workers.url + "/v1/topics",
        workers.context,
        json.dumps({"name": topic_name, "partitions": 4}).encode(),
    )
    # a new connection per request: SO_REUSEPORT spreads connections, not requests
    for i in range(40):
        body = json.dumps({"messages": [{"key": f"k{i}", "value": i}]}).encode()
        assert len(
            get(f"{workers.url}/v1/topics/{topic_name}/messages", workers.context, body)["results"]
        ) == 1
    per_worker = [published_requests(get(url + "/metrics", workers.context), topic_name)
                  for url in workers.worker_urls]
    assert sum(per_worker) == 40
    assert all(count > 0 for count in per_worker), per_worker
    assert etcd_node_ids(gateway_settings) >= {f"{workers.node_id}-w0", f"{workers.node_id}-w1"}


def test_sigterm_stops_every_worker_and_the_parent_exits_0(workers: Workers) -> None:
    pids = children_of(workers.process.pid)
    assert len(pids) == 2
    workers.process.send_signal(signal.SIGTERM)
    assert workers.process.wait(timeout=60) == 0
    assert not [pid for pid in pids if alive(pid)]


def test_a_worker_that_dies_stops_the_group_with_a_non_zero_exit(workers: Workers) -> None:
    first, second = children_of(workers.process.pid)
    os.kill(first, signal.SIGKILL)
    assert workers.process.wait(timeout=60) != 0
    deadline = time.monotonic() + 10
    while alive(second) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(second)


def test_killing_the_parent_takes_the_workers_down(workers: Workers) -> None:
    pids = children_of(workers.process.pid)
    workers.process.kill()
    workers.process.wait(timeout=10)
    deadline = time.monotonic() + 30
    while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [pid for pid in pids if alive(pid)]


def test_workers_with_port_0_is_a_bad_setting() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "serve", "--port", "0", "--workers", "2"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "fixed port" in done.stderr
