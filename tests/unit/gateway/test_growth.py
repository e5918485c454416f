"""Growing a topic at one cut: the pause every gateway acknowledges, the fences, and how far a
consumer may read a grown partition."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from gateway.delivery.growth_gate import Gate, cap_of
from gateway.growth import Growth, GrowthPauses
from gateway.publish.in_flight import InFlight
from gateway.services import Services
from partitioner.cache import TopicCache
from partitioner.growth import InMemoryGrowthAcks
from partitioner.registry import InMemoryTopicRegistry
from partitioner.topics import Epoch, TopicSettings
from storage.models import AppendOptions, Record
from tests.unit.gateway.memory_store import InMemoryStreamStore

Client = TestClient[Any, Any]


def consumed_up_to(positions: dict[int, int]) -> Any:
    """A consumer whose position on partition p is ``positions[p]`` (an offset's ms)."""

    async def consumed(source: int, fence: str) -> bool:
        return positions.get(source, 0) >= int(fence.split("-")[0])

    return consumed


async def test_doubling_holds_only_the_added_partitions() -> None:
    epochs = [Epoch(2, 4, ("10-0", "20-0"))]
    behind = consumed_up_to({0: 5, 1: 25})
    assert [await cap_of(epochs, q, behind) for q in range(4)] == [None, None, "0-0", None]
    caught_up = consumed_up_to({0: 10, 1: 20})
    assert [await cap_of(epochs, q, caught_up) for q in range(4)] == [None] * 4


async def test_uneven_growth_holds_partitions_at_fences() -> None:
    epochs = [Epoch(2, 3, ("10-0", "20-0")), Epoch(3, 5, ("30-0", "40-0", "50-0"))]
    nothing = consumed_up_to({})
    assert [await cap_of(epochs, q, nothing) for q in range(5)] == [
        "10-0", "20-0", "0-0", "0-0", "0-0"]
    first_done = consumed_up_to({0: 10, 1: 20})
    assert [await cap_of(epochs, q, first_done) for q in range(5)] == [
        "30-0", "40-0", "50-0", "0-0", "0-0"]
    all_done = consumed_up_to({0: 30, 1: 40, 2: 50})
    assert [await cap_of(epochs, q, all_done) for q in range(5)] == [None] * 5


async def test_gate_remembers_what_passed() -> None:
    cache, calls = TopicCache(), []
    registry = InMemoryTopicRegistry()
    topic = await registry.create(TopicSettings("orders", 2), owner="alice")
    cache.remember(topic)

    async def consumed(source: int, fence: str) -> bool:
        calls.append(source)
        return True

    gate = Gate(cache, "orders", consumed)
    assert await gate.cap(1) is None
    assert calls == []
    grown = await registry.update(topic.growing(4, 0).with_fences(["1-0", "2-0"]).grown())
    cache.remember(grown)
    assert gate.may_hold(2)
    assert await gate.cap(2) is None
    assert await gate.cap(2) is None
    assert calls == [0]
    assert not gate.may_hold(2)


@pytest.fixture
async def world() -> Any:
    store, registry, cache = InMemoryStreamStore(), InMemoryTopicRegistry(), TopicCache()
    cache.remember(await registry.create(TopicSettings("orders", 2), owner="alice"))
    await store.append("orders", [Record(0, b"a"), Record(1, b"b")], AppendOptions())
    return store, registry, cache


async def test_growth_waits_for_gateways_to_drain(world: Any) -> None:
    store, registry, cache = world
    acks = InMemoryGrowthAcks(nodes={"a", "b"})
    growth = Growth(registry, cache, store, acks, pause_limit_s=5)
    busy = InFlight()
    busy.begin("orders")
    async with (GrowthPauses(cache, InFlight(), growth, "a"),
                GrowthPauses(cache, busy, growth, "b")):
        growing = asyncio.create_task(growth.grow("orders", 4))
        await asyncio.sleep(0.2)
        assert not growing.done()
        assert cache.get("orders").growing_to == 4
        busy.end("orders")
        grown = await asyncio.wait_for(growing, 5)
    last = await store.last_offsets("orders", [0, 1])
    assert grown.partitions == 4
    assert grown.growing_to is None
    assert grown.epochs == (Epoch(2, 4, (last[0], last[1])),)
    assert await registry.get("orders") == grown


async def test_unpaused_gateway_fails_the_growth(world: Any) -> None:
    store, registry, cache = world
    before = await registry.get("orders")
    growth = Growth(registry, cache, store, InMemoryGrowthAcks(nodes={"gone"}),
                    pause_limit_s=0.2)
    with pytest.raises(Exception, match="did not pause") as excinfo:
        await growth.grow("orders", 4)
    assert getattr(excinfo.value, "status", None) == 503
    after = await registry.get("orders")
    assert (after.partitions, after.growing_to, after.epochs) == (2, None, ())
    assert after.version > before.version


async def test_publishes_to_a_growing_topic_get_503_with_retry_after(
        client: Client, orders: str, services: Services) -> None:
    current = await services.registry.get(orders)
    services.cache.remember(await services.registry.update(current.growing(6, 0)))
    response = await client.post(f"/v1/topics/{orders}/messages",
                                 json={"messages": [{"key": "k", "value": 1}]})
    assert response.status == 503
    assert response.headers["Retry-After"] == "1"
    assert "growing to 6" in (await response.json())["detail"]
    assert services.publisher.in_flight.count(orders) == 0
    grown = await client.patch(f"/v1/topics/{orders}", json={"partitions": 6})
    assert grown.status == 200, await grown.text()
    assert (await grown.json())["partitions"] == 6
    published = await client.post(f"/v1/topics/{orders}/messages",
                                  json={"messages": [{"key": "k", "value": 1}]})
    assert published.status == 200
