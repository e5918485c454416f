"""The archive tier on the real cluster, with segments on a local path and on an S3-compatible
server: a move is written, then committed with its trim; reads cross the tiers with no gap and no
duplicate; epochs fence a stale owner; a move cut short leaves only an orphan file; a group's
unconsumed entries stay hot; a purge takes the archive with it."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from moto_server import MotoServer

from storage.archive.manifest import archive_readers_key
from storage.archive.object_store import ArchiveStore, open_archive
from storage.archive.segments import write_segment
from storage.archive.tier import ArchiveSettings, ArchiveTier
from storage.errors import ArchiveConflict
from storage.keys import log_key
from storage.models import AppendOptions, Records, ValueFormat
from storage.redis_store import RedisStreamStore
from storage.settings import RedisStoreSettings
from tests.integration.storage.test_archive_object_store import bucket, settings_for  # noqa: F401

pytestmark = pytest.mark.integration

SMALL = ArchiveSettings(segment_max_entries=40)


@pytest.fixture(params=["file", "s3"])
async def archive(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[ArchiveStore]:
    """A local archive, or one on the moto server."""
    if request.param == "file":
        async with open_archive(f"file://{tmp_path}/archive") as store:
            yield store
        return
    server: MotoServer = request.getfixturevalue("moto_s3")
    name = request.getfixturevalue("bucket")
    async with open_archive(f"s3://{name}/tier/{uuid.uuid4().hex}", settings_for(server)) as store:
        yield store


@pytest.fixture
async def tiered(store_settings: RedisStoreSettings,
                 archive: ArchiveStore) -> AsyncIterator[RedisStreamStore]:
    async with RedisStreamStore(store_settings, archive=archive, archive_settings=SMALL) as opened:
        yield opened


def _tier(store: RedisStreamStore) -> ArchiveTier:
    assert store.archive is not None
    return store.archive


async def _publish(store: RedisStreamStore, topic: str, count: int, start: int = 0) -> list[str]:
    values = [b'{"n":%d}' % i for i in range(start, start + count)]
    appended = await store.append(topic, Records([0] * count, values, [None] * count,
                                                 ValueFormat.JSON), AppendOptions())
    return [result.offset for result in appended]


async def _replay(store: RedisStreamStore, topic: str, page: int = 7) -> list[str]:
    offsets: list[str] = []
    after = None
    while entries := await store.read(topic, 0, after=after, limit=page):
        offsets += [entry.offset for entry in entries]
        after = entries[-1].offset
    return offsets


async def test_moved_entries_read_back_across_the_tiers_in_order(
        tiered: RedisStreamStore, topic: str) -> None:
    offsets = await _publish(tiered, topic, 100)
    first = await _tier(tiered).move_oldest(topic, 0, epoch=1, until=None)
    second = await _tier(tiered).move_oldest(topic, 0, epoch=1, until=offsets[69])
    assert first is not None
    assert second is not None
    assert (first.first_offset, first.last_offset) == (offsets[0], offsets[39])
    assert (second.first_offset, second.last_offset) == (offsets[40], offsets[69])
    assert await tiered.length(topic, 0) == 30  # only the hot part is left in Redis
    assert [ref.count for ref in await _tier(tiered).segments(topic, 0)] == [40, 30]
    for page in (1, 7, 40, 1000):
        assert await _replay(tiered, topic, page) == offsets
    assert [e.offset for e in await tiered.read(topic, 0, after=offsets[38], limit=3)] == \
        offsets[39:42]
    from_time = await tiered.read(topic, 0, from_time_ms=int(offsets[50].split("-")[0]),
                                  limit=200)
    assert from_time[0].offset <= offsets[50]
    assert [e.offset for e in from_time][-1] == offsets[-1]
    values = [entry.value for entry in await tiered.read(topic, 0, limit=100)]
    assert values == [b'{"n":%d}' % i for i in range(100)]


async def test_a_stale_owner_is_fenced_and_trims_nothing(tiered: RedisStreamStore,
                                                         topic: str) -> None:
    offsets = await _publish(tiered, topic, 60)
    assert await _tier(tiered).move_oldest(topic, 0, epoch=5, until=offsets[9]) is not None
    with pytest.raises(ArchiveConflict) as refused:
        await _tier(tiered).move_oldest(topic, 0, epoch=4, until=None)
    assert refused.value.fenced
    assert await tiered.length(topic, 0) == 50
    assert await _replay(tiered, topic) == offsets
    committed = [ref.name for ref in await _tier(tiered).segments(topic, 0)]
    assert await _tier(tiered).store.list_segments(topic, 0) == committed  # it took its file back


async def test_a_move_cut_short_before_its_commit_loses_nothing(
        tiered: RedisStreamStore, topic: str, store_settings: RedisStoreSettings) -> None:
    offsets = await _publish(tiered, topic, 50)
    tier = _tier(tiered)
    raw = await _raw_oldest(tiered, topic, 40)
    await write_segment(tier.store, topic, 0, raw, epoch=3)  # the owner died right after this
    assert await tiered.length(topic, 0) == 50
    assert await _replay(tiered, topic) == offsets  # an uncommitted file is never read
    moved = await tier.move_oldest(topic, 0, epoch=4, until=None)  # its successor
    assert moved is not None
    assert await tier.remove_orphans(topic, 0, epoch=4) == 1
    assert await tier.store.list_segments(topic, 0) == [moved.name]
    assert await _replay(tiered, topic) == offsets


async def _raw_oldest(store: RedisStreamStore, topic: str, count: int) -> list[object]:
    node = store.router.cluster
    items = await node.execute_command("XRANGE", log_key(topic, 0), "-", "+", "COUNT", count)
    return [(entry_id, fields) for entry_id, fields in items]


async def test_two_owners_at_once_archive_every_entry_once(tiered: RedisStreamStore,
                                                           topic: str) -> None:
    offsets = await _publish(tiered, topic, 400)
    tier = _tier(tiered)

    async def owner(epoch: int) -> int:
        moved = 0
        for _ in range(20):
            try:
                if await tier.move_oldest(topic, 0, epoch=epoch, until=None) is None:
                    return moved
                moved += 1
            except ArchiveConflict:
                continue
        return moved

    await asyncio.gather(owner(7), owner(8))
    refs = await tier.segments(topic, 0)
    assert sum(ref.count for ref in refs) + await tiered.length(topic, 0) == 400
    assert await _replay(tiered, topic, 33) == offsets


async def test_what_a_group_has_not_consumed_stays_hot(tiered: RedisStreamStore,
                                                       topic: str) -> None:
    offsets = await _publish(tiered, topic, 30)
    tier = _tier(tiered)
    assert await tier.consumed(topic, 0) is None  # no group: nothing holds the move back
    groups = tiered.groups
    await groups.ensure_group(topic, 0, "slow", "earliest")
    read = await groups.read_new(topic, 0, "slow", "c", count=20, block_ms=0)
    await groups.ack(topic, 0, "slow", [entry.offset for entry in read[:12]])
    bound = await tier.consumed(topic, 0)
    assert bound == "(" + offsets[12]
    moved = await tier.move_oldest(topic, 0, epoch=1, until=bound)
    assert moved is not None
    assert moved.last_offset == offsets[11]
    await groups.ack(topic, 0, "slow", [entry.offset for entry in read[12:]])
    assert await tier.consumed(topic, 0) == offsets[19]


async def test_a_group_that_reads_the_archive_itself_holds_nothing_hot(
        tiered: RedisStreamStore, topic: str) -> None:
    offsets = await _publish(tiered, topic, 10)
    tier, groups = _tier(tiered), tiered.groups
    await groups.ensure_group(topic, 0, "spark-job", "earliest")
    await tiered.router.cluster.sadd(archive_readers_key(topic, 0), "spark-job")
    assert await tier.consumed(topic, 0) is None
    await groups.ensure_group(topic, 0, "slow", "earliest")
    await groups.read_new(topic, 0, "slow", "c", count=4, block_ms=0)
    assert await tier.consumed(topic, 0) == "(" + offsets[0]
    await groups.delete_group(topic, 0, "spark-job")
    assert await tiered.router.cluster.smembers(archive_readers_key(topic, 0)) == set()


async def test_a_purge_takes_the_archived_part_too(tiered: RedisStreamStore, topic: str) -> None:
    await _publish(tiered, topic, 50)
    assert await _tier(tiered).move_oldest(topic, 0, epoch=1, until=None) is not None
    await tiered.purge_partition(topic, 0)
    assert await tiered.read(topic, 0, limit=100) == []
    assert await _tier(tiered).store.list_segments(topic, 0) == []
    later = await _publish(tiered, topic, 3, start=50)
    assert await _replay(tiered, topic) == later


async def test_a_cursor_in_the_archive_is_no_gap(tiered: RedisStreamStore, topic: str) -> None:
    offsets = await _publish(tiered, topic, 60)
    await tiered.groups.ensure_group(topic, 0, "g", "earliest")
    read = await tiered.groups.read_new(topic, 0, "g", "c", count=60, block_ms=0)
    await tiered.groups.ack(topic, 0, "g", [entry.offset for entry in read])
    assert await _tier(tiered).move_oldest(topic, 0, epoch=1, until=offsets[29]) is not None
    for cursor in (offsets[0], offsets[17], offsets[29], offsets[30]):
        assert await tiered.groups.lost_after(topic, 0, cursor) is None
    assert await tiered.groups.lost_after(topic, 0, offsets[29], "g") is None
    assert await tiered.groups.lost_after(topic, 0, offsets[40], "g") is None
    # a group placed inside the archive reads it through its catch-up stream: no gap either
    assert await tiered.groups.lost_after(topic, 0, offsets[17], "g") is None
    assert await tiered.groups.lost_after(topic, 0, "0-0", "fresh") is None
    await tiered.delete_entries(topic, 0, offsets[30:35])  # a hole in the stream is a gap
    assert await tiered.groups.lost_after(topic, 0, offsets[31]) is not None


async def test_a_move_racing_a_topic_deletion_leaves_nothing_behind(
        tiered: RedisStreamStore, topic: str, monkeypatch: pytest.MonkeyPatch) -> None:
    await _publish(tiered, topic, 20)
    tier = _tier(tiered)

    async def written_then_deleted(*args: object, **kwargs: object) -> object:
        info = await write_segment(*args, **kwargs)  # type: ignore[arg-type]
        await tiered.delete_topic(topic, 1)  # the topic goes between the write and the commit
        return info

    monkeypatch.setattr("storage.archive.tier.write_segment", written_then_deleted)
    with pytest.raises(ArchiveConflict, match="GONE"):
        await tier.move_oldest(topic, 0, epoch=1, until=None)
    assert await tier.segments(topic, 0) == []  # no manifest brought back to life
    assert await tier.store.list_segments(topic, 0) == []


async def test_a_move_cancelled_while_its_file_is_written_leaves_nothing_behind(
        tiered: RedisStreamStore, topic: str, monkeypatch: pytest.MonkeyPatch) -> None:
    await _publish(tiered, topic, 20)
    tier = _tier(tiered)
    writing, deleted = asyncio.Event(), asyncio.Event()
    writes: list[asyncio.Future[object]] = []

    async def written_after_the_deletion(*args: object, **kwargs: object) -> object:
        async def write() -> object:
            await deleted.wait()
            return await write_segment(*args, **kwargs)  # type: ignore[arg-type]

        # a file is written on I/O threads, which a cancel does not stop
        writes.append(asyncio.ensure_future(write()))
        writing.set()
        return await asyncio.shield(writes[0])

    monkeypatch.setattr("storage.archive.tier.write_segment", written_after_the_deletion)
    move = asyncio.create_task(tier.move_oldest(topic, 0, epoch=1, until=None))
    await writing.wait()
    move.cancel()  # the owner stops as the topic goes
    await tiered.delete_topic(topic, 1)
    deleted.set()
    with pytest.raises(asyncio.CancelledError):
        await move
    await asyncio.wait(writes)
    assert await tier.store.list_segments(topic, 0) == []


async def test_a_move_read_in_many_pages_keeps_every_field(store_settings: RedisStoreSettings,
                                                           archive: ArchiveStore,
                                                           topic: str) -> None:
    count = 3000
    keys = [None if i % 5 == 0 else b"key-%d" % (i % 37) for i in range(count)]
    values = [bytes([i % 256]) * (i % 300) if i % 3 == 0 else b'{"n":%d}' % i
              for i in range(count)]
    formats = [ValueFormat.BINARY if i % 3 == 0 else ValueFormat.JSON for i in range(count)]
    headers = [{"h": str(i)} if i % 7 == 0 else {} for i in range(count)]
    settings = ArchiveSettings(segment_max_entries=count)
    async with RedisStreamStore(store_settings, archive=archive,
                                archive_settings=settings) as store:
        await store.append(topic, Records([0] * count, values, keys, formats, headers),
                           AppendOptions())
        hot = await store.read(topic, 0, limit=count)
        moved = await _tier(store).move_oldest(topic, 0, epoch=1, until=None)
        assert moved is not None
        assert (moved.count, await store.length(topic, 0)) == (count, 0)
        assert await store.read(topic, 0, limit=count) == hot


async def test_a_move_stops_at_about_its_byte_cap(store_settings: RedisStoreSettings,
                                                  archive: ArchiveStore, topic: str) -> None:
    settings = ArchiveSettings(segment_max_entries=100_000, segment_max_bytes=64 << 10)
    async with RedisStreamStore(store_settings, archive=archive,
                                archive_settings=settings) as store:
        await store.append(topic, Records([0] * 2000, [b'"%s"' % (b"x" * 1000)] * 2000,
                                          [None] * 2000), AppendOptions())
        moved = await _tier(store).move_oldest(topic, 0, epoch=1, until=None)
        assert moved is not None
        # the page that reaches the cap is the last: at most a page's worth of ~1 MiB beyond it
        assert 64 <= moved.count < 2000
        assert moved.count + await store.length(topic, 0) == 2000
