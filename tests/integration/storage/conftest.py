"""Fixtures shared by the storage integration tests: a store on the session's Redis Cluster (its
settings overridable per module or test with ``pytest.mark.store_settings(...)``), a fresh topic."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from storage.redis_store import RedisStreamStore
from storage.settings import RedisStoreSettings


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "store_settings(**fields): RedisStoreSettings fields for the store fixture")


@pytest.fixture
def store_settings(redis_cluster: Any, request: pytest.FixtureRequest) -> RedisStoreSettings:
    """Settings for the session's cluster, with the closest ``store_settings`` mark's fields."""
    marker = request.node.get_closest_marker("store_settings")
    return RedisStoreSettings(startup_nodes=list(redis_cluster.startup_nodes),
                              **(marker.kwargs if marker else {}))


@pytest.fixture
async def store(store_settings: RedisStoreSettings) -> AsyncIterator[RedisStreamStore]:
    """An open store on the session's cluster, closed after the test."""
    async with RedisStreamStore(store_settings) as opened:
        yield opened


@pytest.fixture
def topic() -> str:
    """A topic name no other test uses."""
    return f"st-{uuid.uuid4().hex[:12]}"
