"""InMemoryTopicRegistry follows the TopicRegistry contract the etcd registry follows."""

from __future__ import annotations

from dataclasses import replace

import pytest

from partitioner.errors import ConcurrentModification, InvalidTopic, TopicExists, TopicNotFound
from partitioner.registry import InMemoryTopicRegistry, TopicRegistry
from partitioner.topics import TopicSettings


@pytest.fixture
def registry() -> InMemoryTopicRegistry:
    return InMemoryTopicRegistry()


def test_in_memory_registry_satisfies_the_protocol(registry: InMemoryTopicRegistry) -> None:
    port: TopicRegistry = registry
    assert port is registry


async def test_create_then_get_and_list_sorted(registry: InMemoryTopicRegistry) -> None:
    orders = await registry.create(TopicSettings("orders", 3), owner="alice")
    await registry.create(TopicSettings("audit", 1), owner="bob")
    assert orders.version > 0
    assert orders.owner == "alice"
    assert await registry.get("orders") == orders
    assert [t.name for t in await registry.list()] == ["audit", "orders"]


async def test_duplicate_create_raises_topic_exists(registry: InMemoryTopicRegistry) -> None:
    await registry.create(TopicSettings("orders", 3), owner="alice")
    with pytest.raises(TopicExists):
        await registry.create(TopicSettings("orders", 3), owner="alice")


async def test_create_validates_settings(registry: InMemoryTopicRegistry) -> None:
    with pytest.raises(InvalidTopic):
        await registry.create(TopicSettings("orders", 0), owner="alice")


async def test_update_bumps_version(registry: InMemoryTopicRegistry) -> None:
    created = await registry.create(TopicSettings("orders", 3), owner="alice")
    updated = await registry.update(
        replace(created, partitions=4).with_changes(retention_ms=None, max_length=None)
    )
    assert updated.version > created.version
    assert await registry.get("orders") == updated


async def test_stale_version_update_raises_concurrent_modification(
        registry: InMemoryTopicRegistry) -> None:
    created = await registry.create(TopicSettings("orders", 3), owner="alice")
    await registry.update(replace(created, partitions=4).with_changes(retention_ms=None,
                                                                      max_length=None))
    with pytest.raises(ConcurrentModification) as excinfo:
        await registry.update(
            replace(created, partitions=5).with_changes(retention_ms=None, max_length=None)
        )
    assert excinfo.value.retriable


async def test_delete_returns_metadata_and_removes_topic(registry: InMemoryTopicRegistry) -> None:
    created = await registry.create(TopicSettings("orders", 3), owner="alice")
    assert await registry.delete("orders") == created
    with pytest.raises(TopicNotFound):
        await registry.get("orders")
    with pytest.raises(TopicNotFound):
        await registry.delete("orders")
