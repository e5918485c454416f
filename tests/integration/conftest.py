"""Fixtures shared by the integration tests: a real gateway (create_app) over the session's
servers."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from gateway.app import create_app
from gateway.settings import GatewaySettings


@pytest.fixture
def gateway_settings(redis_cluster: Any, etcd_server: Any) -> GatewaySettings:
    """Settings pointing at the session's servers, with a private etcd prefix per test."""
    return GatewaySettings(
        auth_mode="none",  # auth has its own tests (tests/integration/gateway/test_auth.py)
        redis_nodes=tuple(f"{host}:{port}" for host, port in redis_cluster.startup_nodes),
        etcd_endpoints=(etcd_server.endpoint,),
        etcd_prefix=f"/streamgate-test-{uuid.uuid4().hex[:8]}/",
        min_insync_replicas=1,
        wait_timeout_ms=500,
        redis_write_deadline_s=3.0,
    )


@pytest.fixture
async def gateway(aiohttp_client: Any, gateway_settings: GatewaySettings) -> TestClient[Any, Any]:
    client: TestClient[Any, Any] = await aiohttp_client(create_app(gateway_settings))
    return client


@pytest.fixture
def topic_name() -> str:
    return f"it-{uuid.uuid4().hex[:10]}"
