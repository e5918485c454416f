"""Failure tests run against Redis Clusters of their own: killing nodes must never disturb the
session cluster.

Each cluster is started through the devstack launcher on free ports with a short
cluster-node-timeout (fast failover) and stopped by PID when the test ends, also when it fails. The
gateway under test is a real `create_app` over that cluster and the session's etcd (a private etcd
prefix per test).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from failure_cluster import (
    FAILOVER_NODE_TIMEOUT_MS,
    WAIT_TIMEOUT_MS,
    WRITE_DEADLINE_S,
    Client,
    GatewayFactory,
)

from gateway.app import create_app
from gateway.settings import GatewaySettings
from streamgate_devstack import EtcdProcess, RedisClusterConfig, RedisClusterProcess


def start_cluster(data_dir: Path, primaries: int, replicas: int) -> RedisClusterProcess:
    """A started cluster of this test's own (stopped again if the start fails)."""
    config = RedisClusterConfig(
        data_dir=data_dir,
        primaries=primaries,
        replicas_per_primary=replicas,
        cluster_node_timeout_ms=FAILOVER_NODE_TIMEOUT_MS,
        startup_timeout_s=30.0,
    )
    cluster = RedisClusterProcess(config)
    cluster.start()
    return cluster


@pytest.fixture
def cluster_3x2(tmp_path: Path, devstack_binaries: None) -> Iterator[RedisClusterProcess]:
    """3 primaries x 2 replicas: a promoted replica still has a replica, so acks=all recovers at
    promotion."""
    cluster = start_cluster(tmp_path / "redis", 3, 2)
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def cluster_3x1(tmp_path: Path, devstack_binaries: None) -> Iterator[RedisClusterProcess]:
    """3 primaries x 1 replica."""
    cluster = start_cluster(tmp_path / "redis", 3, 1)
    try:
        yield cluster
    finally:
        cluster.stop()


def failure_settings(cluster: RedisClusterProcess, etcd: EtcdProcess) -> GatewaySettings:
    """Gateway settings over `cluster` with deadlines short enough that failover shows as 503, not a
    hang."""
    return GatewaySettings(
        auth_mode="none",
        redis_nodes=tuple(f"{host}:{port}" for host, port in cluster.startup_nodes),
        etcd_endpoints=(etcd.endpoint,),
        etcd_prefix=f"/streamgate-failures-{uuid.uuid4().hex[:8]}/",
        min_insync_replicas=1,
        wait_timeout_ms=WAIT_TIMEOUT_MS,
        redis_write_deadline_s=WRITE_DEADLINE_S,
        redis_read_deadline_s=WRITE_DEADLINE_S,
        member_lease_ttl_s=5.0,
    )


@pytest.fixture
def gateway_on(aiohttp_client: Any, etcd_server: EtcdProcess) -> GatewayFactory:
    """`await gateway_on(cluster)`: a real gateway app over that cluster (closed by
    aiohttp_client)."""

    async def start(cluster: RedisClusterProcess) -> Client:
        client: Client = await aiohttp_client(create_app(failure_settings(cluster, etcd_server)))
        return client

    return start


@pytest.fixture
def topic_name() -> str:
    return f"fail-{uuid.uuid4().hex[:10]}"
