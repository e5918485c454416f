"""Push subscriptions' definitions in a real etcd: created once, changed atomically by concurrent
gateways, mirrored by every gateway's watch, deleted one by one or with their topic."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from partitioner.etcd.connection import EtcdConnection, open_etcd
from partitioner.push_subscriptions import Change, PushSubscriptions

pytestmark = pytest.mark.integration


@pytest.fixture
async def other_conn(etcd_server: Any) -> AsyncIterator[EtcdConnection]:
    """A second gateway's own connection."""
    async with open_etcd([etcd_server.endpoint], timeout_s=2.0) as connection:
        yield connection


async def wait_for(condition: Callable[[], bool], timeout_s: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "the mirror did not catch up"
        await asyncio.sleep(0.02)


def definition(endpoint: str = "https://hooks.example.com/a") -> dict[str, Any]:
    return {"topic": "orders", "group": "hook", "endpoint": endpoint, "tags": []}


async def test_a_subscription_is_created_only_once(conn: EtcdConnection, prefix: str) -> None:
    store = PushSubscriptions(conn, prefix)
    assert await store.create("orders", "hook", definition())
    assert not await store.create("orders", "hook", definition("https://hooks.example.com/b"))
    assert await store.read("orders", "hook") == definition()
    assert await store.read("orders", "other") is None


def append(tag: str) -> Change:
    def change(doc: dict[str, Any] | None) -> dict[str, Any] | None:
        assert doc is not None
        doc["tags"].append(tag)
        return doc
    return change


async def test_concurrent_updates_from_two_gateways_all_land(
    conn: EtcdConnection, other_conn: EtcdConnection, prefix: str
) -> None:
    stores = [PushSubscriptions(conn, prefix), PushSubscriptions(other_conn, prefix)]
    assert await stores[0].create("orders", "hook", definition())
    for round_ in range(10):
        await asyncio.gather(stores[0].update("orders", "hook", append(f"a{round_}")),
                             stores[1].update("orders", "hook", append(f"b{round_}")))
    stored = await stores[1].read("orders", "hook")
    assert stored is not None
    assert sorted(stored["tags"]) == sorted([f"a{i}" for i in range(10)]
                                            + [f"b{i}" for i in range(10)])


async def test_an_update_returns_what_it_wrote_and_none_deletes(
    conn: EtcdConnection, prefix: str
) -> None:
    store = PushSubscriptions(conn, prefix)
    assert await store.update("orders", "hook", lambda doc: doc) is None, "absent stays absent"
    created = await store.update("orders", "hook", lambda doc: doc or definition())
    assert created == definition() == await store.read("orders", "hook")
    moved = await store.update("orders", "hook",
                               lambda doc: {**(doc or {}), "endpoint": "https://b.example.com/"})
    assert moved is not None
    assert moved["endpoint"] == "https://b.example.com/"
    assert await store.update("orders", "hook", lambda doc: None) is None
    assert await store.read("orders", "hook") is None


async def test_a_second_gateways_mirror_sees_puts_and_deletes(
    conn: EtcdConnection, other_conn: EtcdConnection, prefix: str
) -> None:
    writer = PushSubscriptions(conn, prefix)
    await writer.create("orders", "before", definition())
    changes: list[tuple[str, str] | None] = []
    async with PushSubscriptions(other_conn, prefix) as mirror:
        mirror.listen(changes.append)
        assert mirror.of("orders", "before") == definition(), "loaded on enter"
        await wait_for(lambda: mirror.healthy)
        await writer.create("orders", "hook", definition())
        await wait_for(lambda: mirror.of("orders", "hook") is not None)
        await writer.update("orders", "hook",
                            lambda doc: {**(doc or {}), "endpoint": "https://b.example.com/"})
        await wait_for(lambda: (mirror.of("orders", "hook") or {}).get("endpoint")
                       == "https://b.example.com/")
        assert mirror.count() == 2
        assert set(mirror.all()) == {("orders", "before"), ("orders", "hook")}
        assert await writer.delete("orders", "hook")
        assert not await writer.delete("orders", "hook")
        await wait_for(lambda: mirror.of("orders", "hook") is None)
        assert mirror.count() == 1
    assert ("orders", "hook") in changes


async def test_forgetting_a_topic_deletes_only_its_subscriptions(
    conn: EtcdConnection, prefix: str
) -> None:
    store = PushSubscriptions(conn, prefix)
    for topic, group in (("orders", "a"), ("orders", "b"), ("orders2", "a")):
        assert await store.create(topic, group, definition())
    async with PushSubscriptions(conn, prefix) as mirror:
        await store.forget_topic("orders")
        await wait_for(lambda: mirror.count() == 1)
        assert set(mirror.all()) == {("orders2", "a")}
    assert await store.read("orders", "a") is None
    assert await store.read("orders2", "a") is not None


async def test_a_malformed_value_is_ignored(conn: EtcdConnection, prefix: str) -> None:
    store = PushSubscriptions(conn, prefix)
    await conn.put(store.key("orders", "broken"), b"[1, 2]")
    await conn.put(store.key("orders", "garbled"), b"{not json")
    assert await store.create("orders", "hook", definition())
    async with PushSubscriptions(conn, prefix) as mirror:
        assert set(mirror.all()) == {("orders", "hook")}
        await conn.put(store.key("orders", "hook"), b"\xff\xfe")
        await wait_for(lambda: mirror.of("orders", "hook") is None)
        assert mirror.count() == 0
    assert await store.read("orders", "broken") is None
    assert not await store.create("orders", "broken", definition()), "it still exists"
    repaired = await store.update("orders", "broken", lambda doc: doc or definition())
    assert repaired == definition() == await store.read("orders", "broken")
