"""A growth names the gateway growing it; every other gateway abandons it once that gateway's node
key is gone, and a gateway abandons a growth in its own name that it is not running (it
restarted)."""

from __future__ import annotations

import asyncio
import time
from typing import Any, cast

import pytest

from gateway.growth import Growth, GrowthPauses
from gateway.publish.in_flight import InFlight
from partitioner.cache import TopicCache
from partitioner.growth import InMemoryGrowthAcks
from partitioner.registry import InMemoryTopicRegistry
from partitioner.topics import TopicSettings
from storage.protocol import StreamStore
from tests.unit.gateway.memory_store import InMemoryStreamStore


@pytest.fixture
async def marked() -> Any:
    """A topic marked growing by gateway "b" (not running it here), as gateway "a" sees it."""
    registry, cache = InMemoryTopicRegistry(), TopicCache()
    topic = await registry.create(TopicSettings("orders", 2), owner="alice")
    cache.remember(await registry.update(topic.growing(4, time.time_ns() // 1_000_000, by="b")))
    acks = InMemoryGrowthAcks(nodes={"a", "b"})
    store = cast(StreamStore, InMemoryStreamStore())  # a growth that is abandoned reads nothing
    growth = Growth(registry, cache, store, acks, pause_limit_s=60, node_id="a")
    return cache, acks, growth


async def until_abandoned(cache: TopicCache) -> None:
    for _ in range(200):
        if cache.get("orders").growing_to is None:  # type: ignore[union-attr]
            return
        await asyncio.sleep(0.02)
    raise AssertionError("the growth was never abandoned")


async def test_a_growth_whose_gateway_is_gone_is_abandoned(marked: Any) -> None:
    cache, acks, growth = marked
    async with GrowthPauses(cache, InFlight(), growth, "a"):
        acks.nodes.discard("b")
        await until_abandoned(cache)
    assert cache.get("orders").partitions == 2


async def test_a_growth_whose_gateway_lives_goes_on(marked: Any) -> None:
    cache, _, growth = marked
    async with GrowthPauses(cache, InFlight(), growth, "a"):
        await asyncio.sleep(0.5)
        assert cache.get("orders").growing_to == 4


async def test_a_gateway_abandons_a_growth_in_its_name_that_it_is_not_running(
        marked: Any) -> None:
    cache, _, growth = marked
    async with GrowthPauses(cache, InFlight(), growth, "b"):
        await until_abandoned(cache)
