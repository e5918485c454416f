"""One `redis-server` child process of the local Redis Cluster (its argv, lifecycle and client) and
the config every node of the cluster is started from."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from streamgate_devstack._process import LOOPBACK, STOP_TIMEOUT_S, ServerProcess, wait_until
from streamgate_devstack.certs import TlsFiles

Role = Literal["primary", "replica"]
# what a probe of a stopped, paused or not yet clustered node raises
PROBE_ERRORS = (redis.RedisError, OSError)


@dataclass(frozen=True)
class RedisClusterConfig:
    """Shape and location of a local Redis Cluster.

    `base_port` None (or 0) picks free loopback ports; otherwise node i listens on base_port + i and
    its cluster bus on base_port + 10000 + i.
    """

    data_dir: Path
    primaries: int = 3
    replicas_per_primary: int = 1
    base_port: int | None = None
    cluster_node_timeout_ms: int = 3000
    startup_timeout_s: float = 30.0
    host: str = LOOPBACK
    # every node's maxmemory, with noeviction: a full node refuses writes and keeps what it
    # acknowledged; 0 leaves it unset (tests that never fill it)
    maxmemory_bytes: int = 0
    # TLS only: client port, cluster bus and replication over TLS, client certificates required
    # (mutual TLS).
    tls: TlsFiles | None = None

    def __post_init__(self) -> None:
        if self.primaries < 3:
            raise ValueError("a Redis Cluster needs at least 3 primaries")
        if self.replicas_per_primary < 0:
            raise ValueError("replicas_per_primary must be >= 0")
        if self.maxmemory_bytes < 0:
            raise ValueError("maxmemory_bytes must be >= 0")

    @property
    def node_count(self) -> int:
        """Primaries plus all their replicas."""
        return self.primaries * (1 + self.replicas_per_primary)

    def client_tls_options(self) -> dict[str, Any]:
        """redis-py keyword arguments of a client of this cluster: TLS with the client certificate,
        or none."""
        if self.tls is None:
            return {}
        return {"ssl": True, "ssl_ca_certs": str(self.tls.ca_cert),
                "ssl_certfile": str(self.tls.client_cert), "ssl_keyfile": str(self.tls.client_key)}

    def cli_argv(self, cli: str) -> list[str]:
        """`redis-cli` with the TLS flags this cluster needs."""
        if self.tls is None:
            return [cli]
        return [cli, "--tls", "--cacert", str(self.tls.ca_cert), "--cert",
                str(self.tls.client_cert), "--key", str(self.tls.client_key)]

    def memory_argv(self) -> list[str]:
        """The memory cap of every node: refuse writes when full (noeviction), never evict."""
        if not self.maxmemory_bytes:
            return []
        return ["--maxmemory", str(self.maxmemory_bytes), "--maxmemory-policy", "noeviction"]

    def server_tls_argv(self, port: int) -> list[str]:
        """The listening flags of a node: `--port` in plaintext, or a TLS-only node on `port`."""
        if self.tls is None:
            return ["--port", str(port)]
        return [
            "--port", "0",
            "--tls-port", str(port),
            "--tls-cluster", "yes",
            "--tls-replication", "yes",
            "--tls-auth-clients", "yes",
            "--tls-cert-file", str(self.tls.server_cert),
            "--tls-key-file", str(self.tls.server_key),
            "--tls-ca-cert-file", str(self.tls.ca_cert),
        ]  # fmt: skip


class RedisNode:
    """One `redis-server` process of the cluster, controlled by PID."""

    def __init__(self, config: RedisClusterConfig, port: int, bus_port: int, role: Role,
                 server: str) -> None:
        self.host = config.host
        self.port = port
        self.bus_port = bus_port
        self.role: Role = role
        self.data_dir = config.data_dir / str(port)
        argv = [
            server,
            *config.server_tls_argv(port),
            "--cluster-port", str(bus_port),
            "--cluster-enabled", "yes",
            "--cluster-config-file", "nodes.conf",
            "--cluster-node-timeout", str(config.cluster_node_timeout_ms),
            # a failed shard must not take the healthy ones down
            "--cluster-require-full-coverage", "no",
            "--appendonly", "yes",
            "--appendfsync", "everysec",
            "--repl-diskless-sync-delay", "0",
            "--save", "",
            "--protected-mode", "no",
            "--bind", config.host,
            "--daemonize", "no",
            "--dir", str(self.data_dir),
            "--logfile", str(self.data_dir / "redis.log"),
            *config.memory_argv(),
        ]  # fmt: skip
        self._client_tls = config.client_tls_options()
        self.process = ServerProcess(
            f"redis-server {config.host}:{port}",
            argv,
            output_path=self.data_dir / "stdout.log",
            log_path=self.data_dir / "redis.log",
        )

    def __repr__(self) -> str:
        return (
            f"RedisNode({self.host}:{self.port}, bus={self.bus_port}, role={self.role}, "
            f"pid={self.pid})"
        )

    @property
    def address(self) -> tuple[str, int]:
        """(host, port) of the node's client port."""
        return (self.host, self.port)

    @property
    def pid(self) -> int | None:
        """PID of the running process, None when stopped."""
        return self.process.pid

    def is_running(self) -> bool:
        """True while the process exists (also when paused)."""
        return self.process.is_running()

    def client(self, **kwargs: Any) -> redis.Redis:
        """A new plain (non-cluster) client for this node; the caller closes it.

        Defaults: decoded replies, 2 s timeouts and no retries (redis-py retries timeouts with
        backoff by default, which turns a probe of a paused node into seconds of waiting).
        """
        options: dict[str, Any] = {
            "socket_timeout": 2.0,
            "socket_connect_timeout": 2.0,
            "decode_responses": True,
            "retry": Retry(NoBackoff(), 0),
            **self._client_tls,
        }
        options.update(kwargs)
        return redis.Redis(host=self.host, port=self.port, **options)

    def start(self) -> None:
        """Start the process (no-op while running); does not wait for readiness."""
        self.process.start()

    def pause(self) -> None:
        """SIGSTOP: the node keeps its sockets open but stops answering (a hung primary)."""
        self.process.pause()

    def resume(self) -> None:
        """SIGCONT a paused node."""
        self.process.resume()

    def kill(self) -> None:
        """SIGKILL the node (crash: no shutdown, AOF loses up to ~1 s with everysec)."""
        self.process.kill()

    def terminate(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """Graceful stop: SIGTERM, wait, SIGKILL past `timeout_s`. Idempotent."""
        self.process.terminate(timeout_s)

    def restart(self, timeout_s: float = 30.0) -> None:
        """Stop (if running) and start again with the same ports and data; wait until it answers
        PING.

        A primary that was failed over rejoins as a replica of its successor (its nodes.conf is
        outdated); call the cluster's wait_ready() afterwards to wait for that and refresh every
        node's `role`.
        """
        self.terminate()
        self.start()
        wait_until(f"redis-server {self.host}:{self.port}", self._ping_probe, timeout_s,
                   [self.process])

    def node_id(self) -> str:
        """The node's cluster id (CLUSTER MYID)."""
        with self.client() as conn:
            return str(conn.execute_command("CLUSTER", "MYID"))

    def current_role(self) -> Role:
        """Role as the node reports it now (changes after a failover)."""
        with self.client() as conn:
            info = conn.info("replication")
        return "primary" if info.get("role") == "master" else "replica"

    def _ping_probe(self) -> str | None:
        try:
            with self.client(socket_timeout=0.5) as conn:
                conn.ping()
        except PROBE_ERRORS as exc:
            return f"{self.port} does not answer PING: {exc}"
        return None
