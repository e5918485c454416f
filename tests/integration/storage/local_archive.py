"""A store with a local archive for the archive tier's tests, and its tier."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

from storage.archive.object_store import open_archive
from storage.archive.tier import ArchiveSettings, ArchiveTier
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
