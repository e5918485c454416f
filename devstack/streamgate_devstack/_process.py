"""Child server processes held by Popen, free loopback ports, binary lookup and readiness polling.

Shared plumbing of the Redis Cluster and etcd launchers. Every process is started in its own session
(so a Ctrl-C on the terminal reaches only us, and our orderly shutdown is not raced) and is stopped
by PID. An atexit hook kills whatever is still running when the interpreter exits.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Self

from streamgate_devstack.errors import MissingBinary, ProcessExitedError, StartupTimeoutError

LOOPBACK = "127.0.0.1"
POLL_INTERVAL_S = 0.05
PAUSE_TIMEOUT_S = 5.0  # a paused process's threads all stopped by then
STOP_TIMEOUT_S = 10.0
LOG_TAIL_LINES = 30

_PACKAGES = {"redis-server": "redis-server", "redis-cli": "redis-tools", "etcd": "etcd-server"}
# redis-cli ships in redis-tools, which apt pulls in with redis-server: name the package people
# expect.
_INSTALL_HINT = {"redis-cli": "redis-server"}

_live: set[ServerProcess] = set()
_live_lock = threading.Lock()


def require_binary(name: str) -> str:
    """Return the absolute path of `name` on PATH or raise MissingBinary naming its Debian
    package."""
    path = shutil.which(name)
    if path is None:
        raise MissingBinary(name, _INSTALL_HINT.get(name, _PACKAGES.get(name, name)))
    return path


def log_tail(path: Path | None, lines: int = LOG_TAIL_LINES) -> str:
    """Last `lines` lines of a log file, or a placeholder if it cannot be read."""
    if path is None:
        return ""
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        return f"<cannot read log: {exc}>"
    return "\n".join(text.splitlines()[-lines:])


def _die_with_parent_argv() -> list[str]:
    """`setpriv --pdeathsig KILL --`: a safety net for a parent killed by SIGKILL (atexit cannot run
    then).

    setpriv sets PR_SET_PDEATHSIG and execs the server, so no Python runs between fork and exec: a
    `preexec_fn` doing the same crashed the forked child (SIGSEGV) once gRPC threads (the etcd
    client) were running in the test process. Without setpriv there is no net; the atexit hook still
    kills on exit.
    """
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", "KILL", "--"] if setpriv else []


class StartedInWith(ABC):
    """Servers that ``with`` starts and stops (``stop`` is idempotent)."""

    @abstractmethod
    def start(self) -> None:
        """Start the servers and wait until they serve."""

    @abstractmethod
    def stop(self) -> None:
        """Stop the servers by PID; idempotent."""

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


class ServerProcess:
    """One server process started with Popen and controlled by PID; output appended to
    `output_path`."""

    def __init__(
        self, name: str, argv: Sequence[str], output_path: Path, log_path: Path | None = None
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.output_path = output_path
        self.log_path = log_path or output_path
        self._popen: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        """PID of the running process, None when not running."""
        return self._popen.pid if self.is_running() and self._popen is not None else None

    def is_running(self) -> bool:
        """True while the process exists (also when paused)."""
        return self._popen is not None and self._popen.poll() is None

    def start(self) -> None:
        """Start the process unless it is already running."""
        if self.is_running():
            return
        self.output_path.parent.mkdir(parents=True, exist_ok=True)
        # PDEATHSIG fires when the forking *thread* exits, so it is only armed for the main thread's
        # children.
        arm = sys.platform == "linux" and threading.current_thread() is threading.main_thread()
        with self.output_path.open("ab") as out:
            self._popen = subprocess.Popen(
                [*(_die_with_parent_argv() if arm else []), *self.argv],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        with _live_lock:
            _live.add(self)

    def send(self, sig: signal.Signals) -> None:
        """Send `sig` to the process if it is running."""
        if self._popen is not None and self._popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self._popen.send_signal(sig)

    def pause(self) -> None:
        """Freeze the process (SIGSTOP): it keeps its sockets but answers nothing. Returns once
        every thread has stopped: a thread inside a slow system call (an fsync on a busy disk)
        stops only when the call returns, and could answer a request meanwhile."""
        self.send(signal.SIGSTOP)
        if self._popen is not None and sys.platform == "linux":
            _until_stopped(self._popen.pid, PAUSE_TIMEOUT_S)

    def resume(self) -> None:
        """Continue a paused process (SIGCONT)."""
        self.send(signal.SIGCONT)

    def kill(self) -> None:
        """SIGKILL the process and reap it: no graceful shutdown, no final fsync."""
        self.send(signal.SIGKILL)
        self._reap(STOP_TIMEOUT_S)

    def terminate(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """SIGTERM, wait up to `timeout_s`, then SIGKILL. Idempotent."""
        self.send(signal.SIGTERM)
        self.send(signal.SIGCONT)  # a paused process only handles SIGTERM once continued
        if not self._reap(timeout_s):
            self.kill()

    def _reap(self, timeout_s: float) -> bool:
        if self._popen is None:
            return True
        try:
            self._popen.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return False
        with _live_lock:
            _live.discard(self)
        return True

    def check_alive(self) -> None:
        """Raise ProcessExitedError (with the log tail) if the process has exited."""
        code = self._popen.poll() if self._popen is not None else None
        if code is not None:
            raise ProcessExitedError(self.name, code, self.log_path, self.diagnostics())

    def diagnostics(self) -> str:
        """Tail of the server log, plus the captured stdout/stderr when that is a separate file."""
        tail = log_tail(self.log_path)
        if self.output_path != self.log_path:
            output = log_tail(self.output_path)
            if output.strip():
                tail += f"\n--- last lines of {self.output_path} ---\n{output}"
        return tail


def terminate_all(processes: Sequence[ServerProcess], timeout_s: float = STOP_TIMEOUT_S) -> None:
    """SIGTERM every process at once, then wait for each (SIGKILL past the deadline)."""
    for proc in processes:
        proc.send(signal.SIGTERM)
        proc.send(signal.SIGCONT)
    deadline = time.monotonic() + timeout_s
    for proc in processes:
        proc.terminate(max(0.1, deadline - time.monotonic()))


def wait_until(
    what: str,
    probe: Callable[[], str | None],
    timeout_s: float,
    processes: Sequence[ServerProcess],
) -> None:
    """Poll `probe` (None = ready, else the reason it is not) until ready or the deadline passes.

    Raises ProcessExitedError as soon as one of `processes` dies, StartupTimeoutError (with the log
    tail of the first process) at the deadline.
    """
    deadline = time.monotonic() + timeout_s
    reason = "not probed yet"
    while True:
        for proc in processes:
            proc.check_alive()
        reason = probe() or ""
        if not reason:
            return
        if time.monotonic() >= deadline:
            log = processes[0].log_path if processes else None
            tail = processes[0].diagnostics() if processes else ""
            raise StartupTimeoutError(what, timeout_s, reason, log, tail)
        time.sleep(POLL_INTERVAL_S)


@atexit.register
def _kill_leftovers() -> None:
    with _live_lock:
        leftovers = list(_live)
    for proc in leftovers:
        proc.send(signal.SIGKILL)
        proc.send(signal.SIGCONT)
    for proc in leftovers:
        proc._reap(2.0)


def _until_stopped(pid: int, timeout_s: float) -> None:
    """Wait until every thread of ``pid`` is stopped (state T), at most ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and not _all_stopped(pid):
        time.sleep(0.005)


def _all_stopped(pid: int) -> bool:
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
        states = [Path(f"/proc/{pid}/task/{task}/stat").read_text().rpartition(")")[2].split()[0]
                  for task in tasks]
    except (OSError, IndexError):  # gone, or a thread ended while being read
        return False
    return all(state in ("T", "t") for state in states)
