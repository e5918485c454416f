"""The TypeScript client (client/typescript) against a real gateway process: its own ``node --test``
suite run with ``STREAMGATE_URL`` set to a gateway started by ``served_gateway``.

Node and npm are needed, and the dev dependencies that ``make node-deps`` installs (``make test``
does): missing, the test skips locally and fails in CI. The package is built before the suite runs.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from collections.abc import Callable
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


def run(args: list[str], timeout_s: float, env: dict[str, str] | None = None
        ) -> subprocess.CompletedProcess[str]:
    """Run ``args`` in the package in a session of its own, so that a timeout kills the whole
    group (``node --test`` runs each test file in a child process) and leaves nothing behind."""
    with subprocess.Popen(args, cwd=PACKAGE, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, start_new_session=True) as process:
        try:
            output, _ = process.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            output, _ = process.communicate()
            pytest.fail(f"{' '.join(args)} timed out after {timeout_s}s:\n{output}")
    return subprocess.CompletedProcess(args, process.returncode, output)


def build_package(report_missing: Callable[[str], NoReturn]) -> None:
    """Compile to dist/ with the dev dependencies ``make node-deps`` installed."""
    if not (PACKAGE / "node_modules" / ".package-lock.json").is_file():
        report_missing("client/typescript has no node_modules: run `make node-deps`")
    built = run(["npm", "run", "build"], timeout_s=180)
    assert built.returncode == 0, built.stdout


@pytest.mark.timeout(420)
def test_typescript_client_suite_passes_against_a_served_gateway(
        served_gateway: str, report_missing: Callable[[str], NoReturn]) -> None:
    require_node(report_missing)
    build_package(report_missing)
    env = os.environ | {"STREAMGATE_URL": served_gateway, "NODE_NO_WARNINGS": "1"}
    done = run(["node", "--test", "--test-concurrency=1", *sorted(
        str(path.relative_to(PACKAGE)) for path in (PACKAGE / "test").glob("*.test.mjs"))],
        timeout_s=300, env=env)
    print(done.stdout)  # node's report, shown with -rP (and on failure below)
    assert done.returncode == 0, f"node --test failed:\n{done.stdout}"
    # a suite that found no tests would also exit 0
    assert "# fail 0" in done.stdout, done.stdout
    assert "# pass 0" not in done.stdout, done.stdout
