"""Consumer groups placed inside the archive (a new group from the start, a seek back) read every
archived entry through a catch-up stream, with pending lists, claims and acks, then move onto the
log with nothing missed or repeated; on a real Redis Cluster and a local archive."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from storage.archive import catch_up
from storage.archive.manifest import catch_up_key, catching_up_key
from storage.errors import ArchiveConflict
from storage.groups import RedisGroupStore
from storage.keys import log_key
from storage.redis_store import RedisStreamStore
from storage.settings import RedisStoreSettings
from tests.integration.storage.local_archive import archived_store, publish, tier_of

pytestmark = pytest.mark.integration

G = "g"


@pytest.fixture
async def tiered(store_settings: RedisStoreSettings, tmp_path: Path,
                 monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[RedisStreamStore]:
    monkeypatch.setattr(catch_up, "WINDOW_ENTRIES", 7)  # several windows per test
    async with archived_store(store_settings, tmp_path / "archive", 20) as store:
        yield store


async def _archive(store: RedisStreamStore, topic: str, until: str) -> None:
    while await tier_of(store).move_oldest(topic, 0, epoch=1, until=until):
        pass


async def _archived_group(store: RedisStreamStore, topic: str, total: int,
                          archived: int) -> list[str]:
    """``total`` entries of which the first ``archived`` moved into the archive, and the group
    created from the first offset after the move; their offsets."""
    offsets = await publish(store, topic, total)
    await _archive(store, topic, offsets[archived - 1])
    await store.groups.ensure_group(topic, 0, G, "earliest")
    return offsets


async def _drain(groups: RedisGroupStore, topic: str, group: str = G) -> list[str]:
    """Read and ack until a read comes back empty; the offsets in delivery order."""
    seen: list[str] = []
    while entries := await groups.read_new(topic, 0, group, "c", count=5, block_ms=0):
        seen += [entry.offset for entry in entries]
        await groups.ack(topic, 0, group, [entry.offset for entry in entries])
    return seen


async def _keys(store: RedisStreamStore, topic: str, group: str = G) -> tuple[bool, set[bytes]]:
    cluster = store.router.cluster
    return (bool(await cluster.exists(catch_up_key(topic, 0, group))),
            await cluster.smembers(catching_up_key(topic, 0)))


async def test_a_new_group_reads_the_archive_then_the_log_in_order(
        tiered: RedisStreamStore, topic: str) -> None:
    offsets = await _archived_group(tiered, topic, 50, 40)
    groups = tiered.groups
    assert await _keys(tiered, topic) == (True, {G.encode()})
    assert G in await groups.groups(topic, 0)
    assert await _drain(groups, topic) == offsets
    assert await _keys(tiered, topic) == (False, set()), "caught up: back on the log"
    state = await groups.state(topic, 0, G)
    assert (state.exists, state.last_delivered_offset, state.pending) == (True, offsets[-1], 0)
    later = await publish(tiered, topic, 3)
    assert await _drain(groups, topic) == later


async def test_a_group_switches_to_the_log_only_once_its_archived_entries_are_settled(
        tiered: RedisStreamStore, topic: str) -> None:
    offsets = await _archived_group(tiered, topic, 30, 20)
    groups = tiered.groups
    read = []
    while entries := await groups.read_new(topic, 0, G, "c", count=100, block_ms=0):
        read += entries
    assert [entry.offset for entry in read] == offsets[:20], "the log waits for the archive"
    await groups.ack(topic, 0, G, offsets[1:20])
    state = await groups.state(topic, 0, G)
    assert (state.pending, state.oldest_pending_offset) == (1, offsets[0])
    assert (state.last_delivered_offset, state.lag) == (offsets[19], 10)  # what Redis holds
    (pending,) = await groups.expired(topic, 0, G, min_idle_ms=0, count=10)
    (claimed,) = await groups.claim(topic, 0, G, "other", [pending], min_idle_ms=0)
    assert (claimed.entry.offset, claimed.delivery_count) == (offsets[0], 2)
    assert await groups.read_new(topic, 0, G, "c", count=100, block_ms=0) == []
    assert await groups.ack(topic, 0, G, [offsets[0]]) == 1
    assert await _drain(groups, topic) == offsets[20:]


async def test_a_catching_up_groups_lag_counts_exactly_across_both_tiers(
        tiered: RedisStreamStore, topic: str) -> None:
    offsets = await _archived_group(tiered, topic, 50, 40)
    groups = tiered.groups
    first = await groups.read_new(topic, 0, G, "c", count=3, block_ms=0)
    (state,) = [overview.groups[G] for overview in
                (await tiered.partition_overviews(topic, [0])).values()]
    # the rest of the segment it reads (from its file), the next one and the ten still in Redis
    assert (state.last_delivered_offset, state.pending, state.lag) == (offsets[2], 3, 47)
    assert (await groups.state(topic, 0, G)).lag == 47
    await groups.ack(topic, 0, G, [entry.offset for entry in first])
    await _drain(groups, topic)
    (overview,) = (await tiered.partition_overviews(topic, [0])).values()
    assert (overview.groups[G].last_delivered_offset, overview.groups[G].lag) == (offsets[-1], 0)


async def test_the_mover_keeps_moving_while_a_group_catches_up(
        tiered: RedisStreamStore, topic: str) -> None:
    offsets = await _archived_group(tiered, topic, 60, 20)
    groups = tiered.groups
    first = await groups.read_new(topic, 0, G, "c", count=5, block_ms=0)
    await groups.ack(topic, 0, G, [entry.offset for entry in first])
    assert await tier_of(tiered).consumed(topic, 0) is None, "the group holds nothing hot"
    await _archive(tiered, topic, offsets[49])
    assert [entry.offset for entry in first] + await _drain(groups, topic) == offsets


async def test_a_seek_back_replays_the_archive_and_a_seek_to_latest_leaves_it(
        tiered: RedisStreamStore, topic: str) -> None:
    offsets = await publish(tiered, topic, 40)
    groups = tiered.groups
    await groups.ensure_group(topic, 0, G, "earliest")
    assert await _drain(groups, topic) == offsets
    await _archive(tiered, topic, offsets[29])
    await groups.seek(topic, 0, G, offsets[9])
    assert await _keys(tiered, topic) == (True, {G.encode()})
    assert await _drain(groups, topic) == offsets[10:]
    await groups.seek(topic, 0, G, offsets[4])
    await groups.seek(topic, 0, G, "latest")
    assert await _keys(tiered, topic) == (False, set())
    assert await _drain(groups, topic) == []


async def test_a_move_past_a_group_that_has_not_consumed_is_refused(
        tiered: RedisStreamStore, topic: str) -> None:
    offsets = await publish(tiered, topic, 30)
    await tiered.groups.ensure_group(topic, 0, G, "earliest")
    with pytest.raises(ArchiveConflict, match="BEHIND"):
        await tier_of(tiered).move_oldest(topic, 0, epoch=1, until=offsets[9])
    assert await _drain(tiered.groups, topic) == offsets


async def test_a_pressed_move_passes_a_group_behind_with_its_pending_entries(
        tiered: RedisStreamStore, topic: str) -> None:
    offsets = await publish(tiered, topic, 40)
    groups = tiered.groups
    await groups.ensure_group(topic, 0, G, "earliest")
    first = await groups.read_new(topic, 0, G, "c1", count=6, block_ms=0)
    await groups.ack(topic, 0, G, [offsets[0], offsets[2]])
    await groups.claim(topic, 0, G, "c2", await groups.expired(topic, 0, G, min_idle_ms=0,
                                                                count=1), min_idle_ms=0)
    before = await tiered.router.cluster.xpending_range(log_key(topic, 0), G, "-", "+", 10)
    while await tier_of(tiered).move_oldest(topic, 0, epoch=1, until=offsets[29],
                                          pass_behind=True):
        pass
    assert await _keys(tiered, topic) == (True, {G.encode()})
    after = await tiered.router.cluster.xpending_range(catch_up_key(topic, 0, G), G, "-", "+", 10)
    assert [(row["message_id"], row["consumer"], row["times_delivered"]) for row in after] == [
        (row["message_id"], row["consumer"], row["times_delivered"]) for row in before]
    assert [row["message_id"].decode() for row in after] == [
        offsets[1], offsets[3], offsets[4], offsets[5]]
    assert await groups.ack(topic, 0, G, [entry.offset for entry in first]) == 4
    assert await _drain(groups, topic) == offsets[6:]


async def test_a_purge_or_deletion_ends_a_catch_up(tiered: RedisStreamStore, topic: str) -> None:
    offsets = await publish(tiered, topic, 30)
    await _archive(tiered, topic, offsets[19])
    groups = tiered.groups
    for group in ("a", "b"):
        await groups.ensure_group(topic, 0, group, "earliest")
        await groups.read_new(topic, 0, group, "c", count=3, block_ms=0)
    await groups.delete_group(topic, 0, "b")
    assert await _keys(tiered, topic, "b") == (False, {b"a"})
    report = await tiered.purge_partition(topic, 0)
    assert await _keys(tiered, topic, "a") == (False, set())
    assert report.groups == ("a",)
    later = await publish(tiered, topic, 2)
    assert await _drain(groups, topic, "a") == later


async def test_another_gateway_resumes_a_catch_up_where_it_stood(
        tiered: RedisStreamStore, topic: str, store_settings: RedisStoreSettings,
        tmp_path: Path) -> None:
    offsets = await _archived_group(tiered, topic, 40, 30)
    groups = tiered.groups
    first = await groups.read_new(topic, 0, G, "c", count=5, block_ms=0)
    await groups.ack(topic, 0, G, [entry.offset for entry in first[:3]])
    async with archived_store(store_settings, tmp_path / "archive", 20) as other:
        await other.groups.ensure_group(topic, 0, G, "earliest")  # left where it is
        pending = await other.groups.expired(topic, 0, G, min_idle_ms=0, count=10)
        assert [p.offset for p in pending] == offsets[3:5]
        claimed = await other.groups.claim(topic, 0, G, "c2", pending, min_idle_ms=0)
        assert await other.groups.ack(topic, 0, G, [d.entry.offset for d in claimed]) == 2
        assert await _drain(other.groups, topic) == offsets[5:]


async def test_an_ack_counts_only_what_was_pending_on_the_log_or_a_catch_up_stream(
        tiered: RedisStreamStore, topic: str) -> None:
    offsets = await _archived_group(tiered, topic, 30, 20)
    groups = tiered.groups
    await groups.ensure_group(topic, 0, "hot", offsets[24])  # after the archive: on the log
    for group in (G, "hot"):
        read = [e.offset for e in await groups.read_new(topic, 0, group, "c", count=4,
                                                        block_ms=0)]
        assert await groups.ack(topic, 0, group, read[:2]) == 2
        assert await groups.ack(topic, 0, group, read) == 2  # half of it settled before
        assert await groups.ack(topic, 0, group, read) == 0  # all of it settled before
    assert await _keys(tiered, topic) == (True, {G.encode()})
    assert await _keys(tiered, topic, "hot") == (False, {G.encode()})
