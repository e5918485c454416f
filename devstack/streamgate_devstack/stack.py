"""The whole local dev stack: a Redis Cluster and a single etcd member under one data dir."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from streamgate_devstack._process import StartedInWith
from streamgate_devstack.etcd import EtcdConfig, EtcdProcess
from streamgate_devstack.redis_cluster import RedisClusterConfig, RedisClusterProcess


@dataclass(frozen=True)
class DevStackConfig:
    """Everything `streamgate dev` and the test fixtures need to start the stack.

    None (or 0) ports pick free loopback ports (`streamgate dev` passes redis_base_port=7000).
    Redis lives in `<data_dir>/redis`, etcd in `<data_dir>/etcd`.
    """

    data_dir: Path
    redis_primaries: int = 3
    redis_replicas: int = 1
    redis_base_port: int | None = None
    redis_maxmemory_bytes: int = 0  # each node's cap (noeviction); 0: unset
    cluster_node_timeout_ms: int = 3000
    etcd_client_port: int | None = None
    etcd_peer_port: int | None = None
    startup_timeout_s: float = 30.0

    def redis_config(self) -> RedisClusterConfig:
        """The Redis Cluster slice of this config."""
        return RedisClusterConfig(
            data_dir=self.data_dir / "redis",
            primaries=self.redis_primaries,
            replicas_per_primary=self.redis_replicas,
            base_port=self.redis_base_port,
            maxmemory_bytes=self.redis_maxmemory_bytes,
            cluster_node_timeout_ms=self.cluster_node_timeout_ms,
            startup_timeout_s=self.startup_timeout_s,
        )

    def etcd_config(self) -> EtcdConfig:
        """The etcd slice of this config."""
        return EtcdConfig(
            data_dir=self.data_dir / "etcd",
            client_port=self.etcd_client_port,
            peer_port=self.etcd_peer_port,
            startup_timeout_s=self.startup_timeout_s,
        )


class DevStack(StartedInWith):
    """Starts etcd and the Redis Cluster; stop() (idempotent) stops both. Context manager."""

    def __init__(self, config: DevStackConfig) -> None:
        self.config = config
        self.redis = RedisClusterProcess(config.redis_config())
        self.etcd = EtcdProcess(config.etcd_config())

    @property
    def redis_startup_nodes(self) -> list[tuple[str, int]]:
        """(host, port) of every Redis node."""
        return self.redis.startup_nodes

    @property
    def etcd_endpoint(self) -> str:
        """etcd's client port as "host:port"."""
        return self.etcd.endpoint

    def start(self) -> None:
        """Start etcd, then the Redis Cluster; on any failure stop whatever was started and
        re-raise."""
        try:
            self.etcd.start()
            self.redis.start()
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Stop the Redis Cluster and etcd; idempotent."""
        try:
            self.redis.stop()
        finally:
            self.etcd.stop()
