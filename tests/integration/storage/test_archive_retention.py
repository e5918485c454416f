"""Retention over both tiers on the real cluster, with segments on a local path and on an
S3-compatible server: whole segments go by time and by the whole log's length, their manifest
entries and files with them, the totals stay right, and a group that had not read them is told."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from storage.archive.manifest import archive_key
from storage.archive.object_store import ArchiveStore
from storage.archive.segments import SegmentInfo
from storage.archive.tier import ArchiveSettings, ArchiveTier
from storage.models import AppendOptions, ArchivedRange, Records, ValueFormat
from storage.redis_store import RedisStreamStore
from storage.settings import RedisStoreSettings
from tests.integration.storage.test_archive_object_store import bucket  # noqa: F401
from tests.integration.storage.test_archive_tier import archive  # noqa: F401

pytestmark = pytest.mark.integration


@pytest.fixture
async def tiered(store_settings: RedisStoreSettings,
                 archive: ArchiveStore) -> AsyncIterator[RedisStreamStore]:  # noqa: F811
    settings = ArchiveSettings(segment_max_entries=40)
    async with RedisStreamStore(store_settings, archive=archive,
                                archive_settings=settings) as opened:
        yield opened


def _tier(store: RedisStreamStore) -> ArchiveTier:
    assert store.archive is not None
    return store.archive


async def _archived_log(store: RedisStreamStore, topic: str) -> tuple[list[str], list[SegmentInfo]]:
    """100 entries on partition 0: two segments of 40 archived, 20 left in the stream."""
    values = [b'{"n":%d}' % i for i in range(100)]
    appended = await store.append(topic, Records([0] * 100, values, [None] * 100,
                                                 ValueFormat.JSON), AppendOptions())
    segments = [await _tier(store).move_oldest(topic, 0, epoch=1, until=None) for _ in range(2)]
    assert all(segment is not None for segment in segments)
    return [result.offset for result in appended], [s for s in segments if s is not None]


async def _replay(store: RedisStreamStore, topic: str) -> list[str]:
    return [entry.offset for entry in await store.read(topic, 0, limit=1000)]


async def _totals(store: RedisStreamStore, topic: str) -> tuple[int, int]:
    raw = await store.router.cluster.execute_command("HMGET", archive_key(topic, 0), "entries",
                                                     "bytes")
    return int(raw[0]), int(raw[1])


async def test_expired_segments_go_whole_and_one_straddling_the_cut_stays(
        tiered: RedisStreamStore, topic: str) -> None:
    offsets, (oldest, straddling) = await _archived_log(tiered, topic)
    report = await tiered.retention.trim(topic, 0, min_offset=offsets[50])
    assert (report.removed, report.archived_removed, report.segments_removed) == (0, 40, 1)
    assert await _replay(tiered, topic) == offsets[40:]  # ten entries older than the cut remain
    store = _tier(tiered).store
    assert await store.list_segments(topic, 0) == [straddling.name]
    assert await _totals(tiered, topic) == (40, straddling.bytes)
    (info,) = await tiered.partition_info(topic, 1)
    assert info.archived == ArchivedRange(offsets[40], offsets[79], 40, 1, straddling.bytes)
    assert (info.length, info.first_offset, info.last_offset) == (20, offsets[80], offsets[99])
    again = await tiered.retention.trim(topic, 0, min_offset=offsets[50])
    assert (again.archived_removed, again.segments_removed) == (0, 0)
    assert oldest.name not in await store.list_segments(topic, 0)


async def test_time_past_every_segment_leaves_only_the_newer_stream(
        tiered: RedisStreamStore, topic: str) -> None:
    offsets, _ = await _archived_log(tiered, topic)
    report = await tiered.retention.trim(topic, 0, min_offset=offsets[90])
    assert (report.removed, report.archived_removed, report.segments_removed) == (10, 80, 2)
    assert await _replay(tiered, topic) == offsets[90:]
    assert await _tier(tiered).store.list_segments(topic, 0) == []
    assert await _totals(tiered, topic) == (0, 0)
    (info,) = await tiered.partition_info(topic, 1)
    assert info.archived == ArchivedRange(None, None, 0, 0, 0)


async def test_max_length_keeps_at_least_that_many_of_the_whole_log(
        tiered: RedisStreamStore, topic: str) -> None:
    offsets, (_, kept) = await _archived_log(tiered, topic)
    report = await tiered.retention.trim(topic, 0, max_length=50)
    # dropping the second segment too would leave 20 entries, fewer than 50
    assert (report.removed, report.archived_removed, report.segments_removed) == (0, 40, 1)
    assert await _replay(tiered, topic) == offsets[40:]
    assert await _totals(tiered, topic) == (40, kept.bytes)
    report = await tiered.retention.trim(topic, 0, max_length=20)
    assert (report.removed, report.archived_removed) == (0, 40)
    assert await _replay(tiered, topic) == offsets[80:]
    report = await tiered.retention.trim(topic, 0, max_length=5)
    assert (report.removed, report.archived_removed) == (15, 0)
    assert await _replay(tiered, topic) == offsets[95:]


async def test_groups_positioned_before_dropped_segments_are_counted(
        tiered: RedisStreamStore, topic: str) -> None:
    offsets, _ = await _archived_log(tiered, topic)
    groups = tiered.groups
    await groups.ensure_group(topic, 0, "late", "earliest")  # created after the moves
    await groups.ensure_group(topic, 0, "midway", offsets[9])
    await groups.ensure_group(topic, 0, "current", offsets[99])
    report = await tiered.retention.trim(topic, 0, min_offset=offsets[80])
    assert report.archived_removed == 80
    assert report.unacked_removed == {"late": 80, "midway": 70}


async def test_a_preview_counts_what_the_trim_then_removes_and_removes_nothing(
        tiered: RedisStreamStore, topic: str) -> None:
    offsets, _ = await _archived_log(tiered, topic)
    await tiered.groups.ensure_group(topic, 0, "midway", offsets[9])
    totals = await _totals(tiered, topic)
    preview = await tiered.retention.preview(topic, 0, min_offset=offsets[90])
    assert await _replay(tiered, topic) == offsets  # a replay reads the archive on
    assert (await _totals(tiered, topic), len(await _tier(tiered).segments(topic, 0))) == (
        totals, 2)
    assert await tiered.retention.trim(topic, 0, min_offset=offsets[90]) == preview
    assert (preview.removed, preview.archived_removed, list(preview.unacked_removed)) == (
        10, 80, ["midway"])


async def test_a_stale_expiry_drops_nothing_twice(tiered: RedisStreamStore, topic: str) -> None:
    offsets, _ = await _archived_log(tiered, topic)
    tier = _tier(tiered)
    refs = await tier.expiring(topic, 0, before=offsets[50], max_length=None)
    assert [ref.count for ref in refs] == [40]
    assert await tier.expire(topic, 0, refs) == refs
    assert await tier.expire(topic, 0, refs) == []  # a rerun, or a second owner
    second = await tier.segments(topic, 0)
    assert await tier.expire(topic, 0, [*refs, *second]) == []  # never past a missing head
    assert await _totals(tiered, topic) == (40, second[0].bytes)
    assert await _replay(tiered, topic) == offsets[40:]


async def test_a_store_without_an_archive_reports_no_archived_range(
        store: RedisStreamStore, topic: str) -> None:
    await store.append(topic, Records([0], [b"1"], [None], ValueFormat.JSON), AppendOptions())
    (info,) = await store.partition_info(topic, 1)
    assert (info.length, info.archived) == (1, None)
