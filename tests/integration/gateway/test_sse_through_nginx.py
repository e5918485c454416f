"""Server-Sent Events through nginx as a reverse proxy with its default response buffering: the
stream's ``X-Accel-Buffering: no`` makes each event, heartbeat and resume pass at once."""

from __future__ import annotations

import contextlib
import dataclasses
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any, NoReturn

import aiohttp
import pytest
from aiohttp.test_utils import TestClient
from test_sse_events import EventReader, create, publish

from gateway.app import create_app
from gateway.settings import GatewaySettings
from streamgate_devstack.ports import free_port

Client = TestClient[Any, Any]
STOP_WAIT_S = 10.0
# no proxy_buffering, no location of its own for event streams: nginx as it comes
NGINX_CONF = """worker_processes 1;
events {{ worker_connections 64; }}
http {{
    access_log {root}/access.log;
    client_body_temp_path {root}/client_body;
    proxy_temp_path {root}/proxy;
    fastcgi_temp_path {root}/fastcgi;
    uwsgi_temp_path {root}/uwsgi;
    scgi_temp_path {root}/scgi;
    server {{
        listen 127.0.0.1:{port};
        location / {{ proxy_pass http://127.0.0.1:{upstream}; }}
    }}
}}
"""


@dataclasses.dataclass(frozen=True)
class Nginx:
    """A private nginx in front of one gateway."""

    url: str
    process: subprocess.Popen[bytes]


@pytest.fixture
def nginx_binary(report_missing: Callable[[str], NoReturn]) -> str:
    path = shutil.which("nginx") or next(
        (p for p in ("/usr/sbin/nginx", "/sbin/nginx") if Path(p).exists()), None)
    if path is None:
        report_missing("nginx is missing (Debian package nginx-light; make deps installs it)")
    return path


@contextlib.contextmanager
def nginx_in_front_of(binary: str, upstream: int, root: Path) -> Iterator[Nginx]:
    """Our own nginx (no daemon, its files under ``root``) proxying to ``upstream``, until it
    answers; stopped by PID on exit."""
    port = free_port()
    conf = root / "nginx.conf"
    conf.write_text(NGINX_CONF.format(root=root, port=port, upstream=upstream))
    process = subprocess.Popen(
        [binary, "-p", str(root), "-e", str(root / "error.log"), "-c", str(conf),
         "-g", f"daemon off; pid {root / 'nginx.pid'};"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port, process, root / "error.log")
        yield Nginx(f"http://127.0.0.1:{port}", process)
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def wait_for_port(port: int, process: subprocess.Popen[bytes], log: Path,
                  timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"nginx exited: {log.read_text() if log.exists() else ''}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.05)
    raise AssertionError(f"nginx did not listen on {port} within {timeout_s}s")


@contextlib.asynccontextmanager
async def proxied(aiohttp_client: Any, settings: GatewaySettings, binary: str,
                  root: Path) -> AsyncIterator[tuple[Client, aiohttp.ClientSession]]:
    """A gateway, and an HTTP session whose base URL is nginx in front of it."""
    gateway: Client = await aiohttp_client(create_app(settings))
    assert gateway.server.port is not None
    with nginx_in_front_of(binary, gateway.server.port, root) as nginx:
        async with aiohttp.ClientSession(nginx.url) as http:
            yield gateway, http


async def stream_through(http: aiohttp.ClientSession, gateway: Client, topic: str,
                         headers: dict[str, str] | None = None) -> EventReader:
    response = await http.get(f"/v1/topics/{topic}/events", headers=headers)
    assert response.status == 200, await response.text()
    assert response.headers["Content-Type"] == "text/event-stream; charset=utf-8"
    return await EventReader(response, gateway).started()


async def test_each_event_passes_a_buffering_nginx_before_the_next_is_published_and_resumes(
        aiohttp_client: Any, gateway_settings: GatewaySettings, topic_name: str,
        nginx_binary: str, tmp_path: Path) -> None:
    async with proxied(aiohttp_client, gateway_settings, nginx_binary, tmp_path) as (gw, http):
        await create(gw, topic_name, 2)
        reader = await stream_through(http, gw, topic_name)
        seen = []
        for n in range(3):  # the stream is open: nothing ends it to flush nginx's buffers
            await publish(gw, topic_name, [{"key": f"k{n}", "value": n}])
            [event] = await reader.events(1)
            assert event["data"]["value"] == n
            seen.append(event)
        reader.response.close()

        await publish(gw, topic_name, [{"key": f"k{n}", "value": n} for n in range(3, 9)])
        resumed = await stream_through(http, gw, topic_name,
                                       headers={"Last-Event-ID": seen[-1]["id"]})
        rest = await resumed.events(6)
        # in order per partition, and across them none lost or repeated
        assert sorted(event["data"]["value"] for event in rest) == list(range(3, 9))
        await publish(gw, topic_name, [{"key": "k9", "value": 9}])
        [live] = await resumed.events(1)
        assert live["data"]["value"] == 9
        resumed.response.close()


async def test_heartbeats_of_an_idle_stream_pass_a_buffering_nginx(
        aiohttp_client: Any, gateway_settings: GatewaySettings, topic_name: str,
        nginx_binary: str, tmp_path: Path) -> None:
    settings = dataclasses.replace(gateway_settings, sse_heartbeat_s=0.2)
    async with proxied(aiohttp_client, settings, nginx_binary, tmp_path) as (gw, http):
        await create(gw, topic_name, 1)
        reader = await stream_through(http, gw, topic_name)
        assert await reader.next() == {"comment": "ping"}
        assert await reader.next() == {"comment": "ping"}
        reader.response.close()
