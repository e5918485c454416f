"""Child processes for the live dashboard proof: gateways (`streamgate serve`) and a Prometheus
scraping them."""

from __future__ import annotations

import base64
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from streamgate_devstack import RedisClusterProcess
from streamgate_devstack.ports import free_port

LOOPBACK = "127.0.0.1"


def wait_http_ok(url: str, process: subprocess.Popen[bytes], timeout_s: float = 30) -> None:
    """Poll ``url`` until it answers 200; fail if ``process`` exits first."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert process.poll() is None, f"process for {url} exited with {process.returncode}"
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"{url} did not answer 200 in {timeout_s}s")


def stop(processes: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM each process by PID, then wait (SIGKILL after 20 s)."""
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    for process in processes:
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@contextmanager
def gateways(envs: list[Mapping[str, str]]) -> Iterator[list[str]]:
    """One `streamgate serve` per environment (auth off); yields their base URLs once all are
    ready."""
    processes: list[subprocess.Popen[bytes]] = []
    urls: list[str] = []
    try:
        for env in envs:
            port = free_port()
            processes.append(subprocess.Popen(
                [sys.executable, "-m", "gateway.cli", "--log-level", "error", "serve", "--port",
                 str(port)],
                env={**os.environ, "STREAMGATE_AUTH_MODE": "none", **env}))
            urls.append(f"http://{LOOPBACK}:{port}")
        for url, process in zip(urls, processes, strict=True):
            wait_http_ok(url + "/readyz", process)
        yield urls
    finally:
        stop(processes)


@contextmanager
def prometheus(binary: str, targets: list[str], work_dir: Path,
               scrape_interval_s: int = 1) -> Iterator[str]:
    """A Prometheus scraping ``targets`` (host:port) every ``scrape_interval_s``; yields its base
    URL."""
    port = free_port()
    work_dir.mkdir(parents=True, exist_ok=True)
    config = work_dir / "prometheus.yml"
    config.write_text(
        "global:\n"
        f"  scrape_interval: {scrape_interval_s}s\n"
        f"  evaluation_interval: {scrape_interval_s}s\n"
        "scrape_configs:\n"
        "  - job_name: streamgate\n"
        "    static_configs:\n"
        f"      - targets: [{', '.join(repr(t) for t in targets)}]\n")
    log = (work_dir / "prometheus.log").open("wb")
    process = subprocess.Popen(
        [binary, f"--config.file={config}", f"--storage.tsdb.path={work_dir / 'tsdb'}",
         f"--web.listen-address={LOOPBACK}:{port}", "--log.level=warn"],
        stdout=log, stderr=subprocess.STDOUT)
    url = f"http://{LOOPBACK}:{port}"
    try:
        wait_http_ok(url + "/-/ready", process)
        wait_scraped(url, len(targets), process)
        yield url
    finally:
        stop([process])
        log.close()


def wait_scraped(url: str, targets: int, process: subprocess.Popen[bytes],
                 timeout_s: float = 30) -> None:
    """Wait until Prometheus has scraped every target once (its discovery hands targets over after
    ~5 s)."""
    deadline = time.monotonic() + timeout_s
    query = url + "/api/v1/query?query=" + urllib.parse.quote("count(up == 1)")
    while time.monotonic() < deadline:
        assert process.poll() is None, f"prometheus exited with {process.returncode}"
        with urllib.request.urlopen(query, timeout=2) as response:
            result = json.loads(response.read())["data"]["result"]
        if result and int(float(result[0]["value"][1])) == targets:
            return
        time.sleep(0.2)
    raise AssertionError(f"prometheus did not scrape {targets} targets in {timeout_s}s")


def raw_websocket(host: str, port: int, path: str) -> socket.socket:
    """A WebSocket client socket with a tiny receive buffer, past the handshake, that the caller
    never reads."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect((host, port))
    key = base64.b64encode(os.urandom(16)).decode()
    sock.sendall((f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\n"
                  "Upgrade: websocket\r\nConnection: Upgrade\r\n"
                  f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
    head = b""
    while b"\r\n\r\n" not in head:
        head += sock.recv(1)
    assert head.startswith(b"HTTP/1.1 101"), head
    return sock


@contextmanager
def redis_maxmemory(cluster: RedisClusterProcess, maxmemory: int) -> Iterator[None]:
    """Every node of the cluster at ``maxmemory`` bytes (replicas do not apply it to what they
    replicate); each node's own value is put back afterwards, as the session shares the cluster."""
    clients = [node.client() for node in cluster.nodes]
    before = [str(client.config_get("maxmemory")["maxmemory"]) for client in clients]
    try:
        for client in clients:
            client.config_set("maxmemory", maxmemory)
        yield
    finally:
        for client, value in zip(clients, before, strict=True):
            client.config_set("maxmemory", value)
            client.close()
