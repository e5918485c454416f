"""A single-member local etcd as a child process, for development and integration tests.

The member's ports are recorded in `<data_dir>/ports.json` on first start so a restart (same data
dir) comes back on the same addresses: the peer URL is part of the member's stored identity.
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from streamgate_devstack._process import (
    LOOPBACK,
    STOP_TIMEOUT_S,
    ServerProcess,
    StartedInWith,
    require_binary,
    wait_until,
)
from streamgate_devstack.certs import TlsFiles
from streamgate_devstack.ports import free_ports

PORTS_FILE = "ports.json"
HEALTH_TIMEOUT_S = 1.0


@dataclass(frozen=True)
class EtcdConfig:
    """Location and ports of a local single-member etcd; None (or 0) ports pick free loopback
    ports."""

    data_dir: Path
    client_port: int | None = None
    peer_port: int | None = None
    name: str = "streamgate-dev"
    startup_timeout_s: float = 30.0
    host: str = LOOPBACK
    # https:// client URL with client certificates required (--client-cert-auth); the peer URL stays
    # plain http on loopback (a single member has no peers to talk to).
    tls: TlsFiles | None = None


class EtcdProcess(StartedInWith):
    """One `etcd` member held as a child process. Context manager; stop() is idempotent."""

    def __init__(self, config: EtcdConfig) -> None:
        self.config = config
        self.host = config.host
        self.port, self.peer_port = self._resolve_ports()
        self._process: ServerProcess | None = None

    @property
    def endpoint(self) -> str:
        """The client port as "host:port", the form etcd clients take."""
        return f"{self.host}:{self.port}"

    @property
    def client_url(self) -> str:
        """http(s)://host:port of the client port."""
        return f"{'https' if self.config.tls else 'http'}://{self.endpoint}"

    @property
    def pid(self) -> int | None:
        """PID of the running process, None when stopped."""
        return self._process.pid if self._process is not None else None

    @property
    def log_path(self) -> Path:
        """File receiving etcd's stdout and stderr."""
        return self.config.data_dir / "etcd.log"

    def is_running(self) -> bool:
        """True while the process exists (also when paused)."""
        return self._process is not None and self._process.is_running()

    def start(self) -> None:
        """Start etcd (no-op while running) and wait until /health reports true."""
        if self.is_running():
            return
        binary = require_binary("etcd")
        self.config.data_dir.mkdir(parents=True, exist_ok=True)
        self._save_ports()
        self._process = ServerProcess(f"etcd {self.endpoint}", self._argv(binary), self.log_path)
        try:
            self._process.start()
            self.wait_ready(self.config.startup_timeout_s)
        except BaseException:
            self.stop()
            raise

    def wait_ready(self, timeout_s: float | None = None) -> None:
        """Wait until GET /health answers {"health": "true"}; else StartupTimeoutError with the log
        tail."""
        timeout = self.config.startup_timeout_s if timeout_s is None else timeout_s
        procs = [self._process] if self._process is not None else []
        wait_until(f"etcd {self.endpoint}", self._health_problem, timeout, procs)

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """SIGTERM, wait, SIGKILL past `timeout_s`. Idempotent."""
        if self._process is not None:
            self._process.terminate(timeout_s)

    def kill(self) -> None:
        """SIGKILL etcd (crash without shutdown)."""
        if self._process is not None:
            self._process.kill()

    def pause(self) -> None:
        """SIGSTOP: etcd keeps its sockets but answers nothing."""
        if self._process is not None:
            self._process.pause()

    def resume(self) -> None:
        """SIGCONT a paused etcd."""
        if self._process is not None:
            self._process.resume()

    def restart(self) -> None:
        """Stop and start again on the same ports with the same data."""
        self.stop()
        self.start()

    def _argv(self, binary: str) -> list[str]:
        peer_url = f"http://{self.host}:{self.peer_port}"
        return [
            binary,
            "--name", self.config.name,
            "--data-dir", str(self.config.data_dir / "member-data"),
            "--listen-client-urls", self.client_url,
            "--advertise-client-urls", self.client_url,
            "--listen-peer-urls", peer_url,
            "--initial-advertise-peer-urls", peer_url,
            "--initial-cluster", f"{self.config.name}={peer_url}",
            "--initial-cluster-state", "new",
            *self._tls_argv(),
        ]  # fmt: skip

    def _tls_argv(self) -> list[str]:
        tls = self.config.tls
        if tls is None:
            return []
        return [
            "--cert-file", str(tls.server_cert),
            "--key-file", str(tls.server_key),
            "--trusted-ca-file", str(tls.ca_cert),
            "--client-cert-auth",
        ]  # fmt: skip

    def _health_context(self) -> ssl.SSLContext | None:
        tls = self.config.tls
        if tls is None:
            return None
        context = ssl.create_default_context(cafile=str(tls.ca_cert))
        context.load_cert_chain(str(tls.client_cert), str(tls.client_key))
        return context

    def _health_problem(self) -> str | None:
        try:
            with urllib.request.urlopen(f"{self.client_url}/health", timeout=HEALTH_TIMEOUT_S,
                                        context=self._health_context()) as resp:
                body = json.loads(resp.read())
        except (OSError, ValueError, urllib.error.URLError) as exc:
            return f"/health not answering: {exc}"
        if not isinstance(body, dict) or body.get("health") != "true":
            return f"/health answered {body!r}"
        return None

    def _resolve_ports(self) -> tuple[int, int]:
        # Explicit ports win; otherwise reuse the ports of an earlier run on this data dir, else
        # free ones.
        # 0 = free port
        client, peer = self.config.client_port or None, self.config.peer_port or None
        stored = self.config.data_dir / PORTS_FILE
        if stored.exists():
            data = json.loads(stored.read_text())
            client = int(data["client_port"]) if client is None else client
            peer = int(data["peer_port"]) if peer is None else peer
        if client is None or peer is None:
            picked = free_ports(2)
            client = picked[0] if client is None else client
            peer = picked[1] if peer is None else peer
        return client, peer

    def _save_ports(self) -> None:
        data = {"client_port": self.port, "peer_port": self.peer_port}
        (self.config.data_dir / PORTS_FILE).write_text(json.dumps(data) + "\n")
