"""A real gateway (create_app) over the session's Redis Cluster and etcd, for the client's
integration tests."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from aiohttp.test_utils import TestClient
from served import serve_gateway


@pytest.fixture
def base_url(gateway: TestClient[Any, Any]) -> str:
    """The gateway's base URL, for the client classes."""
    return str(gateway.make_url("")).rstrip("/")


@pytest.fixture
def served_gateway(redis_cluster: Any, etcd_server: Any) -> Iterator[str]:
    """``python -m gateway.cli serve`` on a free port (its base URL); stopped by PID afterwards."""
    yield from serve_gateway(redis_cluster, etcd_server)
