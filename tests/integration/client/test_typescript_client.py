"""The TypeScript client (client/typescript) against a real gateway process: its own ``node --test``
suite run with ``STREAMGATE_URL`` set to a gateway started by ``served_gateway``.

Node and npm are needed, and the dev dependencies that ``make node-deps`` installs (``make test``
does): missing, the test skips locally and fails in CI. The package is built before the suite runs.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NoReturn

import pytest
from node_package import PACKAGE, build_package, require_node, run
from served import serve_gateway


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


JWT_AUTH = '''
[jwt]
algorithms = ["HS256"]
hmac_secret_env = "TS_TEST_JWT_SECRET"
leeway_s = 0

[[rules]]
principals = ["jwt-user"]
topics = ["*"]
actions = ["publish", "subscribe", "admin"]
'''


@pytest.fixture
def jwt_gateway(redis_cluster: Any, etcd_server: Any, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """A gateway checking HS256 JWTs without leeway: its URL and the secret."""
    secret = secrets.token_urlsafe(32)
    (tmp_path / "auth.toml").write_text(JWT_AUTH)
    for url in serve_gateway(redis_cluster, etcd_server, {
            "STREAMGATE_AUTH_MODE": "required",
            "STREAMGATE_AUTH_CONFIG_PATH": str(tmp_path / "auth.toml"),
            "TS_TEST_JWT_SECRET": secret}):
        yield url, secret


@pytest.mark.timeout(300)
def test_typescript_client_refreshes_expired_tokens_against_a_jwt_gateway(
        jwt_gateway: tuple[str, str], report_missing: Callable[[str], NoReturn]) -> None:
    require_node(report_missing)
    build_package(report_missing)
    url, secret = jwt_gateway
    env = os.environ | {"STREAMGATE_URL": url, "STREAMGATE_JWT_SECRET": secret,
                        "NODE_NO_WARNINGS": "1"}
    done = run(["node", "--test", "--test-concurrency=1", *sorted(
        str(path.relative_to(PACKAGE)) for path in (PACKAGE / "test" / "auth").glob("*.test.mjs"))],
        timeout_s=240, env=env)
    print(done.stdout)
    assert done.returncode == 0, f"node --test failed:\n{done.stdout}"
    assert "# fail 0" in done.stdout, done.stdout
    assert "# pass 0" not in done.stdout, done.stdout
