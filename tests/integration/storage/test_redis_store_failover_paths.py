"""Routing and failure paths of RedisStreamStore.append on a real cluster: MOVED, ASK,
NOSCRIPT, deadlines."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from redis.asyncio import Redis

from storage.errors import StorageUnavailable
from storage.keys import log_key, slot_of
from storage.models import AppendOptions, Record, Records
from storage.redis_store import RedisStreamStore

pytestmark = [pytest.mark.integration,
              pytest.mark.store_settings(write_deadline_s=0.8, read_deadline_s=0.8)]


Write = Callable[[RedisStreamStore, str, list[bytes]], Awaitable[list[str]]]


async def _as_records(store: RedisStreamStore, topic: str, values: list[bytes]) -> list[str]:
    return [r.offset for r in await store.append(topic, [Record(partition=0, value=v)
                                                         for v in values], AppendOptions())]


async def _as_plain_columns(store: RedisStreamStore, topic: str, values: list[bytes]) -> list[str]:
    columns = Records([0] * len(values), values, [None] * len(values))
    return (await store.append(topic, columns, AppendOptions())).offsets


@pytest.fixture(params=[_as_records, _as_plain_columns], ids=["records", "columns"])
def write(request: pytest.FixtureRequest) -> Write:
    """Partition 0 appends of record objects (encoded one by one) or of columns (the publish hot
    path)."""
    return request.param  # type: ignore[no-any-return]


async def _node_client(port: int) -> Any:  # Any: redis-py leaves execute_command untyped
    return Redis(host="127.0.0.1", port=port, decode_responses=True)


async def test_stale_slot_map_follows_moved_and_refreshes(store: RedisStreamStore, topic: str,
                                                          write: Write) -> None:
    manager = store.router.cluster.nodes_manager
    slot = slot_of(topic, 0)
    owner = manager.slots_cache[slot][0]
    wrong = next(n for n in store.router.cluster.get_primaries() if n.name != owner.name)
    manager.slots_cache[slot] = [wrong]  # as after a failover the client has not noticed yet
    offsets = await write(store, topic, [b"x"])
    assert manager.slots_cache[slot][0].name == owner.name
    assert [e.offset for e in await store.read(topic, 0)] == offsets


async def test_missing_script_is_loaded_and_the_write_retried(
    store: RedisStreamStore, topic: str, redis_cluster: Any
) -> None:
    for node in redis_cluster.primaries:
        client = await _node_client(node.port)
        await client.script_flush()
        await client.aclose()
    # Idempotency keys: records without any go as MULTI/XADD/EXEC, which needs no script.
    results = await store.append(topic, [Record(partition=p, value=b"x", idempotency_key=f"i{p}")
                                         for p in range(6)],
                                 AppendOptions())
    assert [r.partition for r in results] == list(range(6))
    assert [info.length for info in await store.partition_info(topic, 6)] == [1] * 6


async def test_unreachable_primary_raises_unavailable_within_deadline(
    store: RedisStreamStore, topic: str, redis_cluster: Any
) -> None:
    _, port = store.router.node_for_slot(slot_of(topic, 0))
    primary = next(n for n in redis_cluster.primaries if n.port == port)
    await store.append(topic, [Record(partition=0, value=b"warm")], AppendOptions())
    primary.pause()  # well under cluster-node-timeout, so no failover starts
    started = time.monotonic()
    try:
        with pytest.raises(StorageUnavailable) as caught:
            await store.append(topic, [Record(partition=0, value=b"x")], AppendOptions())
    finally:
        primary.resume()
    assert time.monotonic() - started < 2.0
    assert caught.value.retriable
    assert caught.value.retry_after_s == 1.0
    (result,) = await store.append(topic, [Record(partition=0, value=b"y")], AppendOptions())
    assert not result.duplicate


async def test_ask_redirect_writes_to_importing_node(
    store: RedisStreamStore, topic: str, redis_cluster: Any, write: Write
) -> None:
    slot = slot_of(topic, 0)
    _, src_port = store.router.node_for_slot(slot)
    dst_port = next(n.port for n in redis_cluster.primaries if n.port != src_port)
    src, dst = await _node_client(src_port), await _node_client(dst_port)
    src_id, dst_id = (await src.execute_command("CLUSTER MYID"),
                      await dst.execute_command("CLUSTER MYID"))
    try:
        await dst.execute_command("CLUSTER SETSLOT", slot, "IMPORTING", src_id)
        await src.execute_command("CLUSTER SETSLOT", slot, "MIGRATING", dst_id)
        # Three records: the transaction's every XADD must be allowed by the one ASKING before
        # MULTI.
        offsets = await write(store, topic, [b"x%d" % i for i in range(3)])
        pipe = dst.pipeline(transaction=False)
        pipe.execute_command("ASKING")
        pipe.xlen(log_key(topic, 0))
        pipe.execute_command("ASKING")
        pipe.delete(log_key(topic, 0))
        replies = await pipe.execute()
        assert replies[1] == 3, "the entries should be on the importing node"
        assert len(set(offsets)) == 3
    finally:
        await src.execute_command("CLUSTER SETSLOT", slot, "STABLE")
        await dst.execute_command("CLUSTER SETSLOT", slot, "STABLE")
        await src.aclose()
        await dst.aclose()


async def test_nonblocking_group_read_follows_moved_and_refreshes(store: RedisStreamStore,
                                                                           topic: str) -> None:
    offsets = await _as_records(store, topic, [b"a", b"b", b"c"])
    await store.groups.ensure_group(topic, 0, "g", "earliest")
    manager = store.router.cluster.nodes_manager
    slot = slot_of(topic, 0)
    owner = manager.slots_cache[slot][0]
    wrong = next(n for n in store.router.cluster.get_primaries() if n.name != owner.name)
    manager.slots_cache[slot] = [wrong]  # the node connection of the wrong primary answers MOVED
    entries = await store.groups.read_new(topic, 0, "g", "c1", count=10, block_ms=0)
    assert [e.offset for e in entries] == offsets
    assert manager.slots_cache[slot][0].name == owner.name
    pending = await store.groups.expired(topic, 0, "g", min_idle_ms=0, count=10)
    assert [p.offset for p in pending] == offsets, ("the entries are pending for the group "
                                                    "exactly once")


async def test_nonblocking_group_read_creates_missing_group(
        store: RedisStreamStore, topic: str) -> None:
    offsets = await _as_records(store, topic, [b"a", b"b"])
    entries = await store.groups.read_new(topic, 0, "never-created", "c1", count=10, block_ms=0)
    assert [e.offset for e in entries] == offsets
    assert await store.groups.read_new(topic, 0, "never-created", "c1", count=10, block_ms=0) == []


async def test_a_replay_read_follows_moved_and_refreshes(store: RedisStreamStore,
                                                         topic: str) -> None:
    offsets = await _as_records(store, topic, [b"a", b"b", b"c"])
    manager = store.router.cluster.nodes_manager
    slot = slot_of(topic, 0)
    owner = manager.slots_cache[slot][0]
    wrong = next(n for n in store.router.cluster.get_primaries() if n.name != owner.name)
    manager.slots_cache[slot] = [wrong]  # the node connection of the wrong primary answers MOVED
    assert [e.offset for e in await store.read(topic, 0, after=offsets[0], limit=10)] == offsets[1:]
    assert manager.slots_cache[slot][0].name == owner.name
