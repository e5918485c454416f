"""Connection and durability settings of the Redis store (one frozen object, built once by the caller)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class RedisStoreSettings:
    """How the store reaches the Redis Cluster and how long it keeps trying.

    ``min_insync_replicas`` and ``wait_timeout_ms`` drive WAIT for ``Acks.ALL``; ``write_deadline_s`` and
    ``read_deadline_s`` bound a whole call including its retries across failovers.
    """

    startup_nodes: list[tuple[str, int]] = field(default_factory=lambda: [("127.0.0.1", 6379)])
    min_insync_replicas: int = 1
    wait_timeout_ms: int = 1000
    write_deadline_s: float = 10.0
    read_deadline_s: float = 5.0
    socket_timeout_s: float = 5.0
    socket_connect_timeout_s: float = 2.0
    max_connections_per_node: int = 100
    retry_backoff_s: float = 0.05
    retry_backoff_max_s: float = 0.5
    username: str | None = None
    password: str | None = None
    client_name: str | None = "streamgate"

    def __post_init__(self) -> None:
        if not self.startup_nodes:
            raise ValueError("startup_nodes must not be empty")
        if self.min_insync_replicas < 0 or self.wait_timeout_ms < 0:
            raise ValueError("min_insync_replicas and wait_timeout_ms must be >= 0")
        if self.write_deadline_s <= 0 or self.read_deadline_s <= 0:
            raise ValueError("deadlines must be > 0")

    @property
    def node_socket_timeout_s(self) -> float:
        """Socket timeout of the per-node write clients: WAIT may block for wait_timeout_ms by design."""
        return max(self.socket_timeout_s, self.wait_timeout_ms / 1000 + 1.0)
