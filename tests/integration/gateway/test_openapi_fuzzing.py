"""schemathesis against /openapi.json on a real `streamgate serve`: no 5xx, responses match the schema.

Every documented operation gets generated requests (valid and invalid by the schema); each response must not
be a server error and must match its documented status code, content type, headers and body schema.
"""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from processes import free_port, wait_ready
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

pytestmark = pytest.mark.integration

SCHEMA_PATH = Path(__file__).resolve().parents[3] / "gateway" / "openapi.json"
schema = schemathesis.openapi.from_path(str(SCHEMA_PATH))
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_headers_conformance,
          response_schema_conformance]
OUTCOMES: Counter[str] = Counter()


@pytest.fixture(scope="module")
def live_gateway(redis_cluster: Any, etcd_server: Any) -> Iterator[str]:
    """A `streamgate serve` process (auth off) with one existing topic, `fuzzed`, so paths can hit it."""
    port = free_port()
    env = {**os.environ, "STREAMGATE_REDIS_NODES": ",".join(f"{h}:{p}" for h, p in redis_cluster.startup_nodes),
           "STREAMGATE_ETCD_ENDPOINTS": etcd_server.endpoint, "STREAMGATE_ETCD_PREFIX": "/streamgate-fuzz/",
           "STREAMGATE_AUTH_MODE": "none", "STREAMGATE_WAIT_TIMEOUT_MS": "500"}
    process = subprocess.Popen([sys.executable, "-m", "gateway.cli", "--log-level", "error", "serve",
                                "--port", str(port)], env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url, process)
        request = urllib.request.Request(url + "/v1/topics", data=b'{"name": "fuzzed", "partitions": 2}',
                                         headers={"Content-Type": "application/json"}, method="POST")
        with urllib.request.urlopen(request, timeout=5):
            pass
        yield url
    finally:
        process.terminate()
        process.wait(timeout=15)
        print(f"\nschemathesis: {sum(OUTCOMES.values())} requests, by status class {dict(sorted(OUTCOMES.items()))}")


@schema.parametrize()
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck), database=None)
def test_no_operation_answers_5xx_or_off_schema(case: Any, live_gateway: str) -> None:
    response = case.call(base_url=live_gateway, timeout=10)
    OUTCOMES[f"{response.status_code // 100}xx"] += 1
    try:
        case.validate_response(response, checks=CHECKS)
    finally:
        if case.operation.definition.raw.get("operationId") == "createTopic" and response.status_code == 201:
            # Thousands of generated partitions would leave one gateway owning (and polling) them all.
            delete = urllib.request.Request(f"{live_gateway}/v1/topics/{response.json()['name']}", method="DELETE")
            with urllib.request.urlopen(delete, timeout=10):
                pass
