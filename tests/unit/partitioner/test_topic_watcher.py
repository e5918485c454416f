"""TopicWatcher recovery logic, driven by a scripted fake of EtcdConnection (no etcd needed)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import cast

from partitioner.cache import TopicCache
from partitioner.errors import CoordinationUnavailable, HistoryCompacted
from partitioner.etcd.connection import EtcdConnection
from partitioner.etcd.values import Snapshot, StoredValue, WatchEvent
from partitioner.topic_watcher import TopicWatcher
from partitioner.topics import TopicMetadata

PREFIX = "/t/"
TOPICS = b"/t/topics/"


def _stored(name: str, revision: int) -> StoredValue:
    metadata = TopicMetadata(name, 1, 1000, None, 0, "x")
    return StoredValue(TOPICS + name.encode(), metadata.to_json(), revision, revision)


class _FakeWatch:
    def __init__(self, events: list[WatchEvent], error: Exception | None) -> None:
        self._events = events
        self._error = error

    async def events(self) -> AsyncIterator[WatchEvent]:
        for event in self._events:
            yield event
        if self._error is not None:
            raise self._error
        await asyncio.Event().wait()  # a healthy watch idles

    async def cancel(self) -> None:
        return None


class _FakeConnection:
    """Snapshots and watch outcomes are consumed in order; records every watch start revision."""

    def __init__(self, snapshots: list[Snapshot], watches: list[_FakeWatch | Exception]) -> None:
        self.snapshots = snapshots
        self.watches = watches
        self.watch_starts: list[int] = []

    async def get_prefix(self, prefix: bytes) -> Snapshot:
        assert prefix == TOPICS
        return self.snapshots.pop(0)

    async def watch_prefix(self, prefix: bytes, start_revision: int) -> _FakeWatch:
        self.watch_starts.append(start_revision)
        outcome = self.watches.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome


def _watcher(fake: _FakeConnection, cache: TopicCache) -> TopicWatcher:
    return TopicWatcher(cast(EtcdConnection, fake), cache, PREFIX, initial_backoff_s=0.01,
                        max_backoff_s=0.02)


async def test_watcher_reloads_snapshot_when_history_was_compacted() -> None:
    fake = _FakeConnection(
        snapshots=[Snapshot([_stored("old", 3)], 5), Snapshot([_stored("new", 40)], 50)],
        watches=[HistoryCompacted(30), _FakeWatch([], None)],
    )
    cache = TopicCache()
    async with _watcher(fake, cache) as watcher:
        assert await watcher.wait_synced(timeout_s=2)
        assert [t.name for t in cache.all()] == ["new"]
        assert fake.watch_starts == [6, 51]


async def test_watcher_resumes_from_last_revision_after_watch_dies() -> None:
    put = WatchEvent("put", TOPICS + b"orders", _stored("orders", 8).value, 8)
    fake = _FakeConnection(
        snapshots=[Snapshot([], 5)],
        watches=[
            _FakeWatch([put], CoordinationUnavailable("gone")), CoordinationUnavailable("down"),
            _FakeWatch([WatchEvent("delete", TOPICS + b"orders", b"", 9)], None)
        ],
    )
    cache = TopicCache()
    async with _watcher(fake, cache) as watcher:
        assert await watcher.wait_for_revision(9, timeout_s=2)
        assert watcher.healthy
        assert cache.get("orders") is None
        assert fake.watch_starts == [6, 9, 9]


async def test_watcher_skips_unreadable_values_without_dying() -> None:
    fake = _FakeConnection(
        snapshots=[Snapshot([], 5)],
        watches=[
            _FakeWatch(
                [
                    WatchEvent("put", TOPICS + b"bad", b"not json", 6),
                    WatchEvent("put", TOPICS + b"good", _stored("good", 7).value, 7),
                ],
                None,
            )
        ],
    )
    cache = TopicCache()
    async with _watcher(fake, cache) as watcher:
        assert await watcher.wait_for_revision(7, timeout_s=2)
        assert [t.name for t in cache.all()] == ["good"]


async def test_closing_watcher_is_idempotent_and_marks_it_unhealthy() -> None:
    fake = _FakeConnection(snapshots=[Snapshot([], 1)], watches=[_FakeWatch([], None)])
    watcher = _watcher(fake, TopicCache())
    async with watcher:
        assert await watcher.wait_synced(timeout_s=2)
    await watcher.aclose()
    assert not watcher.healthy
