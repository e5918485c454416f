"""EtcdTopicRegistry against a real etcd (the session fixture ``etcd_server``)."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from partitioner.errors import (
    ConcurrentModification,
    InvalidTopic,
    TopicExists,
    TopicNotFound,
)
from partitioner.etcd_registry import EtcdTopicRegistry
from partitioner.topics import TopicSettings

pytestmark = pytest.mark.integration


async def test_create_get_list_update_delete_round_trip(registry: EtcdTopicRegistry) -> None:
    created = await registry.create(TopicSettings("orders", 3), owner="alice")
    await registry.create(TopicSettings("audit", 1), owner="bob")

    assert created.version > 0
    assert created.owner == "alice"
    assert created.created_at_ms > 1_600_000_000_000
    assert await registry.get("orders") == created
    assert [t.name for t in await registry.list()] == ["audit", "orders"]

    updated = await registry.update(
        replace(created, partitions=6).with_changes(retention_ms=None, max_length=100)
    )
    assert updated.version > created.version
    assert (updated.partitions, updated.max_length) == (6, 100)
    assert await registry.get("orders") == updated

    assert await registry.delete("orders") == updated
    with pytest.raises(TopicNotFound):
        await registry.get("orders")
    assert [t.name for t in await registry.list()] == ["audit"]


async def test_duplicate_create_raises_topic_exists(registry: EtcdTopicRegistry) -> None:
    await registry.create(TopicSettings("orders", 3), owner="alice")
    with pytest.raises(TopicExists):
        await registry.create(TopicSettings("orders", 5), owner="bob")
    assert (await registry.get("orders")).partitions == 3


async def test_concurrent_creates_have_exactly_one_winner(registry: EtcdTopicRegistry) -> None:
    results = await asyncio.gather(
        *(registry.create(TopicSettings("contested", 2), owner=f"node-{i}") for i in range(5)),
        return_exceptions=True,
    )
    winners = [r for r in results if not isinstance(r, BaseException)]
    assert len(winners) == 1
    assert all(isinstance(r, TopicExists) for r in results if isinstance(r, BaseException))
    assert await registry.get("contested") == winners[0]


async def test_stale_version_update_raises_concurrent_modification(
    registry: EtcdTopicRegistry,
) -> None:
    original = await registry.create(TopicSettings("orders", 3), owner="alice")
    await registry.update(replace(original, partitions=4).with_changes(retention_ms=None,
                                                                       max_length=None))
    with pytest.raises(ConcurrentModification):
        await registry.update(
            replace(original, partitions=8).with_changes(retention_ms=None, max_length=None)
        )
    assert (await registry.get("orders")).partitions == 4


async def test_update_of_deleted_topic_raises_topic_not_found(registry: EtcdTopicRegistry) -> None:
    original = await registry.create(TopicSettings("orders", 3), owner="alice")
    await registry.delete("orders")
    with pytest.raises(TopicNotFound):
        await registry.update(
            replace(original, partitions=4).with_changes(retention_ms=None, max_length=None)
        )


async def test_update_never_creates_a_missing_topic(registry: EtcdTopicRegistry) -> None:
    original = await registry.create(TopicSettings("orders", 3), owner="alice")
    await registry.delete("orders")
    with pytest.raises(TopicNotFound):
        await registry.update(replace(original, version=0))
    with pytest.raises(TopicNotFound):
        await registry.get("orders")


async def test_delete_of_absent_topic_raises_topic_not_found(registry: EtcdTopicRegistry) -> None:
    with pytest.raises(TopicNotFound):
        await registry.delete("missing")


async def test_create_with_invalid_settings_writes_nothing(registry: EtcdTopicRegistry) -> None:
    with pytest.raises(InvalidTopic):
        await registry.create(TopicSettings("bad name", 3), owner="alice")
    assert await registry.list() == []
