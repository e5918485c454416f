"""Gateway processes that archive fast with short leases, for the archive's failure tests: started
together over one cluster and one archive, killed and restarted one at a time, stopped by PID."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import uuid
from pathlib import Path

from streamgate_devstack import EtcdProcess, RedisClusterProcess
from streamgate_devstack.ports import free_port
from tests.integration.gateway.processes import start_gateway, stop_gateways, wait_ready

ARCHIVING = {"hot_retention_ms": 100, "archive_interval_s": 0.1,
             "archive_segment_max_entries": 40}


def gateways_env(cluster: RedisClusterProcess, etcd: EtcdProcess,
                 archive: Path) -> dict[str, str]:
    """Gateway processes' settings: archiving fast into ``archive``, leases short."""
    archiving = {f"STREAMGATE_{name.upper()}": str(value) for name, value in ARCHIVING.items()}
    return {**os.environ, **archiving, "STREAMGATE_ARCHIVE_URL": f"file://{archive}",
            "STREAMGATE_REDIS_NODES": ",".join(f"{h}:{p}" for h, p in cluster.startup_nodes),
            "STREAMGATE_ETCD_ENDPOINTS": etcd.endpoint,
            "STREAMGATE_ETCD_PREFIX": f"/archkill-{uuid.uuid4().hex[:8]}/",
            "STREAMGATE_AUTH_MODE": "none", "STREAMGATE_OWNER_LEASE_TTL_S": "2",
            "STREAMGATE_MEMBER_LEASE_TTL_S": "2"}


class GatewayProcesses:
    """``streamgate serve`` processes on free loopback ports, all with one environment."""

    def __init__(self, env: dict[str, str], count: int) -> None:
        self.env = env
        self.ports = [free_port() for _ in range(count)]
        self.processes: list[subprocess.Popen[bytes]] = []

    def url(self, index: int) -> str:
        return f"http://127.0.0.1:{self.ports[index]}"

    async def start(self) -> None:
        """Start every gateway, then wait until each is ready."""
        self.processes = [start_gateway(port, self.env) for port in self.ports]
        for index in range(len(self.ports)):
            await self._ready(index)

    def kill(self, index: int) -> None:
        """kill -9 of one gateway, reaped."""
        self.processes[index].send_signal(signal.SIGKILL)
        self.processes[index].wait()

    async def restart(self, index: int) -> None:
        """Start a killed gateway again on its port and wait until it is ready."""
        self.processes[index] = start_gateway(self.ports[index], self.env)
        await self._ready(index)

    def stop(self) -> None:
        """SIGTERM to every gateway still running, SIGKILL to one that does not stop."""
        stop_gateways(self.processes)

    async def _ready(self, index: int) -> None:
        await asyncio.to_thread(wait_ready, self.url(index), self.processes[index])
