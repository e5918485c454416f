"""TopicWatcher against a real etcd (the session fixture ``etcd_server``), including etcd restarts
and outages."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

import pytest

from partitioner.cache import TopicCache
from partitioner.errors import CoordinationUnavailable
from partitioner.etcd.connection import EtcdConnection, open_etcd
from partitioner.etcd_registry import EtcdTopicRegistry
from partitioner.topic_watcher import TopicWatcher
from partitioner.topics import TopicSettings

pytestmark = pytest.mark.integration


async def _eventually(condition: Any, timeout_s: float = 2.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "condition not met in time"
        await asyncio.sleep(0.02)


async def test_watcher_loads_existing_topics_on_enter(
    conn: EtcdConnection, registry: EtcdTopicRegistry, prefix: str
) -> None:
    created = await registry.create(TopicSettings("orders", 3), owner="alice")
    cache = TopicCache()
    async with TopicWatcher(conn, cache, prefix) as watcher:
        assert cache.get("orders") == created
        assert cache.revision >= created.version
        assert await watcher.wait_synced(timeout_s=2)
        assert watcher.healthy


async def test_watcher_sees_topic_made_elsewhere_within_two_seconds(
        etcd_server: Any, conn: EtcdConnection, prefix: str) -> None:
    cache = TopicCache()
    async with TopicWatcher(conn, cache, prefix) as watcher, \
            open_etcd([etcd_server.endpoint], timeout_s=2.0) as other_conn:
        assert await watcher.wait_synced(timeout_s=2)
        created = await EtcdTopicRegistry(other_conn, prefix).create(
            TopicSettings("orders", 3), "bob"
        )
        assert await watcher.wait_for_revision(created.version, timeout_s=2)
        assert cache.get("orders") == created


async def test_watcher_applies_updates_and_deletes(
    conn: EtcdConnection, registry: EtcdTopicRegistry, prefix: str
) -> None:
    cache = TopicCache()
    async with TopicWatcher(conn, cache, prefix) as watcher:
        created = await registry.create(TopicSettings("orders", 3), owner="alice")
        updated = await registry.update(
            replace(created, partitions=5).with_changes(retention_ms=None, max_length=None))
        assert await watcher.wait_for_revision(updated.version, timeout_s=2)
        assert cache.get("orders") == updated
        await registry.delete("orders")
        await _eventually(lambda: cache.get("orders") is None)


async def test_watcher_ignores_topics_under_other_prefixes(
    etcd_server: Any, conn: EtcdConnection, registry: EtcdTopicRegistry, prefix: str
) -> None:
    cache = TopicCache()
    async with TopicWatcher(conn, cache, prefix) as watcher:
        await EtcdTopicRegistry(conn, prefix + "other/").create(TopicSettings("elsewhere", 1), "x")
        mine = await registry.create(TopicSettings("mine", 1), owner="x")
        assert await watcher.wait_for_revision(mine.version, timeout_s=2)
        assert [t.name for t in cache.all()] == ["mine"]


async def test_watcher_resumes_after_etcd_restart(etcd_server: Any, conn: EtcdConnection,
                                                  registry: EtcdTopicRegistry, prefix: str) -> None:
    cache = TopicCache()
    async with TopicWatcher(conn, cache, prefix) as watcher:
        before = await registry.create(TopicSettings("before", 1), owner="x")
        assert await watcher.wait_for_revision(before.version, timeout_s=2)

        await asyncio.to_thread(etcd_server.restart)
        assert await watcher.wait_synced(timeout_s=10)

        after = await registry.create(TopicSettings("after", 2), owner="x")
        assert await watcher.wait_for_revision(after.version, timeout_s=2)
        assert cache.get("after") == after
        assert cache.get("before") == before


async def test_watcher_reports_unhealthy_while_etcd_is_down(etcd_server: Any, conn: EtcdConnection,
                                                            prefix: str) -> None:
    cache = TopicCache()
    async with TopicWatcher(conn, cache, prefix) as watcher:
        assert await watcher.wait_synced(timeout_s=2)
        await asyncio.to_thread(etcd_server.stop)
        try:
            await _eventually(lambda: not watcher.healthy, timeout_s=5)
            with pytest.raises(CoordinationUnavailable):
                await conn.ping()
        finally:
            await asyncio.to_thread(etcd_server.restart)
        assert await watcher.wait_synced(timeout_s=10)
