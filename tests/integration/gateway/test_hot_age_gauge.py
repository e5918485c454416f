"""The hot age gauge (``streamgate_archive_hot_age_seconds``) measured by the lag exporter on the
real cluster: the age of each partition's oldest entry still in Redis."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator

import pytest

from gateway.duties.lag import LagExporter
from gateway.observe.metrics import GatewayMetrics
from storage.keys import log_key
from storage.redis_store import RedisStreamStore
from storage.settings import RedisStoreSettings
from streamgate_devstack import RedisClusterProcess

pytestmark = pytest.mark.integration

HOUR_S = 3600


@pytest.fixture
async def store(redis_cluster: RedisClusterProcess) -> AsyncIterator[RedisStreamStore]:
    settings = RedisStoreSettings(startup_nodes=list(redis_cluster.startup_nodes))
    async with RedisStreamStore(settings) as opened:
        yield opened


@pytest.fixture
def topic(redis_cluster: RedisClusterProcess) -> str:
    """Partition 0 holds an entry written an hour ago and a new one; partition 1 is empty."""
    name = f"hot-{uuid.uuid4().hex[:10]}"
    hour_ago_ms = int(time.time() * 1000) - HOUR_S * 1000
    client = redis_cluster.client()
    try:
        client.xadd(log_key(name, 0), {"v": "old"}, id=f"{hour_ago_ms}-0")
        client.xadd(log_key(name, 0), {"v": "new"})
    finally:
        client.close()
    return name


def hot_age(metrics: GatewayMetrics, topic: str, partition: int) -> float | None:
    return metrics.registry.get_sample_value("streamgate_archive_hot_age_seconds",
                                             {"topic": topic, "partition": str(partition)})


async def export(store: RedisStreamStore, topic: str) -> tuple[LagExporter, GatewayMetrics]:
    metrics = GatewayMetrics.create()
    exporter = LagExporter(store, store.groups, metrics)
    await exporter.export_topic(topic, [0, 1], lambda t, p: True)
    return exporter, metrics


async def test_hot_age_is_the_oldest_entrys_age_and_zero_when_empty(
        store: RedisStreamStore, topic: str) -> None:
    exporter, metrics = await export(store, topic)
    age = hot_age(metrics, topic, 0)
    assert age is not None
    assert HOUR_S <= age < 2 * HOUR_S
    assert hot_age(metrics, topic, 1) == 0
    exporter.forget(topic, 0)
    assert hot_age(metrics, topic, 0) is None


async def test_hot_age_falls_once_the_old_entry_leaves_redis(
        store: RedisStreamStore, topic: str, redis_cluster: RedisClusterProcess) -> None:
    client = redis_cluster.client()
    try:
        client.xtrim(log_key(topic, 0), minid=f"{int(time.time() * 1000) - 60_000}-0",
                     approximate=False)
    finally:
        client.close()
    _, metrics = await export(store, topic)
    age = hot_age(metrics, topic, 0)
    assert age is not None
    assert 0 <= age < HOUR_S

