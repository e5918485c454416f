"""schemathesis against /openapi.json on a real `streamgate serve`: no 5xx, responses match the
schema.

Every documented operation gets generated requests (valid and invalid by the schema); each response
must not be a server error and must match its documented status code, content type, headers and body
schema. Twice: with auth off, and with auth required (a valid API key on every request) and tight
read/subscribe rate limits, so the 429s and RateLimit headers are checked against the schema too.
"""

from __future__ import annotations

import os
import urllib.request
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from processes import start_gateway, wait_ready
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from gateway.auth.keys import hash_api_key
from streamgate_devstack.ports import free_port

pytestmark = pytest.mark.integration

SCHEMA_PATH = Path(__file__).resolve().parents[3] / "gateway" / "openapi.json"
# An event stream never ends by itself: tests/integration/gateway/test_sse_events.py covers it.
schema = schemathesis.openapi.from_path(str(SCHEMA_PATH)).exclude(operation_id="streamEvents")
CHECKS = [
    not_a_server_error, status_code_conformance, content_type_conformance,
    response_headers_conformance, response_schema_conformance,
]
OUTCOMES: Counter[str] = Counter()


FUZZ_KEY = "sgk_schemathesis-fuzzer-key"
AUTH_OUTCOMES: Counter[str] = Counter()
# The fuzzer may do everything; tight read and subscribe limits make 429s part of what is checked.
AUTH_CONFIG = f"""
[[api_keys]]
principal = "fuzzer"
sha256 = "{hash_api_key(FUZZ_KEY)}"

[[rules]]
principals = ["fuzzer"]
topics = ["*"]
actions = ["publish", "subscribe", "admin"]

[[limits]]
principals = ["fuzzer"]
reads_per_s = 10
subscribes_per_s = 5
"""


@contextmanager
def serving(redis_cluster: Any, etcd_server: Any, prefix: str, auth: dict[str, str],
            outcomes: Counter[str], what: str) -> Iterator[str]:
    """A `streamgate serve` process with one existing topic, `fuzzed`, so paths can hit it."""
    port = free_port()
    env = {
        **os.environ,
        "STREAMGATE_REDIS_NODES": ",".join(f"{h}:{p}" for h, p in redis_cluster.startup_nodes),
        "STREAMGATE_ETCD_ENDPOINTS": etcd_server.endpoint,
        "STREAMGATE_ETCD_PREFIX": prefix,
        "STREAMGATE_WAIT_TIMEOUT_MS": "500",
        **auth,
    }
    process = start_gateway(port, env, log_level="error")
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url, process)
        request = urllib.request.Request(
            url + "/v1/topics",
            data=b'{"name": "fuzzed", "partitions": 2}',
            headers={"Content-Type": "application/json", "X-API-Key": FUZZ_KEY},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=5):
            pass
        yield url
    finally:
        process.terminate()
        process.wait(timeout=15)
        print(f"\nschemathesis{what}: {sum(outcomes.values())} requests, by status "
              f"{dict(sorted(outcomes.items()))}")


@pytest.fixture(scope="module")
def live_gateway(redis_cluster: Any, etcd_server: Any) -> Iterator[str]:
    """A gateway with auth off."""
    with serving(
        redis_cluster, etcd_server, "/streamgate-fuzz/", {"STREAMGATE_AUTH_MODE": "none"}, OUTCOMES,
        "",
    ) as url:
        yield url


@pytest.fixture(scope="module")
def live_gateway_with_auth(
    redis_cluster: Any, etcd_server: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """A gateway with auth required, the fuzzer's API key and its read/subscribe rate limits."""
    config = tmp_path_factory.mktemp("fuzz-auth") / "auth.toml"
    config.write_text(AUTH_CONFIG)
    auth = {"STREAMGATE_AUTH_MODE": "required", "STREAMGATE_AUTH_CONFIG_PATH": str(config),
            "STREAMGATE_RATE_LIMIT_PRINCIPAL_MESSAGES_PER_S": "2000"}
    with serving(
        redis_cluster, etcd_server, "/streamgate-fuzz-auth/", auth, AUTH_OUTCOMES, " with auth on"
    ) as url:
        yield url


def call_and_validate(case: Any, url: str, outcomes: Counter[str], headers: dict[str, str]) -> None:
    response = case.call(base_url=url, headers=headers, timeout=10)
    outcomes[str(response.status_code) if response.status_code in (401, 403, 429) else
             f"{response.status_code // 100}xx"] += 1
    try:
        case.validate_response(response, checks=CHECKS)
    finally:
        if (
            case.operation.definition.raw.get("operationId") == "createTopic"
            and response.status_code == 201
        ):
            # Thousands of generated partitions would leave one gateway owning (and polling)
            # them all.
            delete = urllib.request.Request(
                f"{url}/v1/topics/{response.json()['name']}", headers=headers, method="DELETE"
            )
            with urllib.request.urlopen(delete, timeout=10):
                pass


@schema.parametrize()
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck), database=None)
def test_no_operation_answers_5xx_or_off_schema(case: Any, live_gateway: str) -> None:
    call_and_validate(case, live_gateway, OUTCOMES, {})


@schema.parametrize()
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck), database=None)
def test_no_operation_fails_with_auth_and_limits_on(case: Any, live_gateway_with_auth: str) -> None:
    # Authorization, not X-API-Key: schemathesis fills in the documented security schemes itself,
    # and an Authorization header (its generated bearer token) would win over an X-API-Key header.
    call_and_validate(
        case, live_gateway_with_auth, AUTH_OUTCOMES, {"Authorization": f"ApiKey {FUZZ_KEY}"}
    )
