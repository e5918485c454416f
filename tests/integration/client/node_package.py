"""client/typescript as the tests see it: node and its dev dependencies required, ``npm run build``
into dist/ under a lock shared by every test worker, commands run in the package with a
kill-the-group timeout."""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NoReturn

import pytest

PACKAGE = Path(__file__).resolve().parents[3] / "client" / "typescript"
MIN_NODE_MAJOR = 20


def require_node(report_missing: Callable[[str], NoReturn]) -> None:
    """Skip locally, fail in CI, without node >= 20 and npm."""
    missing = [name for name in ("node", "npm") if shutil.which(name) is None]
    if missing:
        report_missing(f"binaries are missing: {missing}")
    version = subprocess.run(["node", "--version"], capture_output=True, text=True, check=True,
                             timeout=30).stdout.strip()
    if int(version.lstrip("v").split(".")[0]) < MIN_NODE_MAJOR:
        report_missing(f"node >= {MIN_NODE_MAJOR} is needed, found {version}")


def run(args: list[str], timeout_s: float, env: dict[str, str] | None = None,
        cwd: Path = PACKAGE) -> subprocess.CompletedProcess[str]:
    """Run ``args`` in the package (or ``cwd``) in a session of its own, so that a timeout kills
    the whole group (``node --test`` runs each test file in a child process) and leaves nothing
    behind."""
    with subprocess.Popen(args, cwd=cwd, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, start_new_session=True) as process:
        try:
            output, _ = process.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            output, _ = process.communicate()
            pytest.fail(f"{' '.join(args)} timed out after {timeout_s}s:\n{output}")
    return subprocess.CompletedProcess(args, process.returncode, output)


BUILT_STAMP = PACKAGE / "node_modules" / ".dist-built"


@contextmanager
def dist_lock(exclusive: bool) -> Iterator[None]:
    """dist/ held against the other test workers: a build empties it first, so whoever reads it
    holds it shared and whoever builds or packs (``prepack`` builds) holds it alone."""
    with open(PACKAGE / "node_modules" / ".dist.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def dist_is_current() -> bool:
    if not (BUILT_STAMP.is_file() and (PACKAGE / "dist" / "index.js").is_file()):
        return False
    sources = [PACKAGE / "tsconfig.json", PACKAGE / "package.json",
               *(PACKAGE / "src").rglob("*")]
    return max(path.stat().st_mtime for path in sources) <= BUILT_STAMP.stat().st_mtime


@contextmanager
def built_package(report_missing: Callable[[str], NoReturn]) -> Iterator[None]:
    """The client compiled to dist/ with the dev dependencies ``make node-deps`` installed, and
    dist/ left as it is (no worker rebuilds it) until the block ends."""
    require_node_modules(report_missing)
    with dist_lock(exclusive=True):
        if not dist_is_current():
            built = run(["npm", "run", "build"], timeout_s=180)
            assert built.returncode == 0, built.stdout
            BUILT_STAMP.touch()
    with dist_lock(exclusive=False):
        yield


def build_console(report_missing: Callable[[str], NoReturn]) -> None:
    """``make console``: the console into the gateway's package, only when a source is newer than
    the build (other tests serve the console meanwhile and must never find it half rebuilt)."""
    require_node_modules(report_missing)
    built = run(["make", "--no-print-directory", "console"], timeout_s=180, cwd=PACKAGE.parents[1])
    assert built.returncode == 0, built.stdout


def require_node_modules(report_missing: Callable[[str], NoReturn]) -> None:
    """Skip locally, fail in CI, without the package's dev dependencies."""
    if not (PACKAGE / "node_modules" / ".package-lock.json").is_file():
        report_missing("client/typescript has no node_modules: run `make node-deps`")
