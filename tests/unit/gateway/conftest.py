"""Fixtures for gateway unit tests: the real app over an in-memory store and registry."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from gateway.app import app_with_services
from gateway.growth import Growth
from gateway.observe.metrics import GatewayMetrics
from gateway.publish.publisher import Publisher
from gateway.services import Services
from gateway.settings import GatewaySettings
from partitioner.cache import TopicCache
from partitioner.growth import InMemoryGrowthAcks
from partitioner.registry import InMemoryTopicRegistry
from tests.unit.gateway.memory_store import InMemoryStreamStore


@pytest.fixture
def store() -> InMemoryStreamStore:
    return InMemoryStreamStore()


@pytest.fixture
def settings() -> GatewaySettings:
    return GatewaySettings(
        auth_mode="none", max_value_bytes=1024, max_batch_messages=50, max_batch_bytes=64 * 1024,
        max_replay_limit=500
    )


@pytest.fixture
async def services(
    store: InMemoryStreamStore, settings: GatewaySettings
) -> AsyncIterator[Services]:
    metrics = GatewayMetrics.create()
    async with Publisher(
        store, store, metrics, settings.dedup_ttl_ms, 4, settings.retry_after_s
    ) as publisher:
        registry, cache = InMemoryTopicRegistry(), TopicCache()
        yield Services(
            settings=settings, store=store, registry=registry, cache=cache,
            publisher=publisher, metrics=metrics, readiness_checks=[("redis", store.ping)],
            growth=Growth(registry, cache, store, InMemoryGrowthAcks(), pause_limit_s=1.0)
        )


@pytest.fixture
async def client(aiohttp_client: Any, services: Services) -> TestClient[Any, Any]:
    client: TestClient[Any, Any] = await aiohttp_client(app_with_services(services))
    return client


@pytest.fixture
async def orders(client: TestClient[Any, Any]) -> str:
    response = await client.post("/v1/topics", json={"name": "orders", "partitions": 3})
    assert response.status == 201, await response.text()
    return "orders"
