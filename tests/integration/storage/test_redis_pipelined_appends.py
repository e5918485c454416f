"""The pipelined append path on a real cluster: coalesced concurrent appends, a killed connection,
acks=all."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from redis.asyncio import Redis

from storage.append.appender import NodeReplies
from storage.keys import slot_of
from storage.models import Acks, AppendOptions, Record, Records
from storage.redis_store import RedisStreamStore
from storage.settings import RedisStoreSettings

pytestmark = [pytest.mark.integration,
              pytest.mark.store_settings(write_deadline_s=3.0, client_name="append-it")]


async def _clients_named(port: int, name: str) -> list[dict[str, Any]]:
    client = Redis(host="127.0.0.1", port=port, decode_responses=True)
    try:
        return [c for c in await client.client_list() if c.get("name") == name]
    finally:
        await client.aclose()


async def test_concurrent_appends_share_one_connection_and_all_land(
    store: RedisStreamStore, topic: str
) -> None:
    results = await asyncio.gather(*(store.append(topic, [Record(partition=0, value=b"%d" % i)],
                                                  AppendOptions()) for i in range(200)))
    offsets = [r.offset for (r,) in results]
    assert len(set(offsets)) == 200
    assert sorted(e.value for e in await store.read(topic, 0, limit=500)) == sorted(
        b"%d" % i for i in range(200))
    _, port = store.router.node_for_slot(slot_of(topic, 0))
    # The shared node connection carried the 200 MULTI/XADD/EXEC and then the read (XRANGE) too;
    # redis-py's pool holds the script load connection.
    writers = [c for c in await _clients_named(port, "append-it") if c["cmd"] in {"exec", "xrange"}]
    assert len(writers) == 1


async def test_killed_connection_reopens_without_duplicates(
    store: RedisStreamStore, topic: str
) -> None:
    first = await store.append(topic, [Record(partition=0, value=b"a", idempotency_key="one")],
                               AppendOptions())
    _, port = store.router.node_for_slot(slot_of(topic, 0))
    admin = Redis(host="127.0.0.1", port=port)
    try:
        # includes the node connection
        assert await admin.client_kill_filter(_type="normal", skipme=True) >= 1
    finally:
        await admin.aclose()
    again = await store.append(topic, [Record(partition=0, value=b"a", idempotency_key="one"),
                                       Record(partition=0, value=b"b")], AppendOptions())
    assert again[0].offset == first[0].offset
    assert again[0].duplicate
    assert [e.value for e in await store.read(topic, 0)] == [b"a", b"b"]


async def test_acks_all_writes_wait_on_their_own_connections(store: RedisStreamStore,
                                                             topic: str) -> None:
    options = AppendOptions(acks=Acks.ALL)
    results = await asyncio.gather(*(store.append(topic, [Record(partition=p, value=b"x")], options)
                                     for p in range(6) for _ in range(5)))
    assert sorted(r.partition for (r,) in results) == sorted(p for p in range(6) for _ in range(5))
    assert [info.length for info in await store.partition_info(topic, 6)] == [5] * 6


async def test_batch_mixing_idempotent_and_plain_lands_in_order(
    store: RedisStreamStore, topic: str
) -> None:
    records = [Record(partition=p % 3, value=b"%d" % p,
                      idempotency_key=f"i{p}" if p % 3 == 1 else None)
               for p in range(9)]
    first = await store.append(topic, records, AppendOptions())
    again = await store.append(topic, records, AppendOptions())
    assert [r.partition for r in first] == [p % 3 for p in range(9)]
    # the script's partition deduplicates
    assert [r.duplicate for r in again] == [p % 3 == 1 for p in range(9)]
    assert [r.offset for r in again if r.duplicate] == [r.offset for r in first if r.partition == 1]
    # plain records: twice
    assert [e.value for e in await store.read(topic, 0)] == [b"0", b"3", b"6"] * 2
    assert [e.value for e in await store.read(topic, 1)] == [b"1", b"4", b"7"]


async def _wait_calls(port: int) -> int:
    client = Redis(host="127.0.0.1", port=port)
    try:
        stats = await client.info("commandstats")
    finally:
        await client.aclose()
    return int(stats.get("cmdstat_wait", {}).get("calls", 0))


async def test_concurrent_acks_all_appends_to_one_node_share_one_wait(store: RedisStreamStore,
                                                                      topic: str) -> None:
    options = AppendOptions(acks=Acks.ALL)
    # connections open, script loaded
    await store.append(topic, [Record(partition=0, value=b"warm")], options)
    _, port = store.router.node_for_slot(slot_of(topic, 0))
    before = await _wait_calls(port)
    results = await asyncio.gather(*(store.append(topic, [Record(partition=0, value=b"%d" % i)],
                                                  options) for i in range(20)))
    # one group commit (two if the turn was split), not 20
    assert await _wait_calls(port) - before <= 2
    assert len({r.offset for (r,) in results}) == 20
    stored = sorted(e.value for e in await store.read(topic, 0))
    assert stored == sorted([b"warm", *(b"%d" % i for i in range(20))])


@pytest.mark.parametrize("acks", [Acks.LEADER, Acks.ALL])
async def test_columns_land_as_records_do_in_input_order(
    redis_cluster: Any, topic: str, acks: Acks
) -> None:
    settings = RedisStoreSettings(startup_nodes=list(redis_cluster.startup_nodes),
                                  write_deadline_s=3.0)
    partitions = [p % 6 for p in range(30)]
    values = [b'{"n":%d}' % i for i in range(30)]
    keys: list[bytes | None] = [None if i % 4 == 0 else b"key-%d" % i for i in range(30)]
    options = AppendOptions(acks=acks, max_length=1000)
    async with RedisStreamStore(settings) as store:
        offsets = (await store.append(topic, Records(partitions, values, keys), options)).offsets
        twin = f"{topic}-records"
        await store.append(twin, Records(partitions, values, keys).rows(), options)
        for partition in range(6):
            entries = await store.read(topic, partition)
            assert [e.offset for e in entries] == [
                o for o, p in zip(offsets, partitions, strict=True) if p == partition]
            assert [(e.value, e.key, e.value_format, e.headers) for e in entries] == \
                [(e.value, e.key, e.value_format, e.headers)
                 for e in await store.read(twin, partition)]
        assert [(e.value, e.key) for e in await store.read(topic, 0)] == [(values[i], keys[i])
                                                                           for i in range(0, 30, 6)]


@pytest.mark.parametrize("acks", [Acks.LEADER, Acks.ALL])
async def test_batch_over_all_primaries_queues_without_task_per_node(
    store: RedisStreamStore, topic: str, monkeypatch: pytest.MonkeyPatch, acks: Acks
) -> None:
    partitions = list(range(12)) * 3  # 12 partitions reach all 3 primaries
    nodes = {store.router.node_for_slot(slot_of(topic, p)) for p in partitions}
    assert len(nodes) == 3
    values = [b'"%d"' % i for i in range(len(partitions))]
    keys: list[bytes | None] = [None] * len(partitions)
    options = AppendOptions(acks=acks)
    # opens them
    first = (await store.append(topic, Records(partitions, values, keys), options)).offsets
    tasks_before = len(asyncio.all_tasks())
    spawned: list[int] = []
    original = asyncio.gather

    def counting_gather(*awaitables: Any, **kwargs: Any) -> Any:
        spawned.append(len(awaitables))
        return original(*awaitables, **kwargs)

    monkeypatch.setattr(asyncio, "gather", counting_gather)
    second = (await store.append(topic, Records(partitions, values, keys), options)).offsets
    # every node's calls were queued at once: nothing left for a task (or a gather)
    assert sum(spawned) == 0
    assert len(asyncio.all_tasks()) == tasks_before
    for partition in range(12):
        offsets = [e.offset for e in await store.read(topic, partition)]
        assert offsets == [o for o, p in zip(first, partitions, strict=True) if p == partition] + \
            [o for o, p in zip(second, partitions, strict=True) if p == partition]


@pytest.mark.parametrize("acks", [Acks.LEADER, Acks.ALL])
async def test_clean_transactions_are_folded_from_bytes_in_order(
    store: RedisStreamStore, topic: str, monkeypatch: pytest.MonkeyPatch, acks: Acks
) -> None:
    partitions = list(range(12)) * 2
    values = [b'"%d"' % i for i in range(len(partitions))]
    keys: list[bytes | None] = [None] * len(partitions)
    # opens the lanes
    await store.append(topic, Records(partitions, values, keys), AppendOptions(acks=acks))
    answers: list[Any] = []
    read = NodeReplies.read

    def recording(shape: NodeReplies, data: bytes, offset: int) -> Any:
        answers.append(read(shape, data, offset))  # read_transactions' answer
        return answers[-1]

    folded_one_by_one: list[int] = []
    fold = NodeReplies.fold

    def counting_fold(shape: NodeReplies, replies: list[Any]) -> Any:
        folded_one_by_one.append(1)
        return fold(shape, replies)

    monkeypatch.setattr(NodeReplies, "read", recording)
    monkeypatch.setattr(NodeReplies, "fold", counting_fold)
    offsets = (await store.append(topic, Records(partitions, values, keys),
                                  AppendOptions(acks=acks))).offsets
    assert answers
    assert all(answer is not None for answer in answers)  # every node's replies were read folded
    assert folded_one_by_one == []  # (WAIT's reply too, for acks=all): nothing went reply by reply
    assert sum(len(flat) // 2 for folded, _ in answers for flat in folded) == len(partitions)
    for partition in range(12):
        written = [e.offset for e in await store.read(topic, partition)][-2:]
        assert written == [o for o, p in zip(offsets, partitions, strict=True) if p == partition]
