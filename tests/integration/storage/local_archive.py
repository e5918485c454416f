"""A store with a local archive for the archive tier's tests, its tier, and entries to move."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

from storage.archive.object_store import open_archive
from storage.archive.tier import ArchiveSettings, ArchiveTier
from storage.models import AppendOptions, Records, ValueFormat
from storage.redis_store import RedisStreamStore
from storage.settings import RedisStoreSettings


@contextlib.asynccontextmanager
async def archived_store(settings: RedisStoreSettings, directory: Path,
                         segment_max_entries: int) -> AsyncIterator[RedisStreamStore]:
    """An open store whose archive is ``directory``, segments of ``segment_max_entries``."""
    async with open_archive(f"file://{directory}") as archive, \
            RedisStreamStore(settings, archive=archive, archive_settings=ArchiveSettings(
                segment_max_entries=segment_max_entries)) as store:
        yield store


def tier_of(store: RedisStreamStore) -> ArchiveTier:
    assert store.archive is not None
    return store.archive


async def publish(store: RedisStreamStore, topic: str, count: int) -> list[str]:
    """``count`` JSON entries (``{"n": 0}`` on) appended to partition 0; their offsets."""
    values = [b'{"n":%d}' % n for n in range(count)]
    appended = await store.append(topic, Records([0] * count, values, [None] * count,
                                                 ValueFormat.JSON), AppendOptions())
    return [result.offset for result in appended]
