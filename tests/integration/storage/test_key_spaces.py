"""Key spaces on a real cluster: the same key written in two spaces is two keys for every piece of
key state (indexes, compaction, snapshots and their cursors, expected positions), while the stored
messages keep their plain keys and the empty space's snapshot still pages every space."""

from __future__ import annotations

import asyncio
import base64

import pytest
from redis.asyncio import Redis

from storage.codec import offset_key
from storage.compaction import SNAPSHOT_LUA
from storage.errors import ConditionFailed
from storage.keys import key_registry_key, log_key, slot_of
from storage.models import AppendOptions, Conditions, Records, StoredEntry
from storage.redis_store import RedisStreamStore

pytestmark = [pytest.mark.integration, pytest.mark.store_settings(write_deadline_s=3.0)]

COMPACTED = AppendOptions(key_index=True, compact=True)
INDEXED = AppendOptions(key_index=True)
MINUTE_MS = 60_000
A, B = b"tenant=a", b"tenant=b"


async def put(store: RedisStreamStore, topic: str, space: bytes, *pairs: tuple[bytes, bytes],
              options: AppendOptions = COMPACTED) -> list[str]:
    """Append keyed JSON values to partition 0 in ``space``; their offsets."""
    records = Records([0] * len(pairs), [v for _, v in pairs], [k for k, _ in pairs],
                      key_space=space)
    return (await store.append(topic, records, options)).offsets


async def pages(store: RedisStreamStore, topic: str, space: bytes, as_of: str,
                after: str | None = None) -> tuple[list[StoredEntry], list[str]]:
    """A whole snapshot of ``space`` read one key a page: its entries and the cursors it gave."""
    entries: list[StoredEntry] = []
    cursors: list[str] = []
    while True:
        after, more = await store.snapshot_page(topic, 0, as_of=as_of, after=after, limit=1,
                                                lag_ms=MINUTE_MS, key_space=space)
        entries += more
        if after is None:
            return entries, cursors
        cursors.append(after)


def values(entries: list[StoredEntry]) -> dict[bytes | None, bytes]:
    return {e.key: e.value for e in entries}


async def test_another_space_neither_overwrites_nor_deletes_a_spaces_keys(
        store: RedisStreamStore, topic: str) -> None:
    await put(store, topic, A, (b"k1", b'"a1"'), (b"k2", b'"a2"'))
    last = (await put(store, topic, B, (b"k1", b'"b1"'), (b"k2", b"null")))[-1]
    assert values((await pages(store, topic, A, last))[0]) == {b"k1": b'"a1"', b"k2": b'"a2"'}
    assert values((await pages(store, topic, B, last))[0]) == {b"k1": b'"b1"'}
    await asyncio.sleep(0.002)  # past the millisecond of the writes: lag 0 takes what it may
    assert await store.retention.compact(topic, 0, lag_ms=0) == 1  # b's lone tombstone
    assert [(e.key, e.value) for e in await store.read(topic, 0)] == [
        (b"k1", b'"a1"'), (b"k2", b'"a2"'), (b"k1", b'"b1"')]
    assert values((await pages(store, topic, A, last))[0]) == {b"k1": b'"a1"', b"k2": b'"a2"'}


async def test_the_empty_spaces_snapshot_pages_every_spaces_keys(
        store: RedisStreamStore, topic: str) -> None:
    await put(store, topic, A, (b"k", b'"a"'))
    await put(store, topic, b"", (b"k", b'"plain"'))
    last = (await put(store, topic, B, (b"k", b'"b"')))[-1]
    entries, _ = await pages(store, topic, b"", last)
    assert sorted(e.value for e in entries) == [b'"a"', b'"b"', b'"plain"']
    assert {e.key for e in entries} == {b"k"}


async def test_the_snapshot_script_called_as_the_spark_source_does_pages_every_space(
        store: RedisStreamStore, topic: str) -> None:
    await put(store, topic, A, (b"k", b'"a"'))
    last = (await put(store, topic, B, (b"k", b'"b"')))[-1]
    host, port = store.router.node_for_slot(slot_of(topic, 0))
    node = Redis(host=host, port=port)
    try:  # four arguments, as pipeline.ranges.read_snapshot passes them
        cursor, items = await node.eval(SNAPSHOT_LUA, 2, key_registry_key(topic, 0),
                                        log_key(topic, 0), b"", last, 10, MINUTE_MS)
    finally:
        await node.aclose()
    assert cursor.endswith(b"\x00k")  # b's, after a's
    assert sorted(fields[1] for _, fields in items) == [b'"a"', b'"b"']  # K<key>, the value


async def test_a_spaces_cursors_name_only_its_own_keys(store: RedisStreamStore,
                                                        topic: str) -> None:
    await put(store, topic, A, *[(b"a-secret-%d" % i, b"1") for i in range(3)])
    await put(store, topic, B, (b"b-0", b"1"), (b"b-1", b"1"))
    last = (await put(store, topic, A, (b"a-secret-9", b"1")))[-1]
    entries, cursors = await pages(store, topic, B, last)
    assert [e.key for e in entries] == [b"b-0", b"b-1"]
    assert [base64.urlsafe_b64decode(c) for c in cursors] == [b"b-0"]
    forged = base64.urlsafe_b64encode(b"a-secret-0").decode()
    assert [e.key for e in (await pages(store, topic, B, last, after=forged))[0]] == [b"b-0",
                                                                                     b"b-1"]


async def test_key_history_reads_the_key_of_the_callers_space(store: RedisStreamStore,
                                                               topic: str) -> None:
    await put(store, topic, A, (b"k", b"1"), (b"k", b"2"), options=INDEXED)
    await put(store, topic, B, (b"other", b"1"), options=INDEXED)
    assert [e.value for e in await store.key_history(topic, 0, b"k", key_space=A)] == [b"1",
                                                                                       b"2"]
    for space in (B, b""):
        assert await store.key_history(topic, 0, b"k", key_space=space) == []
        assert await store.key_history(topic, 0, b"k", key_space=space, newest_first=True,
                                       limit=1) == []


async def test_an_expected_position_is_the_key_in_the_writers_space(store: RedisStreamStore,
                                                                     topic: str) -> None:
    a_offset = (await put(store, topic, A, (b"k", b"1"), options=INDEXED))[0]
    in_b = Records([0], [b"2"], [b"k"], key_space=B)
    with pytest.raises(ConditionFailed) as failed:
        await store.append(topic, in_b, INDEXED, Conditions(key_offsets=[a_offset]))
    assert failed.value.current == "none"
    b_offset = (await store.append(topic, in_b, INDEXED, Conditions(key_offsets=["none"])))[0]
    assert offset_key(b_offset.offset) > offset_key(a_offset)
    again = Records([0], [b"3"], [b"k"], key_space=A)
    assert (await store.append(topic, again, INDEXED, Conditions(key_offsets=[a_offset])))[0]
