"""``streamgate serve --workers N``: N gateway processes sharing one port, and the parent that
watches them.

Each worker is a plain ``streamgate serve`` child (a fresh interpreter, so no event loop or
connection is shared across a fork) that binds the port with SO_REUSEPORT: the kernel spreads new
connections over the workers. Worker ``i`` is its own gateway node, ``<node_id>-w<i>`` (own Redis
consumer name, own etcd node registration and partition duties, own /metrics). The parent serves
nothing: it forwards SIGTERM/SIGINT to the workers and waits for them; it restarts none. If a worker
exits on its own, the parent stops the others and exits non-zero, so a supervisor (systemd,
Kubernetes) restarts the whole group.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import FrameType

from gateway.settings import ENV_PREFIX, GatewaySettings

log = logging.getLogger(__name__)

# past aiohttp's 60 s shutdown timeout for open connections, then SIGKILL
WORKER_STOP_TIMEOUT_S = 75.0
POLL_INTERVAL_S = 0.1
PR_SET_PDEATHSIG = 1  # linux/prctl.h
FORWARDED_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def worker_node_id(node_id: str, index: int) -> str:
    """The node id of worker ``index`` of a gateway whose node id is ``node_id``."""
    return f"{node_id}-w{index}"


def worker_command(log_level: str, settings: GatewaySettings, index: int) -> list[str]:
    """The command line of worker ``index``: ``serve`` on the shared port, marked as a worker."""
    return [sys.executable, "-m", "gateway.cli", "--log-level", log_level, "serve", "--host",
            settings.host, "--port", str(settings.port), "--worker-index", str(index)]


def worker_env(env: Mapping[str, str], settings: GatewaySettings, index: int) -> dict[str, str]:
    """The worker's environment: the parent's, with the worker's own node id."""
    return {**env, ENV_PREFIX + "NODE_ID": worker_node_id(settings.node_id, index)}


def _die_with_parent(parent_pid: int) -> Callable[[], None]:
    """A pre-exec hook: the worker gets SIGTERM if the parent dies, even by SIGKILL (Linux;
    elsewhere a no-op)."""

    def hook() -> None:
        if sys.platform.startswith("linux"):
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent_pid:  # the parent died before the hook ran
            os._exit(1)

    return hook


@dataclass
class WorkerGroup:
    """The running workers and the parent's view of them."""

    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    stopping: bool = False
    failed: int = 0  # the exit code of the first worker that exited on its own (1 if it exited 0)

    def signal_all(self, signum: int) -> None:
        """Send ``signum`` to every worker still running."""
        for process in self.processes:
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):  # exited since poll()
                    process.send_signal(signum)

    def stop(self, signum: int = signal.SIGTERM) -> None:
        """Ask every worker to stop (once per signal received)."""
        self.stopping = True
        self.signal_all(signum)

    def running(self) -> list[subprocess.Popen[bytes]]:
        """Workers that have not exited yet."""
        return [process for process in self.processes if process.poll() is None]

    def note_exits(self) -> None:
        """A worker that exited while nobody asked it to fails the group: stop the others."""
        if self.stopping:
            return
        for process in self.processes:
            code = process.poll()
            if code is not None:
                log.error("worker pid %d exited with %d; stopping the other workers", process.pid,
                          code)
                self.failed = code if code > 0 else 1
                self.stop()
                return


def with_receipt_secret(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` with a receipt secret: the configured one, else one drawn here for the whole worker
    group, so a pull receipt issued by one worker is accepted by the others (the kernel spreads
    requests over them)."""
    name = ENV_PREFIX + "RECEIPT_SECRET"
    return {**env, name: env.get(name) or secrets.token_urlsafe(32)}


def run_workers(count: int, settings: GatewaySettings, log_level: str,
                env: Mapping[str, str]) -> int:
    """Start ``count`` workers, forward SIGTERM/SIGINT, wait for all; 0 after a requested stop, else
    non-zero."""
    group, env = WorkerGroup(), with_receipt_secret(env)

    def forward(signum: int, _frame: FrameType | None) -> None:
        group.stop(signum)

    previous = {signum: signal.signal(signum, forward) for signum in FORWARDED_SIGNALS}
    try:
        for index in range(count):
            group.processes.append(subprocess.Popen(
                worker_command(log_level, settings, index), env=worker_env(env, settings, index),
                # Ctrl-C reaches workers via us only
                preexec_fn=_die_with_parent(os.getpid()), process_group=0))
        log.info("started %d workers on %s:%d: %s", count, settings.host, settings.port,
                 ", ".join(str(p.pid) for p in group.processes))
        _wait(group)
    finally:
        group.stop()
        _reap(group.processes)
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    return group.failed if group.failed else _exit_code(group.processes)


def _wait(group: WorkerGroup) -> None:
    """Until every worker has exited; stragglers get SIGKILL ``WORKER_STOP_TIMEOUT_S`` after the
    stop."""
    stop_deadline: float | None = None
    while group.running():
        group.note_exits()
        if group.stopping and stop_deadline is None:
            stop_deadline = time.monotonic() + WORKER_STOP_TIMEOUT_S
        if stop_deadline is not None and time.monotonic() > stop_deadline:
            log.error("workers did not stop in %.0f s: killing them", WORKER_STOP_TIMEOUT_S)
            group.signal_all(signal.SIGKILL)
            stop_deadline = None
        time.sleep(POLL_INTERVAL_S)


def _reap(processes: Sequence[subprocess.Popen[bytes]]) -> None:
    for process in processes:
        try:
            process.wait(timeout=WORKER_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _exit_code(processes: Sequence[subprocess.Popen[bytes]]) -> int:
    """0 when every worker stopped cleanly after the requested stop, else the first non-zero
    code."""
    code = next((p.returncode for p in processes if p.returncode not in (0, None)), 0)
    return 128 - code if code < 0 else code  # killed by signal n: 128 + n, as a shell reports it
