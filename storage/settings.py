"""Connection and durability settings of the Redis store (one frozen object, built once by the
caller)."""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class RedisStoreSettings:
    """How the store reaches the Redis Cluster and how long it keeps trying.

    ``min_insync_replicas`` and ``wait_timeout_ms`` drive WAIT for ``Acks.ALL``;
    ``write_deadline_s`` and ``read_deadline_s`` bound a whole call including its retries across
    failovers.
    """

    startup_nodes: list[tuple[str, int]] = field(default_factory=lambda: [("127.0.0.1", 6379)])
    min_insync_replicas: int = 1
    wait_timeout_ms: int = 1000
    write_deadline_s: float = 10.0
    read_deadline_s: float = 5.0
    socket_timeout_s: float = 5.0
    socket_connect_timeout_s: float = 2.0
    topology_timeout_s: float = 1.0  # one slot-map reload; a node that does not answer in time is
                                     # skipped
    node_stall_s: float = 1.0  # a request unanswered this long (WAIT's timeout aside) starts a
    # failover watch: the slot map is re-read until the node answers or is replaced, then its
    # requests move on
    max_connections_per_node: int = 100
    retry_backoff_s: float = 0.05
    retry_backoff_max_s: float = 0.5
    # appends are refused (StorageFull, nothing written) while a node they would write to holds
    # this share of its maxmemory; the rest is headroom for the consumers' bookkeeping
    publish_memory_watermark: float = 0.9
    memory_poll_interval_s: float = 0.0  # INFO memory of every node this often; 0: never
    username: str | None = None
    password: str | None = None
    client_name: str | None = "streamgate"
    tls: bool = False  # TLS to every node (the cluster client and the per-node write clients)
    tls_ca_path: str | None = None  # PEM CA bundle that signed the nodes' certificates (None:
                                    # system CAs)
    tls_cert_path: str | None = None  # client certificate for mutual TLS (with tls_key_path)
    tls_key_path: str | None = None
    tls_check_hostname: bool = True  # node certificates must name the address the node announces

    def __post_init__(self) -> None:
        if not self.startup_nodes:
            raise ValueError("startup_nodes must not be empty")
        if self.min_insync_replicas < 0 or self.wait_timeout_ms < 0:
            raise ValueError("min_insync_replicas and wait_timeout_ms must be >= 0")
        if self.write_deadline_s <= 0 or self.read_deadline_s <= 0:
            raise ValueError("deadlines must be > 0")
        if not 0 < self.publish_memory_watermark <= 1 or self.memory_poll_interval_s < 0:
            raise ValueError("publish_memory_watermark must be in (0, 1] and "
                             "memory_poll_interval_s >= 0")
        if bool(self.tls_cert_path) != bool(self.tls_key_path):
            raise ValueError("tls_cert_path and tls_key_path must be set together")
        if not self.tls and (self.tls_ca_path or self.tls_cert_path):
            raise ValueError("tls_ca_path, tls_cert_path and tls_key_path need tls=True")

    def tls_options(self) -> dict[str, Any]:
        """redis-py keyword arguments for TLS (empty when TLS is off): TLS 1.2+, certificates
        verified."""
        if not self.tls:
            return {}
        return {
            "ssl": True,
            "ssl_ca_certs": self.tls_ca_path,
            "ssl_certfile": self.tls_cert_path,
            "ssl_keyfile": self.tls_key_path,
            "ssl_cert_reqs": "required",
            "ssl_check_hostname": self.tls_check_hostname,
            "ssl_min_version": ssl.TLSVersion.TLSv1_2,
        }

    @property
    def node_socket_timeout_s(self) -> float:
        """Socket timeout of the per-node write clients: WAIT may block for wait_timeout_ms by
        design."""
        return max(self.socket_timeout_s, self.wait_timeout_ms / 1000 + 1.0)
