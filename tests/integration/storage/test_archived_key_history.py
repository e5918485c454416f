"""A key-indexed partition whose oldest entries moved into the archive: a key's history reads both
tiers in order (oldest or newest first, paged), its index keeps the archived offsets until
retention drops their segments; on a real cluster and a local archive."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from storage.archive.object_store import open_archive
from storage.archive.tier import ArchiveSettings, ArchiveTier
from storage.key_index import KeyHistory
from storage.keys import key_index_key
from storage.models import AppendOptions, Records
from storage.redis_store import RedisStreamStore
from storage.settings import RedisStoreSettings

pytestmark = pytest.mark.integration

INDEXED = AppendOptions(key_index=True)


@pytest.fixture
async def tiered(store_settings: RedisStoreSettings,
                 tmp_path: Path) -> AsyncIterator[RedisStreamStore]:
    async with open_archive(f"file://{tmp_path}/archive") as archive, \
            RedisStreamStore(store_settings, archive=archive,
                             archive_settings=ArchiveSettings(segment_max_entries=25)) as store:
        yield store


def _tier(store: RedisStreamStore) -> ArchiveTier:
    assert store.archive is not None
    return store.archive


async def _keyed_log(store: RedisStreamStore, topic: str, archived: int) -> list[str]:
    """60 entries, keys a and b (every third), the first ``archived`` moved; their offsets."""
    keyed = [(b"b" if i % 3 == 0 else b"a", b"%d" % i) for i in range(60)]
    results = await store.append(topic, Records([0] * 60, [v for _, v in keyed],
                                                [k for k, _ in keyed]), INDEXED)
    offsets = [result.offset for result in results]
    while await _tier(store).move_oldest(topic, 0, epoch=1, until=offsets[archived - 1]):
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
    offsets = await _keyed_log(tiered, topic, 50)
    await KeyHistory(tiered.router, tiered._lanes).sweep(topic, 0)
    index = key_index_key(topic, 0, b"b")
    assert await tiered.router.cluster.llen(index) == 20
    await tiered.retention.trim(topic, 0, min_offset=offsets[30])
    assert await _values(tiered, topic, b"b", limit=100) == list(range(27, 60, 3))
    await KeyHistory(tiered.router, tiered._lanes).sweep(topic, 0)
    assert await tiered.router.cluster.llen(index) == 11
