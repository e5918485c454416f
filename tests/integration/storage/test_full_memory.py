"""A Redis node at its maxmemory (noeviction) on a cluster of its own: appends are refused whole
with StorageFull, while reads, acks, group reads, nacks, claims, new groups, parked keys, rate
limits and purges go on; past the publish watermark appends are refused before anything is
written."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from storage.errors import StorageFull
from storage.keys import log_key
from storage.models import Acks, AppendOptions, ParkedKey, Record, Records, ValueFormat
from storage.rate_limit import Charge, Limit, bucket_key
from storage.redis_store import RedisStreamStore
from storage.settings import RedisStoreSettings
from streamgate_devstack.redis_cluster import RedisClusterProcess
from tests.own_cluster import own_cluster

pytestmark = pytest.mark.integration

NODE_CAP = 24 * 1024 * 1024
VALUE = b"x" * 4096
PARTITIONS = 12


@pytest.fixture(scope="module")
def capped_cluster(tmp_path_factory: pytest.TempPathFactory,
                   devstack_binaries: None) -> Iterator[RedisClusterProcess]:
    """3 primaries + 3 replicas, each capped at NODE_CAP with noeviction."""
    with own_cluster(tmp_path_factory.mktemp("capped"), node_cap_bytes=NODE_CAP) as cluster:
        yield cluster


def _settings(cluster: RedisClusterProcess, **fields: Any) -> RedisStoreSettings:
    return RedisStoreSettings(startup_nodes=list(cluster.startup_nodes), write_deadline_s=3.0,
                              **fields)


@pytest.fixture
async def store(capped_cluster: RedisClusterProcess) -> AsyncIterator[RedisStreamStore]:
    """A store that never polls memory: only Redis itself refuses."""
    async with RedisStreamStore(_settings(capped_cluster)) as opened:
        yield opened


@pytest.fixture
def topic() -> str:
    return f"full-{uuid.uuid4().hex[:10]}"


def _records(partition: int, count: int, *, idempotent: bool = False) -> Records:
    keys: list[str | None] | None = (
        [uuid.uuid4().hex for _ in range(count)] if idempotent else None)
    return Records([partition] * count, [VALUE] * count, [None] * count, ValueFormat.BINARY,
                   idempotency_keys=keys)


def _partitions_by_node(cluster: RedisClusterProcess, topic: str) -> dict[int, list[int]]:
    by_node: dict[int, list[int]] = {}
    for partition in range(PARTITIONS):
        node = cluster.primary_for_key(log_key(topic, partition))
        by_node.setdefault(node.port, []).append(partition)
    return by_node


async def _fill(store: RedisStreamStore, topic: str, partition: int) -> StorageFull:
    """Append to ``partition`` until its node refuses; the refusal."""
    for _ in range(NODE_CAP // (len(VALUE) * 50) * 2):
        try:
            await store.append(topic, _records(partition, 50), AppendOptions(acks=Acks.LEADER))
        except StorageFull as exc:
            return exc
    raise AssertionError("the node never refused an append")


@pytest.fixture
async def full(capped_cluster: RedisClusterProcess, store: RedisStreamStore,
               topic: str) -> AsyncIterator[tuple[int, list[int], StorageFull]]:
    """One node filled through one of its partitions: (its port, its partitions, the refusal);
    emptied afterwards so the next test starts with room.

    At the edge a node takes one more write whenever its memory dips under the cap (buffers
    drained), so once it refused, its cap is pinned under what it uses: every write refused."""
    port, partitions = next(iter(_partitions_by_node(capped_cluster, topic).items()))
    refusal = await _fill(store, topic, partitions[0])
    node = capped_cluster.node_at(port).client()
    used = int(node.info("memory")["used_memory"])
    node.config_set("maxmemory", used - 1024 * 1024)
    try:
        yield port, partitions, refusal
    finally:
        for partition in range(PARTITIONS):
            await store.purge_partition(topic, partition)
        node.config_set("maxmemory", NODE_CAP)
        node.close()


async def test_a_full_node_refuses_appends_whole(store: RedisStreamStore, topic: str,
                                                 full: tuple[int, list[int], StorageFull]) -> None:
    _, partitions, refusal = full
    assert refusal.reason == "oom"
    assert refusal.retry_after_s > 0
    before = [await store.length(topic, p) for p in partitions]
    for acks in (Acks.LEADER, Acks.ALL):
        for idempotent in (False, True):
            with pytest.raises(StorageFull):
                await store.append(topic, _records(partitions[0], 20, idempotent=idempotent),
                                   AppendOptions(acks=acks))
    with pytest.raises(StorageFull):  # keyed, key-indexed: the script refuses it too
        await store.append(topic, [Record(partitions[-1], VALUE, key=b"k")],
                           AppendOptions(key_index=True))
    assert [await store.length(topic, p) for p in partitions] == before


async def test_reading_and_consuming_go_on_at_maxmemory(
        capped_cluster: RedisClusterProcess, store: RedisStreamStore, topic: str,
        full: tuple[int, list[int], StorageFull]) -> None:
    port, partitions, _ = full
    partition = partitions[0]
    groups = store.groups
    assert len(await store.read(topic, partition, limit=10)) == 10
    await groups.ensure_group(topic, partition, "late", "earliest")  # a new group on a full node
    read = await groups.read_new(topic, partition, "late", "c1", count=5, block_ms=0)
    assert len(read) == 5
    assert await groups.ack(topic, partition, "late", [read[0].offset]) == 1
    await groups.set_idle(topic, partition, "late", "c1", [read[1].offset], 0)  # a nack
    expired = await groups.expired(topic, partition, "late", min_idle_ms=0, count=10)
    claimed = await groups.claim(topic, partition, "late", "c2", expired, min_idle_ms=0)
    assert {claim.entry.offset for claim in claimed} >= {read[1].offset}
    await groups.park(topic, partition, "late", [ParkedKey(b"k", read[2].offset, 1)])
    assert [p.key for p in await groups.parked(topic, partition, "late")] == [b"k"]
    await groups.seek(topic, partition, "late", "earliest")
    assert await _rate_limit_on(capped_cluster, store, port)


async def _rate_limit_on(cluster: RedisClusterProcess, store: RedisStreamStore,
                         port: int) -> bool:
    """A rate-limit bucket that lives on the full node still charges."""
    scope = next(s for s in (f"p{i}" for i in range(10_000))
                 if cluster.primary_for_key(bucket_key(s, "messages")).port == port)
    verdict = await store.rate_limiter.acquire(scope, [Charge("messages", Limit(100, 100), 1)])
    return verdict.allowed


async def test_a_purge_makes_room_again(store: RedisStreamStore, topic: str,
                                        full: tuple[int, list[int], StorageFull]) -> None:
    _, partitions, _ = full
    await store.purge_partition(topic, partitions[0])
    appended = await store.append(topic, _records(partitions[0], 5), AppendOptions(acks=Acks.ALL))
    assert len(appended) == 5


async def test_past_the_watermark_nothing_of_a_batch_is_written(
        capped_cluster: RedisClusterProcess, store: RedisStreamStore, topic: str,
        full: tuple[int, list[int], StorageFull]) -> None:
    port, partitions, _ = full
    roomy = next(p for node, ps in _partitions_by_node(capped_cluster, topic).items()
                 if node != port for p in ps)
    async with RedisStreamStore(_settings(capped_cluster, publish_memory_watermark=0.8,
                                          memory_poll_interval_s=0.05)) as watched:
        await _until_polled(watched, {port})
        before = [await store.length(topic, p) for p in (roomy, partitions[0])]
        batch = Records([roomy, partitions[0]] * 10, [VALUE] * 20, [None] * 20,
                        ValueFormat.BINARY)
        with pytest.raises(StorageFull) as refused:
            await watched.append(topic, batch, AppendOptions(acks=Acks.ALL))
        assert refused.value.reason == "watermark"
        assert refused.value.node == f"127.0.0.1:{port}"
        with pytest.raises(StorageFull):
            watched.check_room(topic, [partitions[0]])
        watched.check_room(topic, [roomy])  # a node with room takes writes
        assert [await store.length(topic, p) for p in (roomy, partitions[0])] == before


async def _until_polled(store: RedisStreamStore, ports: set[int]) -> None:
    async with asyncio.timeout(10):
        while not ports <= {port for _, port in store.memory.nodes}:  # noqa: ASYNC110
            await asyncio.sleep(0.05)


async def test_the_memory_watch_sees_every_node_and_its_cap(
        capped_cluster: RedisClusterProcess) -> None:
    async with RedisStreamStore(_settings(capped_cluster, memory_poll_interval_s=0.05)) as watched:
        await _until_polled(watched, {node.port for node in capped_cluster.nodes})
        nodes = watched.memory.nodes
        assert sorted(memory.role for memory in nodes.values()) == ["primary"] * 3 + ["replica"] * 3
        assert {memory.max_bytes for memory in nodes.values()} == {NODE_CAP}
        assert all(0 < memory.used_bytes < NODE_CAP for memory in nodes.values())
        assert {port for _, port in nodes} == {node.port for node in capped_cluster.nodes}
