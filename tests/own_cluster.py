"""A Redis Cluster of a test's own (3 primaries + 3 replicas), for tests that fill its memory or
freeze its nodes and must not disturb the session's cluster."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from streamgate_devstack.redis_cluster import RedisClusterConfig, RedisClusterProcess


@contextmanager
def own_cluster(data_dir: Path, *, node_cap_bytes: int = 0,
                cluster_node_timeout_ms: int = 2000) -> Iterator[RedisClusterProcess]:
    """The cluster, each node capped at ``node_cap_bytes`` (0: no cap) with noeviction; stopped by
    PID afterwards."""
    config = RedisClusterConfig(data_dir=data_dir, primaries=3, replicas_per_primary=1,
                                cluster_node_timeout_ms=cluster_node_timeout_ms,
                                maxmemory_bytes=node_cap_bytes)
    cluster = RedisClusterProcess(config)
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()
