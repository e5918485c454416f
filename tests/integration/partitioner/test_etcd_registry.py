"""EtcdTopicRegistry and TopicWatcher against a real etcd (the session fixture ``etcd_server``)."""

from __future__ import annotations

import asyncio
import os
from dataclasses import replace
from typing import Any

import pytest

from devstack.etcd import EtcdConfig, EtcdProcess
from partitioner.cache import TopicCache
from partitioner.errors import (
    ConcurrentModification,
    CoordinationUnavailable,
    HistoryCompacted,
    InvalidTopic,
    TopicExists,
    TopicNotFound,
)
from partitioner.etcd import EtcdConnection, EtcdTopicRegistry, TopicWatcher, open_etcd
from partitioner.topics import TopicSettings

pytestmark = pytest.mark.integration


@pytest.fixture
def registry(conn: EtcdConnection, prefix: str) -> EtcdTopicRegistry:
    return EtcdTopicRegistry(conn, prefix)


async def _eventually(condition: Any, timeout_s: float = 2.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "condition not met in time"
        await asyncio.sleep(0.02)


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


async def test_update_with_stale_version_raises_concurrent_modification(
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


async def test_open_fails_with_coordination_unavailable_when_etcd_is_unreachable() -> None:
    with pytest.raises(CoordinationUnavailable):
        async with open_etcd(["127.0.0.1:1"], timeout_s=0.5):
            pass


async def test_open_skips_unreachable_endpoints(etcd_server: Any) -> None:
    async with open_etcd(["127.0.0.1:1", etcd_server.endpoint], timeout_s=0.5) as connection:
        await connection.ping()
        assert connection.endpoint == etcd_server.endpoint


async def test_a_member_that_stops_answering_is_replaced_by_the_next_endpoint(
        etcd_server: Any, tmp_path: Any) -> None:
    with EtcdProcess(EtcdConfig(data_dir=tmp_path / "first")) as first:
        connection = open_etcd([first.endpoint, etcd_server.endpoint], timeout_s=1.0)
        await connection.open()
        assert connection.endpoint == first.endpoint
        watch = await connection.watch_prefix(b"/failover-test/", 1)
    try:
        # the member in use is gone: the next call fails, and the connection moves on
        with pytest.raises(CoordinationUnavailable):
            await connection.put(b"/failover-test/a", b"1")
        await _eventually(lambda: connection.endpoint == etcd_server.endpoint, timeout_s=10)
        assert await connection.put(b"/failover-test/a", b"1") > 0
        # the old member's watch has ended, so its owner re-watches through the new member
        with pytest.raises(CoordinationUnavailable):
            async for _ in watch.events():
                pass
    finally:
        await connection.aclose()


async def test_a_failed_call_on_a_healthy_member_keeps_the_endpoint(etcd_server: Any) -> None:
    async with open_etcd([etcd_server.endpoint, "127.0.0.1:1"], timeout_s=1.0) as connection:
        with pytest.raises(CoordinationUnavailable):
            await connection.revoke_lease(12345)  # no such lease
        await asyncio.sleep(0.5)
        assert connection.endpoint == etcd_server.endpoint
        await connection.ping()


async def test_closed_connection_raises_coordination_unavailable(etcd_server: Any) -> None:
    connection = open_etcd([etcd_server.endpoint], timeout_s=1.0)
    async with connection:
        await connection.ping()
    await connection.aclose()
    with pytest.raises(CoordinationUnavailable):
        await connection.ping()


async def test_watch_from_compacted_revision_raises_history_compacted(
        etcd_server: Any, conn: EtcdConnection, registry: EtcdTopicRegistry, prefix: str) -> None:
    first = await registry.create(TopicSettings("a", 1), owner="x")
    latest = await registry.create(TopicSettings("b", 1), owner="x")
    etcdctl = await asyncio.create_subprocess_exec(
        "etcdctl", "--endpoints", etcd_server.endpoint, "compact", str(latest.version),
        env={**os.environ, "ETCDCTL_API": "3"}, stdout=asyncio.subprocess.DEVNULL)
    assert await etcdctl.wait() == 0
    watch = await conn.watch_prefix(f"{prefix}topics/".encode(), first.version)
    try:
        with pytest.raises(HistoryCompacted):
            async for _ in watch.events():
                pass
    finally:
        await watch.cancel()


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


async def test_watcher_sees_topic_created_by_another_registry_within_two_seconds(
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
