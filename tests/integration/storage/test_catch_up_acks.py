"""Settling a group's entries while a pressed move passes it behind to a catch-up stream, or it
returns to the log: acks and idle times count on whichever stream holds the group when they land,
and nothing acked is delivered again; on a real Redis Cluster and a local archive."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from storage.archive.manifest import catching_up_key
from storage.groups import RedisGroupStore
from storage.redis_store import RedisStreamStore
from storage.settings import RedisStoreSettings
from tests.integration.storage.local_archive import archived_store, publish, tier_of

pytestmark = pytest.mark.integration

G = "g"
SEGMENT = 10


@pytest.fixture
async def tiered(store_settings: RedisStoreSettings,
                 tmp_path: Path) -> AsyncIterator[RedisStreamStore]:
    async with archived_store(store_settings, tmp_path / "archive", SEGMENT) as store:
        yield store


@pytest.fixture
async def other(store_settings: RedisStoreSettings,
                tmp_path: Path) -> AsyncIterator[RedisStreamStore]:
    """A second gateway's store on the same cluster and archive."""
    async with archived_store(store_settings, tmp_path / "archive", SEGMENT) as store:
        yield store


async def _pressed_move(store: RedisStreamStore, topic: str, until: str) -> None:
    """Move everything up to ``until`` as a node past its watermark does: a group that has not
    consumed it is passed behind."""
    while await tier_of(store).move_oldest(topic, 0, epoch=1, until=until, pass_behind=True):
        pass


def _after_first_command(store: RedisStreamStore, monkeypatch: pytest.MonkeyPatch,
                         between: Callable[[], Awaitable[None]]) -> None:
    """Run ``between`` once, right after the next command the store sends to a node has its
    reply (and before anything else it sends)."""
    lanes: Any = store._lanes
    real = lanes.execute
    armed = [True]

    async def execute(address: Any, commands: Any, *, exclusive: bool) -> list[Any]:
        replies: list[Any] = await real(address, commands, exclusive=exclusive)
        if armed:
            armed.clear()
            await between()
        return replies

    monkeypatch.setattr(lanes, "execute", execute)


async def _read(groups: RedisGroupStore, topic: str, count: int) -> list[str]:
    entries = await groups.read_new(topic, 0, G, "c", count=count, block_ms=0)
    return [entry.offset for entry in entries]


async def _pending(groups: RedisGroupStore, topic: str) -> list[str]:
    return [p.offset for p in await groups.expired(topic, 0, G, min_idle_ms=0, count=1000)]


async def _drain(groups: RedisGroupStore, topic: str) -> list[str]:
    seen: list[str] = []
    while read := await _read(groups, topic, 7):
        seen += read
        assert await groups.ack(topic, 0, G, read) == len(read)
    return seen


async def _catching_up(store: RedisStreamStore, topic: str) -> bool:
    return bool(await store.router.cluster.smembers(catching_up_key(topic, 0)))


async def _back_on_the_log(store: RedisStreamStore, topic: str) -> list[str]:
    """A group that read an archived segment through its catch-up stream, returned to the log
    through a read and holds the log's next segment pending; the offsets."""
    offsets = await publish(store, topic, 4 * SEGMENT)
    await _pressed_move(store, topic, offsets[SEGMENT - 1])
    groups = store.groups
    await groups.ensure_group(topic, 0, G, "earliest")
    archived = await _read(groups, topic, SEGMENT)
    assert await groups.ack(topic, 0, G, archived) == SEGMENT
    assert await _read(groups, topic, SEGMENT) == offsets[SEGMENT:2 * SEGMENT]
    assert not await _catching_up(store, topic), "back on the log"
    return offsets


async def test_an_ack_passed_behind_as_it_lands_counts_and_nothing_comes_back(
        tiered: RedisStreamStore, topic: str, monkeypatch: pytest.MonkeyPatch) -> None:
    offsets = await _back_on_the_log(tiered, topic)
    read = offsets[SEGMENT:2 * SEGMENT]
    _after_first_command(tiered, monkeypatch, partial(_pressed_move, tiered, topic, read[-1]))
    assert await tiered.groups.ack(topic, 0, G, read) == SEGMENT
    assert await _pending(tiered.groups, topic) == []
    assert await _drain(tiered.groups, topic) == offsets[2 * SEGMENT:]


async def test_a_group_back_on_the_log_through_a_read_is_read_there_first(
        tiered: RedisStreamStore, topic: str, monkeypatch: pytest.MonkeyPatch) -> None:
    offsets = await _back_on_the_log(tiered, topic)
    reads = tiered.groups._reads
    real = reads.read_on_node
    commands: list[bytes] = []

    async def recording(slot: int, command: bytes, block_ms: int) -> Any:
        commands.append(command)
        return await real(slot, command, block_ms)

    monkeypatch.setattr(reads, "read_on_node", recording)
    assert await _read(tiered.groups, topic, SEGMENT) == offsets[2 * SEGMENT:3 * SEGMENT]
    (command,) = commands  # no look at its old catch-up stream
    assert b":log" in command


async def test_an_ack_on_another_gateway_counts_wherever_the_group_moved_since_it_looked(
        tiered: RedisStreamStore, other: RedisStreamStore, topic: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    offsets = await publish(tiered, topic, 4 * SEGMENT)
    await _pressed_move(tiered, topic, offsets[SEGMENT - 1])
    await tiered.groups.ensure_group(topic, 0, G, "earliest")
    # the other gateway last found the group catching up
    assert await other.groups.ack(topic, 0, G, await _read(other.groups, topic, 3)) == 3
    archived = await _read(tiered.groups, topic, SEGMENT)
    assert await tiered.groups.ack(topic, 0, G, archived) == SEGMENT - 3
    read = await _read(tiered.groups, topic, SEGMENT)
    assert read == offsets[SEGMENT:2 * SEGMENT], "back on the log"
    _after_first_command(other, monkeypatch, partial(_pressed_move, tiered, topic, read[-1]))
    assert await other.groups.ack(topic, 0, G, read) == SEGMENT
    assert await _pending(tiered.groups, topic) == []
    assert await _drain(tiered.groups, topic) == offsets[2 * SEGMENT:]


async def test_a_nack_passed_behind_as_it_lands_makes_its_entries_due(
        tiered: RedisStreamStore, other: RedisStreamStore, topic: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    offsets = await _back_on_the_log(tiered, topic)
    read = offsets[SEGMENT:2 * SEGMENT]
    await _pressed_move(tiered, topic, read[-1])
    # the other gateway last found the group catching up
    await other.groups.expired(topic, 0, G, min_idle_ms=0, count=1)
    await tiered.groups.ack(topic, 0, G, read)
    read = await _read(tiered.groups, topic, SEGMENT)
    assert read == offsets[2 * SEGMENT:3 * SEGMENT], "back on the log again"
    _after_first_command(other, monkeypatch, partial(_pressed_move, tiered, topic, read[-1]))
    await other.groups.set_idle(topic, 0, G, "c", read, 3_600_000)
    due = await other.groups.expired(topic, 0, G, min_idle_ms=3_000_000, count=100)
    assert [entry.offset for entry in due] == read


async def test_a_group_passed_behind_at_every_ack_sees_each_entry_once(
        tiered: RedisStreamStore, topic: str, monkeypatch: pytest.MonkeyPatch) -> None:
    groups = tiered.groups
    await groups.ensure_group(topic, 0, G, "earliest")
    published: list[str] = []
    seen: list[str] = []
    for _ in range(5):
        published += await publish(tiered, topic, 2 * SEGMENT)
        while True:  # through the catch-up stream back onto the log
            read = await _read(groups, topic, SEGMENT)
            seen += read
            if not await _catching_up(tiered, topic):
                break
            assert await groups.ack(topic, 0, G, read) == len(read)
        # the move takes a few entries the group has not read yet, too
        until = published[len(seen) + 2]
        _after_first_command(tiered, monkeypatch, partial(_pressed_move, tiered, topic, until))
        assert await groups.ack(topic, 0, G, read) == len(read)
        monkeypatch.undo()
    seen += await _drain(groups, topic)
    assert seen == published
    assert await _pending(groups, topic) == []
