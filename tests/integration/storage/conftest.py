"""Fixtures shared by the storage integration tests: a store on the session's Redis Cluster (its
settings overridable per module or test with ``pytest.mark.store_settings(...)``), a fresh topic."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from storage.errors import StorageUnavailable
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
    """An open store on the session's cluster, closed after the test. Opening is tried twice: a
    module's short socket timeout (set to test blocking reads past it) can meet a node busy with
    another worker's test for a moment, which is not what any test here checks."""
    opened = RedisStreamStore(store_settings)
    try:
        await opened.open()
    except StorageUnavailable:
        await opened.aclose()
        await asyncio.sleep(0.5)
        opened = RedisStreamStore(store_settings)
        await opened.open()
    try:
        yield opened
    finally:
        await opened.aclose()


@pytest.fixture
def topic() -> str:
    """A topic name no other test uses."""
    return f"st-{uuid.uuid4().hex[:12]}"
