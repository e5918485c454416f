"""Spark processes for tests (standalone master and workers, spark-submit, job drivers), each in a
process group of its own and stopped by SIGKILL to that whole group."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Self, TypeVar

import pyspark

ROOT = Path(__file__).resolve().parents[2]
SPARK_HOME = Path(pyspark.__file__).resolve().parent
LOOPBACK = "127.0.0.1"

T = TypeVar("T")


def spark_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """The environment of a Spark child process: SPARK_HOME is the pyspark package, everything binds
    to loopback, scratch space and Python workers come from ``tmp_path`` and this venv."""
    env = {name: value for name, value in os.environ.items()
           # a child of a process that holds a SparkSession must start its own JVM
           if not name.startswith("PYSPARK_GATEWAY_")}
    local_dirs = tmp_path / "spark-local"
    local_dirs.mkdir(parents=True, exist_ok=True)
    env.update(SPARK_HOME=str(SPARK_HOME), SPARK_LOCAL_IP=LOOPBACK,
               SPARK_LOCAL_DIRS=str(local_dirs), PYSPARK_PYTHON=sys.executable, **extra)
    return env


class ProcessGroup:
    """A child started in a session (and so a process group) of its own, output to ``log``.

    ``kill()`` SIGKILLs the whole group (a JVM's executors and Python workers with it) and waits
    until no member is left. A test that dies hard still takes the child with it (setpriv's
    parent-death signal).
    """

    def __init__(self, argv: Sequence[str], env: Mapping[str, str], log: Path,
                 cwd: Path = ROOT) -> None:
        self.log = log
        log.parent.mkdir(parents=True, exist_ok=True)
        setpriv = shutil.which("setpriv")
        net = [setpriv, "--pdeathsig", "KILL", "--"] if setpriv else []
        with log.open("ab") as out:
            self.popen = subprocess.Popen([*net, *argv], env=dict(env), cwd=cwd,
                                          stdin=subprocess.DEVNULL, stdout=out,
                                          stderr=subprocess.STDOUT, start_new_session=True)
        self.pgid = self.popen.pid

    def running(self) -> bool:
        """True while the group's leader has not exited."""
        return self.popen.poll() is None

    def wait(self, timeout_s: float) -> int:
        """The leader's exit code; kills the group when it is not done within ``timeout_s``."""
        try:
            return self.popen.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"not done in {timeout_s} s:\n{self.log_tail()}") from None

    def kill(self) -> None:
        """SIGKILL every process of the group, reap the leader, wait until the group is empty."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pgid, signal.SIGKILL)
        self.popen.wait(timeout=30)
        wait_for(lambda: not group_members(self.pgid), 30,
                 f"process group {self.pgid} to empty")

    def log_tail(self, lines: int = 40) -> str:
        """The last lines of the child's output."""
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.kill()


def group_members(pgid: int) -> list[int]:
    """PIDs of the live (not zombie) processes in process group ``pgid``."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # "pid (comm) state ppid pgrp ...": comm may hold spaces and parentheses
        state, _, pgrp, *_ = stat[stat.rindex(")") + 2:].split()
        if int(pgrp) == pgid and state != "Z":
            members.append(int(entry.name))
    return members


def wait_for(probe: Callable[[], T], timeout_s: float, what: str,
             interval_s: float = 0.2) -> T:
    """Poll ``probe`` until it returns something truthy; AssertionError naming ``what`` after
    ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not (result := probe()):
        assert time.monotonic() < deadline, f"timed out after {timeout_s} s waiting for {what}"
        time.sleep(interval_s)
    return result


def newest(log: Path) -> int:
    """The newest batch number in a checkpoint log, -1 when none."""
    return max((int(p.name) for p in log.glob("[0-9]*")), default=-1) if log.exists() else -1
