"""The TypeScript client (client/typescript) against a real gateway process: its own ``node --test``
suite run with ``STREAMGATE_URL`` set to a gateway started by ``served_gateway``.

Node and npm are needed, and the dev dependencies that ``make node-deps`` installs (``make test``
does): missing, the test skips locally and fails in CI. The package is built before the suite runs.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import NoReturn

import pytest
from node_package import PACKAGE, build_package, require_node, run


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
