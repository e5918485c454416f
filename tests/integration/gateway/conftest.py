"""Two gateway processes over the session's Redis Cluster and etcd."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator

import pytest
from processes import GatewayProcess, start_gateway, stop_gateways, wait_ready

from gateway.settings import GatewaySettings
from streamgate_devstack.ports import free_port


@pytest.fixture
def gateway_extra_env() -> dict[str, str]:
    """More environment for `gateway_processes` (a module overrides this fixture to add some)."""
    return {}


@pytest.fixture
def gateway_processes(gateway_settings: GatewaySettings,
                      gateway_extra_env: dict[str, str]) -> Iterator[list[GatewayProcess]]:
    """Two `streamgate serve` processes on the session's Redis Cluster and etcd (lease TTLs 2 s)."""
    env = {**os.environ,
           "STREAMGATE_REDIS_NODES": ",".join(gateway_settings.redis_nodes),
           "STREAMGATE_ETCD_ENDPOINTS": ",".join(gateway_settings.etcd_endpoints),
           "STREAMGATE_ETCD_PREFIX": gateway_settings.etcd_prefix,
           "STREAMGATE_MEMBER_LEASE_TTL_S": "2",
           "STREAMGATE_OWNER_LEASE_TTL_S": "2",
           "STREAMGATE_SWEEP_INTERVAL_S": "0.5",
           "STREAMGATE_AUTH_MODE": "none",
           # ack on the other one
           "STREAMGATE_RECEIPT_SECRET": "integration-receipt-secret-shared-by-both",
           **gateway_extra_env}
    processes: list[subprocess.Popen[bytes]] = []
    urls = []
    try:
        for _ in range(2):
            port = free_port()
            processes.append(start_gateway(port, env))
            urls.append(f"http://127.0.0.1:{port}")
        for url, process in zip(urls, processes, strict=True):
            wait_ready(url, process)
        yield [GatewayProcess(url, process) for url, process in zip(urls, processes, strict=True)]
    finally:
        stop_gateways(processes)
