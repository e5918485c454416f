"""The TypeScript client (client/typescript) against a real gateway process: its own ``node --test``
suite run with ``STREAMGATE_URL`` set to a gateway started by ``served_gateway``.

Node and npm are needed, and the dev dependencies that ``make node-deps`` installs (``make test``
does): missing, the test skips locally and fails in CI. The package is built before the suite runs.
"""

from __future__ import annotations

import os
import secrets
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NoReturn

import orjson
import pytest
from node_package import PACKAGE, build_package, require_node, run
from served import serve_gateway


def post_json(url: str, body: Any) -> Any:
    request = urllib.request.Request(url, data=orjson.dumps(body), method="POST",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return orjson.loads(response.read())


def trimmed_topic(url: str, redis_cluster: Any) -> str:
    """A one-partition topic of 10 messages whose first 6 retention took: ``<topic> <cursor>
    <first kept>`` for a resume from the 3rd (``STREAMGATE_GAP``)."""
    topic = f"ts-gap-{secrets.token_hex(4)}"
    post_json(f"{url}/v1/topics", {"name": topic, "partitions": 1})
    published = post_json(f"{url}/v1/topics/{topic}/messages", {
        "acks": "all", "messages": [{"value": n} for n in range(10)]})
    offsets = [result["offset"] for result in published["results"]]
    key = f"sg:{{{topic}/0}}:log"
    with redis_cluster.primary_for_key(key).client() as conn:
        conn.execute_command("XTRIM", key, "MINID", offsets[6])
    return f"{topic} {offsets[2]} {offsets[6]}"


@pytest.mark.timeout(420)
def test_typescript_client_suite_passes_against_a_served_gateway(
        served_gateway: str, redis_cluster: Any, report_missing: Callable[[str], NoReturn]) -> None:
    require_node(report_missing)
    build_package(report_missing)
    env = os.environ | {"STREAMGATE_URL": served_gateway, "NODE_NO_WARNINGS": "1",
                        "STREAMGATE_GAP": trimmed_topic(served_gateway, redis_cluster)}
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
