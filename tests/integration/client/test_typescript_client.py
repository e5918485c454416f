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
from node_package import PACKAGE, built_package, require_node, run
from served import serve_gateway

from gateway.auth.keys import hash_api_key, new_api_key


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
def test_typescript_suite_passes_against_a_gateway(
        served_gateway: str, redis_cluster: Any, report_missing: Callable[[str], NoReturn]) -> None:
    require_node(report_missing)
    env = os.environ | {"STREAMGATE_URL": served_gateway, "NODE_NO_WARNINGS": "1",
                        "STREAMGATE_GAP": trimmed_topic(served_gateway, redis_cluster)}
    with built_package(report_missing):
        done = run(["node", "--test", "--test-concurrency=1", *sorted(
            str(path.relative_to(PACKAGE)) for path in (PACKAGE / "test").glob("*.test.mjs"))],
            timeout_s=300, env=env)
    print(done.stdout)  # node's report, shown with -rP (and on failure below)
    assert done.returncode == 0, f"node --test failed:\n{done.stdout}"
    # a suite that found no tests would also exit 0
    assert "# fail 0" in done.stdout, done.stdout
    assert "# pass 0" not in done.stdout, done.stdout


SECURED_AUTH = '''
[jwt]
algorithms = ["HS256"]
hmac_secret_env = "TS_TEST_JWT_SECRET"
leeway_s = 0

[[api_keys]]
principal = "key-user"
sha256 = "{full}"

[[api_keys]]
principal = "limited"
sha256 = "{limited}"

[[rules]]
principals = ["jwt-user", "key-user"]
topics = ["*"]
actions = ["publish", "subscribe", "admin"]

[[rules]]
principals = ["limited"]
topics = ["open-*"]
actions = ["publish", "subscribe"]
'''


@pytest.fixture
def secured_gateway(redis_cluster: Any, etcd_server: Any, tmp_path: Path
                    ) -> Iterator[tuple[str, dict[str, str]]]:
    """A gateway requiring credentials: HS256 JWTs checked without leeway, an API key that may do
    everything and one that may only publish and subscribe on ``open-*``. Its URL, and the
    environment that tells test/auth/ the secret and the keys."""
    secrets_env = {"STREAMGATE_JWT_SECRET": secrets.token_urlsafe(32),
                   "STREAMGATE_API_KEY": new_api_key(), "STREAMGATE_LIMITED_KEY": new_api_key()}
    (tmp_path / "auth.toml").write_text(SECURED_AUTH.format(
        full=hash_api_key(secrets_env["STREAMGATE_API_KEY"]),
        limited=hash_api_key(secrets_env["STREAMGATE_LIMITED_KEY"])))
    for url in serve_gateway(redis_cluster, etcd_server, {
            "STREAMGATE_AUTH_MODE": "required",
            "STREAMGATE_AUTH_CONFIG_PATH": str(tmp_path / "auth.toml"),
            "TS_TEST_JWT_SECRET": secrets_env["STREAMGATE_JWT_SECRET"]}):
        yield url, secrets_env


@pytest.mark.timeout(300)
def test_typescript_client_refreshes_tokens_and_uses_keys(
        secured_gateway: tuple[str, dict[str, str]],
        report_missing: Callable[[str], NoReturn]) -> None:
    require_node(report_missing)
    url, secrets_env = secured_gateway
    env = os.environ | secrets_env | {"STREAMGATE_URL": url, "NODE_NO_WARNINGS": "1"}
    with built_package(report_missing):
        done = run(["node", "--test", "--test-concurrency=1", *sorted(
            str(path.relative_to(PACKAGE))
            for path in (PACKAGE / "test" / "auth").glob("*.test.mjs"))],
            timeout_s=240, env=env)
    print(done.stdout)
    assert done.returncode == 0, f"node --test failed:\n{done.stdout}"
    assert "# fail 0" in done.stdout, done.stdout
    assert "# pass 0" not in done.stdout, done.stdout
