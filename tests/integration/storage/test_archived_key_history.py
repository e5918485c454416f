"""A key-indexed partition whose oldest entries moved into the archive: a key's history reads both
tiers in order (oldest or newest first, paged), its index keeps the archived offsets until
retention drops their segments; on a real cluster and a local archive."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from storage.errors import ConditionFailed
from storage.key_index import KeyHistory
from storage.keys import key_index_key
from storage.models import NO_MESSAGE, AppendOptions, Conditions, Records
from storage.redis_store import RedisStreamStore
from storage.settings import RedisStoreSettings
from tests.integration.storage.local_archive import archived_store, tier_of

pytestmark = pytest.mark.integration

INDEXED = AppendOptions(key_index=True)


@pytest.fixture
async def tiered(store_settings: RedisStoreSettings,
                 tmp_path: Path) -> AsyncIterator[RedisStreamStore]:
    async with archived_store(store_settings, tmp_path / "archive", 25) as store:
        yield store


async def _keyed_log(store: RedisStreamStore, topic: str, archived: int) -> list[str]:
    """60 entries, keys a and b (every third), everything up to the ``archived``-th moved; their
    offsets."""
    keyed = [(b"b" if i % 3 == 0 else b"a", b"%d" % i) for i in range(60)]
    results = await store.append(topic, Records([0] * 60, [v for _, v in keyed],
                                                [k for k, _ in keyed]), INDEXED)
    offsets = [result.offset for result in results]
    while await tier_of(store).move_oldest(topic, 0, epoch=1, until=offsets[archived - 1]):
        pass
    return offsets


async def _values(store: RedisStreamStore, topic: str, key: bytes, **kw: object) -> list[int]:
    return [int(e.value) for e in await store.key_history(topic, 0, key, **kw)]  # type: ignore[arg-type]


async def test_a_keys_history_reads_the_archive_then_the_stream(
        tiered: RedisStreamStore, topic: str) -> None:
    offsets = await _keyed_log(tiered, topic, 50)
    assert await tiered.length(topic, 0) == 10
    assert await _values(tiered, topic, b"b", limit=100) == list(range(0, 60, 3))
    assert await _values(tiered, topic, b"a", limit=4, newest_first=True) == [59, 58, 56, 55]
    assert await _values(tiered, topic, b"a", low="(" + offsets[10], high=offsets[20],
                         limit=100) == [11, 13, 14, 16, 17, 19, 20]
    assert await _values(tiered, topic, b"b", low=offsets[45], limit=3) == [45, 48, 51]


async def test_an_index_keeps_archived_offsets_until_retention_drops_their_segments(
        tiered: RedisStreamStore, topic: str) -> None:
    await tiered.append(topic, Records([0] * 5, [b"%d" % i for i in range(5)], [b"old"] * 5),
                        INDEXED)
    offsets = await _keyed_log(tiered, topic, 45)  # segments: old's 5 and 0..19, then 20..44
    sweep = KeyHistory(tiered.router, tiered._lanes).sweep
    index = key_index_key(topic, 0, b"old")
    await sweep(topic, 0)
    assert await tiered.router.cluster.llen(index) == 5
    assert await _values(tiered, topic, b"old") == list(range(5))
    await tiered.retention.trim(topic, 0, min_offset=offsets[25])
    assert await _values(tiered, topic, b"old") == []
    assert await _values(tiered, topic, b"b", limit=100) == list(range(21, 60, 3))
    assert await sweep(topic, 0) >= 1
    assert await tiered.router.cluster.exists(index) == 0


async def test_a_keys_65th_offset_keeps_the_offsets_that_moved_to_the_archive(
        tiered: RedisStreamStore, topic: str) -> None:
    written = await tiered.append(topic, Records([0] * 64, [b"%d" % i for i in range(64)],
                                                 [b"k"] * 64), INDEXED)
    while await tier_of(tiered).move_oldest(topic, 0, epoch=1, until=written.offsets[29]):
        pass
    await tiered.append(topic, Records([0], [b"64"], [b"k"]), INDEXED)
    assert await tiered.router.cluster.llen(key_index_key(topic, 0, b"k")) == 65
    assert await _values(tiered, topic, b"k", limit=100) == list(range(65))


async def test_a_keys_archived_newest_offset_is_its_expected_position(
        tiered: RedisStreamStore, topic: str) -> None:
    old = await tiered.append(topic, Records([0] * 3, [b"0", b"1", b"2"], [b"old"] * 3), INDEXED)
    await _keyed_log(tiered, topic, 50)  # old's entries and 50 more moved
    with pytest.raises(ConditionFailed) as refused:
        await tiered.append(topic, Records([0], [b"3"], [b"old"]), INDEXED,
                            Conditions(key_offsets=[NO_MESSAGE]))
    assert refused.value.current == old.offsets[2]
    await tiered.append(topic, Records([0], [b"3"], [b"old"]), INDEXED,
                        Conditions(key_offsets=[old.offsets[2]]))
    assert await _values(tiered, topic, b"old") == [0, 1, 2, 3]
