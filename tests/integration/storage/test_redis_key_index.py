"""Per-key indexes and conditional appends on a real cluster: history, expectations, retention."""

from __future__ import annotations

import pytest
from redis.asyncio import Redis

from storage.errors import ConditionFailed
from storage.keys import key_index_key, key_registry_key, log_key, slot_of
from storage.models import NO_MESSAGE, Acks, AppendOptions, Conditions, Records
from storage.redis_store import RedisStreamStore

pytestmark = [pytest.mark.integration, pytest.mark.store_settings(write_deadline_s=3.0)]

INDEXED = AppendOptions(key_index=True)


def _records(*keyed: tuple[bytes | None, bytes], batch_key: str | None = None) -> Records:
    return Records([0] * len(keyed), [value for _, value in keyed], [key for key, _ in keyed],
                   batch_key=batch_key)


async def _primary(store: RedisStreamStore, topic: str) -> Redis:
    host, port = store.router.node_for_slot(slot_of(topic, 0))
    return Redis(host=host, port=port)


async def test_a_keys_history_holds_only_its_own_entries_in_order(
    store: RedisStreamStore, topic: str
) -> None:
    await store.append(topic, _records(*[(b"a" if i % 3 else b"b", b"%d" % i)
                                         for i in range(30)]), INDEXED)
    history = await store.key_history(topic, 0, b"b", limit=100)
    assert [e.value for e in history] == [b"%d" % i for i in range(0, 30, 3)]
    assert all(e.key == b"b" for e in history)
    newest = await store.key_history(topic, 0, b"a", limit=3, newest_first=True)
    assert [e.value for e in newest] == [b"29", b"28", b"26"]
    page = await store.key_history(topic, 0, b"a", low="(" + newest[-1].offset, limit=100)
    assert [e.value for e in page] == [b"28", b"29"]
    assert await store.key_history(topic, 0, b"nobody") == []


async def test_expected_key_position_admits_one_writer_only(
    store: RedisStreamStore, topic: str
) -> None:
    first = await store.append(topic, _records((b"order-1", b"created")), INDEXED,
                               Conditions(key_offsets=[NO_MESSAGE]))
    with pytest.raises(ConditionFailed) as refused:
        await store.append(topic, _records((b"order-1", b"created again")), INDEXED,
                           Conditions(key_offsets=[NO_MESSAGE]))
    assert (refused.value.index, refused.value.expected, refused.value.current) == (
        0, NO_MESSAGE, first[0].offset)
    second = await store.append(topic, _records((b"order-1", b"paid"), (b"order-1", b"shipped")),
                                INDEXED, Conditions(key_offsets=[first[0].offset, None]))
    assert [e.value for e in await store.key_history(topic, 0, b"order-1")] == [
        b"created", b"paid", b"shipped"]
    with pytest.raises(ConditionFailed):
        await store.append(topic, _records((b"order-1", b"late")), INDEXED,
                           Conditions(key_offsets=[second[0].offset]))
    assert await store.length(topic, 0) == 3


async def test_a_refused_request_writes_none_of_its_messages(
    store: RedisStreamStore, topic: str
) -> None:
    await store.append(topic, _records((b"x", b"1")), INDEXED)
    with pytest.raises(ConditionFailed) as refused:
        await store.append(topic, _records((b"y", b"new"), (b"x", b"stale")), INDEXED,
                           Conditions(key_offsets=[NO_MESSAGE, NO_MESSAGE]))
    assert refused.value.index == 1
    assert await store.length(topic, 0) == 1
    assert await store.key_history(topic, 0, b"y") == []


async def test_expected_partition_offset_works_without_key_indexes(
    store: RedisStreamStore, topic: str
) -> None:
    plain = AppendOptions(acks=Acks.ALL)
    first = await store.append(topic, _records((None, b"1")), plain,
                               Conditions(last_offset=NO_MESSAGE))
    with pytest.raises(ConditionFailed) as refused:
        await store.append(topic, _records((None, b"2")), plain,
                           Conditions(last_offset=NO_MESSAGE))
    assert refused.value.index is None
    assert refused.value.current == first[0].offset
    await store.append(topic, _records((None, b"2")), plain,
                       Conditions(last_offset=first[0].offset))
    assert await store.length(topic, 0) == 2
    primary = await _primary(store, topic)
    try:  # no index where the topic keeps none
        assert await primary.exists(key_registry_key(topic, 0)) == 0
    finally:
        await primary.aclose()


async def test_retried_conditional_append_is_duplicate_not_conflict(
    store: RedisStreamStore, topic: str
) -> None:
    request = _records((b"k", b"v1"), (b"k", b"v2"), batch_key="retry-1")
    first = await store.append(topic, request, INDEXED, Conditions(key_offsets=[NO_MESSAGE, None]))
    again = await store.append(topic, request, INDEXED, Conditions(key_offsets=[NO_MESSAGE, None]))
    assert [r.offset for r in again] == [r.offset for r in first]
    assert [r.duplicate for r in again] == [True, True]
    keyed = Records([0], [b"v3"], [b"k"], idempotency_keys=["m-3"])
    conditions = Conditions(key_offsets=[first[1].offset])
    third = await store.append(topic, keyed, INDEXED, conditions)
    assert (await store.append(topic, keyed, INDEXED, conditions))[0].duplicate
    assert [e.offset for e in await store.key_history(topic, 0, b"k")] == [
        first[0].offset, first[1].offset, third[0].offset]


async def test_trim_drops_entries_from_history_and_empty_indexes(
    store: RedisStreamStore, topic: str
) -> None:
    old = await store.append(topic, _records((b"gone", b"1"), (b"kept", b"2")), INDEXED)
    new = await store.append(topic, _records((b"kept", b"3")), INDEXED)
    await store.retention.trim(topic, 0, min_offset=new[0].offset)
    assert [e.value for e in await store.key_history(topic, 0, b"kept")] == [b"3"]
    assert await store.key_history(topic, 0, b"gone") == []
    with pytest.raises(ConditionFailed) as refused:  # a key whose messages all went has none
        await store.append(topic, _records((b"gone", b"x")), INDEXED,
                           Conditions(key_offsets=[old[0].offset]))
    assert refused.value.current == NO_MESSAGE
    primary = await _primary(store, topic)
    try:
        assert await primary.exists(key_index_key(topic, 0, b"gone")) == 0
        assert await primary.zrange(key_registry_key(topic, 0), 0, -1) == [
            key_index_key(topic, 0, b"kept")]
        assert await primary.xlen(log_key(topic, 0)) == 1
    finally:
        await primary.aclose()


async def test_cross_partition_conditional_append_is_refused(
    store: RedisStreamStore, topic: str
) -> None:
    records = Records([0, 1], [b"a", b"b"], [b"a", b"b"])
    with pytest.raises(ValueError, match="one partition"):
        await store.append(topic, records, INDEXED, Conditions(key_offsets=[NO_MESSAGE, None]))


async def test_idempotency_key_twice_in_one_request_writes_once(
    store: RedisStreamStore, topic: str
) -> None:
    twice = Records([0, 0, 0], [b"1", b"2", b"3"], [b"k", b"k", b"k"],
                    idempotency_keys=["same", "other", "same"])
    first = await store.append(topic, twice, INDEXED, Conditions(key_offsets=[NO_MESSAGE, None,
                                                                             None]))
    assert first.offsets[2] == first.offsets[0]
    assert first.duplicates == [False, False, True]
    assert [e.value for e in await store.key_history(topic, 0, b"k")] == [b"1", b"2"]


async def test_a_keys_65th_offset_drops_the_offsets_trimmed_from_under_its_index(
    store: RedisStreamStore, topic: str
) -> None:
    written = await store.append(topic, _records(*[(b"k", b"%d" % i) for i in range(64)]),
                                 INDEXED)
    primary = await _primary(store, topic)
    try:
        # trimmed as a max length trims, with no sweep after it
        await primary.xtrim(log_key(topic, 0), minid=written[10].offset, approximate=False)
        await store.append(topic, _records((b"k", b"64")), INDEXED)
        assert await primary.llen(key_index_key(topic, 0, b"k")) == 55
    finally:
        await primary.aclose()
    history = await store.key_history(topic, 0, b"k", limit=100)
    assert [e.value for e in history] == [b"%d" % i for i in range(10, 65)]
