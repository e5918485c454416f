"""A real gateway (create_app) over the session's Redis Cluster and etcd, for the client's
integration tests."""

from __future__ import annotations

from typing import Any

import pytest
from aiohttp.test_utils import TestClient


@pytest.fixture
def base_url(gateway: TestClient[Any, Any]) -> str:
    """The gateway's base URL, for the client classes."""
    return str(gateway.make_url("")).rstrip("/")
