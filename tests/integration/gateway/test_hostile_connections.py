"""Hostile connections against a real `streamgate serve` with auth on: the gateway's memory stays
bounded.

64 clients at once: subscribers that never read their socket (broadcast and a shared group, the
widest window, a backlog of large messages), publishers trickling their body a byte a second, and
WebSocket upgrades without credentials in a loop. Meanwhile an ordinary subscriber and publisher are
served. The gateway's RSS, read from /proc/<pid>/status, must stay under the bound docs/security.md
states; one summary line is printed (``-s``).
"""

from __future__ import annotations

import asyncio
import base64
import collections
import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import orjson
import pytest
from auth_config import api_keys, rule
from processes import start_gateway, wait_ready

from gateway.settings import GatewaySettings
from streamgate_devstack.ports import free_port

KEY = "sgk_hostile-connections-key"
HEADERS = {"X-API-Key": KEY}
MIB = 1024 * 1024
RSS_BOUND_MIB = 512  # docs/security.md: the gateway's RSS under this hostile mix stays below this
# what the RSS may stay above its level before the hostile clients came, once they left
RSS_KEPT_MIB = 48
VALUE_BYTES = 100_000
BACKLOG = 400
BROADCAST_READERS, GROUP_READERS, SLOW_BODIES, FLOODERS = 20, 4, 20, 20
UNAUTHENTICATED_CAP = 16
# slow_client_timeout_s, body_read_timeout_s and auth_frame_timeout_s of the gateway under test
DEADLINE_S = 3.0
PHASE_S = 14.0
LINGERING_S = 2.0  # gateway.app: how long the rest of a refused body is read before the close
ORDINARY_MESSAGES = 20
CONFIG = api_keys({"app": KEY}) + rule(["app"], ["it-*"], ["publish", "subscribe", "admin"])


@dataclass
class Gateway:
    url: str
    port: int
    process: subprocess.Popen[bytes]

    def rss_mib(self) -> float:
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        raise AssertionError("no VmRSS line")


@dataclass
class Tally:
    outcomes: collections.Counter[str] = field(default_factory=collections.Counter)
    peak_rss_mib: float = 0.0


@contextlib.contextmanager
def hostile_gateway(gateway_settings: GatewaySettings, tmp_path: Path,
                    **env_overrides: str) -> Iterator[Gateway]:
    """A `streamgate serve` with auth on (CONFIG) and the hostile tests' deadlines, stopped by
    PID; ``env_overrides`` replace its STREAMGATE_* settings."""
    config = tmp_path / "auth.toml"
    config.write_text(CONFIG)
    port = free_port()
    env = {**os.environ,
           "STREAMGATE_REDIS_NODES": ",".join(gateway_settings.redis_nodes),
           "STREAMGATE_ETCD_ENDPOINTS": ",".join(gateway_settings.etcd_endpoints),
           "STREAMGATE_ETCD_PREFIX": gateway_settings.etcd_prefix,
           "STREAMGATE_AUTH_MODE": "required",
           "STREAMGATE_AUTH_CONFIG_PATH": str(config),
           "STREAMGATE_SLOW_CLIENT_TIMEOUT_S": str(DEADLINE_S),
           "STREAMGATE_BODY_READ_TIMEOUT_S": str(DEADLINE_S),
           "STREAMGATE_AUTH_FRAME_TIMEOUT_S": str(DEADLINE_S),
           "STREAMGATE_MAX_UNAUTHENTICATED_CONNECTIONS": str(UNAUTHENTICATED_CAP),
           **env_overrides}
    process = start_gateway(port, env, log_level="error")
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url, process)
        yield Gateway(url, port, process)
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture
def gateway(gateway_settings: GatewaySettings, tmp_path: Path) -> Iterator[Gateway]:
    with hostile_gateway(gateway_settings, tmp_path) as started:
        yield started


# --- hostile clients ------------------------------------------------------------------------------
def upgrade_request(path: str, headers: dict[str, str]) -> bytes:
    key = base64.b64encode(os.urandom(16)).decode()
    extra = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
    return (f"GET {path} HTTP/1.1\r\nHost: gateway\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n{extra}\r\n").encode()


async def connect(
    port: int, tiny_buffer: bool = False
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    sock = socket.socket()
    if tiny_buffer:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
    return await asyncio.open_connection(sock=sock, limit=4096)


async def never_reading_subscriber(port: int, path: str, tally: Tally, stop: asyncio.Event) -> None:
    """Upgrades with credentials and never reads a byte: its window is wide open, its socket
    full."""
    _, writer = await connect(port, tiny_buffer=True)
    writer.transport.pause_reading()  # type: ignore[attr-defined]  # past the 101 the client reads nothing
    writer.write(upgrade_request(path, HEADERS))
    await stop.wait()
    tally.outcomes["never-reader"] += 1
    writer.transport.abort()


async def slow_body_publisher(port: int, topic: str, tally: Tally, stop: asyncio.Event) -> None:
    """An authenticated publish whose body comes a byte a second: answered 408 and closed."""
    reader, writer = await connect(port)
    writer.write(
        (
            f"POST /v1/topics/{topic}/messages HTTP/1.1\r\nHost: gateway\r\nX-API-Key: {KEY}\r\n"
            "Content-Type: application/json\r\nContent-Length: 1000000\r\n\r\n{"
        ).encode()
    )

    async def trickle() -> None:
        while not stop.is_set():
            await asyncio.sleep(1)
            writer.write(b" ")

    trickling = asyncio.create_task(trickle())
    try:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), PHASE_S)
        status = head[9:12].decode(errors="replace")
        # aiohttp reads and drops what still comes for its lingering time, then closes
        with contextlib.suppress(ConnectionError):  # a reset closes it too
            await asyncio.wait_for(reader.read(), LINGERING_S + DEADLINE_S + PHASE_S)
        tally.outcomes["slow-body " + status] += 1
    except (TimeoutError, ConnectionError, asyncio.IncompleteReadError):
        tally.outcomes["slow-body still open"] += 1
    finally:
        trickling.cancel()
        writer.transport.abort()


async def upgrade_flooder(port: int, topic: str, tally: Tally, stop: asyncio.Event) -> None:
    """Upgrades without credentials, again and again, never sending the auth frame."""
    while not stop.is_set():
        reader, writer = await connect(port)
        try:
            writer.write(upgrade_request(f"/v1/subscribe?topic={topic}", {}))
            head = await reader.readuntil(b"\r\n\r\n")
            tally.outcomes["flood " + head[9:12].decode()] += 1
            if head.startswith(b"HTTP/1.1 101"):
                # the auth-frame timeout closes it
                await asyncio.wait_for(reader.read(), DEADLINE_S + 10)
            else:
                await asyncio.sleep(0.2)
        except (asyncio.IncompleteReadError, ConnectionError, TimeoutError):
            tally.outcomes["flood dropped"] += 1
        finally:
            writer.transport.abort()


async def sample_rss(gateway: Gateway, tally: Tally, stop: asyncio.Event) -> None:
    while not stop.is_set():
        tally.peak_rss_mib = max(tally.peak_rss_mib, gateway.rss_mib())
        await asyncio.sleep(0.1)


# --- the ordinary clients -------------------------------------------------------------------------
async def ordinary_traffic(http: aiohttp.ClientSession, url: str, topic: str) -> tuple[int, int]:
    """Publishes small messages one by one to a subscriber that reads; returns (published,
    received)."""
    async with http.ws_connect(f"{url}/v1/subscribe", params={"topic": topic, "mode": "broadcast"},
                               headers=HEADERS) as ws:
        assert orjson.loads((await ws.receive(timeout=10)).data)["type"] == "assignment"
        published = 0
        for n in range(ORDINARY_MESSAGES):
            async with http.post(
                f"{url}/v1/topics/{topic}/messages",
                json={"messages": [{"value": n}]},
                headers=HEADERS,
            ) as response:
                published += response.status == 200
            await asyncio.sleep(0.3)
        received: set[int] = set()
        while len(received) < published:
            frame = orjson.loads((await ws.receive(timeout=10)).data)
            if frame["type"] == "message":
                received.add(frame["value"])
    return published, len(received)


async def setup_topics(
    http: aiohttp.ClientSession, url: str, backlog_topic: str, plain_topic: str
) -> None:
    for name in (backlog_topic, plain_topic):
        async with http.post(
            f"{url}/v1/topics", json={"name": name, "partitions": 2}, headers=HEADERS
        ) as response:
            assert response.status == 201, await response.text()
    pad = "v" * VALUE_BYTES
    for start in range(0, BACKLOG, 25):
        batch = [{"value": {"n": n, "pad": pad}} for n in range(start, start + 25)]
        async with http.post(f"{url}/v1/topics/{backlog_topic}/messages", json={"messages": batch},
                             headers=HEADERS) as response:
            assert response.status == 200, await response.text()


async def slow_closes(http: aiohttp.ClientSession, url: str) -> float:
    async with http.get(f"{url}/metrics") as response:
        text = await response.text()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("streamgate_websocket_slow_closes_total{"))


async def test_memory_stays_bounded_under_connection_floods(
    gateway: Gateway, topic_name: str
) -> None:
    backlog_topic, plain_topic = topic_name, topic_name + "-plain"
    async with aiohttp.ClientSession() as http:
        await setup_topics(http, gateway.url, backlog_topic, plain_topic)
        await asyncio.sleep(1)
        rss_before = gateway.rss_mib()
        tally, stop = Tally(peak_rss_mib=rss_before), asyncio.Event()
        wide = f"/v1/subscribe?topic={backlog_topic}&from=earliest&max_in_flight=10000"
        hostile = [never_reading_subscriber(gateway.port, wide + "&mode=broadcast", tally, stop)
                   for _ in range(BROADCAST_READERS)]
        hostile += [
            never_reading_subscriber(gateway.port, wide + "&mode=shared&group=hostile", tally, stop)
            for _ in range(GROUP_READERS)
        ]
        hostile += [
            slow_body_publisher(gateway.port, plain_topic, tally, stop) for _ in range(SLOW_BODIES)
        ]
        hostile += [
            upgrade_flooder(gateway.port, backlog_topic, tally, stop) for _ in range(FLOODERS)
        ]
        assert len(hostile) == 64
        tasks = [
            asyncio.create_task(client) for client in (*hostile, sample_rss(gateway, tally, stop))
        ]
        started = time.monotonic()
        published, received = await ordinary_traffic(http, gateway.url, plain_topic)
        await asyncio.sleep(max(0.0, PHASE_S - (time.monotonic() - started)))
        closed_slow = await slow_closes(http, gateway.url)
        stop.set()
        await asyncio.wait_for(asyncio.gather(*tasks), 30)
        await asyncio.sleep(3)  # the gateway notices the aborted sockets and cleans up
        rss_after = gateway.rss_mib()
    flood_ok, flood_refused = tally.outcomes["flood 101"], tally.outcomes["flood 503"]
    print(
        f"\nhostile connections: {len(hostile)} clients ({BROADCAST_READERS}+{GROUP_READERS} "
        f"never-reading subscribers, {SLOW_BODIES} slow bodies, {FLOODERS} upgrade flooders); "
        f"outcomes {dict(tally.outcomes)}; slow closes {closed_slow:g}; ordinary {published} "
        f"published / {received} received; gateway RSS before {rss_before:.0f} MiB, peak "
        f"{tally.peak_rss_mib:.0f} MiB, after {rss_after:.0f} MiB (bound {RSS_BOUND_MIB} MiB)"
    )
    assert tally.peak_rss_mib < RSS_BOUND_MIB
    assert rss_after < rss_before + RSS_KEPT_MIB, (
        "the memory the hostile clients pinned was given back"
    )
    assert published == ORDINARY_MESSAGES
    assert received == ORDINARY_MESSAGES
    assert tally.outcomes["slow-body 408"] == SLOW_BODIES
    assert flood_refused > 0, "past the cap, upgrades without credentials are refused"
    assert flood_ok >= UNAUTHENTICATED_CAP
    assert closed_slow >= BROADCAST_READERS + GROUP_READERS, (
        "every never-reading subscriber was closed as slow"
    )
