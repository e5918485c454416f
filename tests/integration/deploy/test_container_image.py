"""The gateway's container image (Containerfile, ``make image``) built from local Debian bases and
run as the Helm chart runs it: uid 10001, read-only root, every capability dropped."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import time
import tomllib
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest
from containers import ROOT, podman

from streamgate_devstack.ports import free_ports


def call(url: str, method: str = "GET", body: Any = None) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url, method=method,
                                     data=None if body is None else json.dumps(body).encode(),
                                     headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


def wait_ready(url: str, name: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if call(f"{url}/readyz")[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.5)
    logs = podman("logs", name, check=False)
    raise AssertionError(f"the container never got ready:\n{logs.stdout}\n{logs.stderr}")


@pytest.fixture
def gateway_container(image: str, redis_cluster: Any, etcd_server: Any
                      ) -> Iterator[tuple[str, str]]:
    """The image serving on a free loopback port with the chart's security context, over the
    session's cluster and etcd; its URL and container name. Removed afterwards."""
    name, [port] = f"sg-test-{uuid.uuid4().hex[:10]}", free_ports(1)
    nodes = ",".join(f"{host}:{p}" for host, p in redis_cluster.startup_nodes)
    podman("run", "--detach", "--name", name, "--network=host", "--user=10001:10001",
           "--read-only", "--cap-drop=all", "--security-opt=no-new-privileges",
           "--tmpfs=/tmp", f"--env=STREAMGATE_REDIS_NODES={nodes}",
           f"--env=STREAMGATE_ETCD_ENDPOINTS={etcd_server.endpoint}",
           f"--env=STREAMGATE_ETCD_PREFIX=/sg-image-{uuid.uuid4().hex[:8]}/",
           "--env=STREAMGATE_AUTH_MODE=none", image,
           "serve", "--host", "127.0.0.1", "--port", str(port))
    try:
        yield f"http://127.0.0.1:{port}", name
    finally:
        podman("rm", "--force", "--time=0", name, check=False)


@pytest.mark.timeout(1200)
def test_image_is_non_root_with_streamgate_entry_point(image: str) -> None:
    [inspected] = json.loads(podman("image", "inspect", image).stdout)
    config = inspected["Config"]
    assert config["User"] == "10001:10001"
    assert config["Entrypoint"] == ["streamgate"]
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    labels = {key.removeprefix("org.opencontainers.image."): value
              for key, value in config["Labels"].items()}
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout.strip()
    assert (labels["version"], labels["revision"]) == (version, head)
    assert (labels["title"], labels["licenses"]) == ("streamgate", "Apache-2.0")
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", labels["created"])  # RFC 3339, UTC
    for key in ("source", "documentation", "url"):
        assert labels[key].startswith("https://"), key
    assert labels["description"]
    printed = podman("run", "--rm", image, "--version").stdout
    assert version in printed
    # the runtime stage carries no compiler: only the build stage had one
    assert podman("run", "--rm", "--entrypoint=sh", image, "-c", "command -v gcc",
                  check=False).returncode != 0


@pytest.mark.timeout(1200)
def test_image_serves_publish_replay_and_console(gateway_container: tuple[str, str]) -> None:
    url, name = gateway_container
    wait_ready(url, name)
    assert podman("exec", name, "id", "-u").stdout.strip() == "10001"
    assert podman("exec", name, "sh", "-c", "touch /opt/x", check=False).returncode != 0
    topic = f"image-{uuid.uuid4().hex[:8]}"
    assert call(f"{url}/v1/topics", "POST", {"name": topic, "partitions": 2})[0] == 201
    status, _, body = call(f"{url}/v1/topics/{topic}/messages", "POST", {
        "acks": "all", "messages": [{"key": "k", "value": {"n": 1}, "partition": 1}]})
    assert status == 200, body
    status, _, body = call(f"{url}/v1/topics/{topic}/partitions/1/messages")
    assert [m["value"] for m in json.loads(body)["messages"]] == [{"n": 1}]
    status, headers, page = call(f"{url}/console/")
    assert status == 200
    assert "default-src 'none'" in headers["Content-Security-Policy"]
    assert re.search(rb'src="js/console/main\.js"', page)
    assert call(f"{url}/console/js/console/main.js")[0] == 200

    close, pulled, took = asyncio.run(terminate_while_busy(url, name, topic))
    assert close == (aiohttp.WSMsgType.CLOSE, 1001)
    assert pulled == 200
    [state] = json.loads(podman("inspect", name).stdout)
    assert state["State"]["ExitCode"] == 0, podman("logs", name, check=False).stderr
    print(f"stopped by SIGTERM in {took:.1f} s")


async def terminate_while_busy(url: str, name: str, topic: str
                               ) -> tuple[tuple[aiohttp.WSMsgType, Any], int, float]:
    """SIGTERM (what Kubernetes sends) while a group subscription is open and a long-poll pull is
    waiting: the socket's close frame, the pull's status, and how long the stop took."""
    async with aiohttp.ClientSession() as http:
        ws = await http.ws_connect(f"{url.replace('http', 'ws')}/v1/subscribe?topic={topic}"
                                   "&group=drain&mode=exclusive&from=latest")
        assignment = await ws.receive_json(timeout=30)
        assert assignment["type"] == "assignment", assignment
        pull = asyncio.create_task(http.post(f"{url}/v1/groups/waiting/pull", json={
            "topic": topic, "wait_ms": 3000, "max_messages": 10}))
        await asyncio.sleep(0.5)  # the pull is waiting in the gateway
        started = time.monotonic()
        stop = asyncio.create_task(asyncio.to_thread(podman, "stop", "--time=30", name))
        closed = await ws.receive(timeout=30)
        pulled = await pull
        await stop
        return (closed.type, closed.data), pulled.status, time.monotonic() - started
