"""PrefixMirror: snapshot, then a watch that resumes from the last applied revision + 1 or
reloads."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import cast

from partitioner.errors import CoordinationUnavailable, HistoryCompacted
from partitioner.etcd.connection import EtcdConnection
from partitioner.etcd.values import Snapshot, StoredValue, WatchEvent
from partitioner.prefix_mirror import PrefixMirror

PREFIX = b"/t/nodes/"


class _ScriptedWatch:
    def __init__(self, events: list[WatchEvent], then: Exception | None) -> None:
        self._events, self._then = events, then

    async def events(self) -> AsyncIterator[WatchEvent]:
        for event in self._events:
            yield event
        if self._then is not None:
            raise self._then
        await asyncio.Event().wait()

    async def cancel(self) -> None:
        return None


class ScriptedEtcd:
    """Snapshots and watches handed out in order; records the revision every watch started from."""

    def __init__(
        self, snapshots: list[Snapshot], watches: list[_ScriptedWatch | Exception]
    ) -> None:
        self.snapshots, self.watches = snapshots, watches
        self.watch_starts: list[int] = []

    async def get_prefix(self, prefix: bytes) -> Snapshot:
        return self.snapshots.pop(0)

    async def watch_prefix(self, prefix: bytes, start_revision: int) -> _ScriptedWatch:
        self.watch_starts.append(start_revision)
        step = self.watches.pop(0) if self.watches else _ScriptedWatch([], None)
        if isinstance(step, Exception):
            raise step
        return step


def _kv(name: bytes, revision: int) -> StoredValue:
    return StoredValue(PREFIX + name, b"{}", revision, revision, 7)


async def _run_until(fake: ScriptedEtcd, mirror: PrefixMirror, starts: int) -> None:
    task = asyncio.create_task(mirror.follow())
    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 2.0
        while len(fake.watch_starts) < starts:
            assert loop.time() < deadline, "watch was not re-established in time"
            await asyncio.sleep(0.01)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_watch_resumes_after_last_applied_revision() -> None:
    changes: list[WatchEvent | None] = []
    fake = ScriptedEtcd(
        [Snapshot([_kv(b"a", 3)], 5)],
        [_ScriptedWatch([WatchEvent("put", PREFIX + b"b", b"{}", 6, 6, 9),
                         WatchEvent("delete", PREFIX + b"a", b"", 7),
                         WatchEvent("delete", PREFIX + b"b", b"", 7)],
                        CoordinationUnavailable("etcd watch failed: Socket closed")),
         CoordinationUnavailable("etcd watch failed: connection refused")])
    mirror = PrefixMirror(cast(EtcdConnection, fake), PREFIX, changes.append)
    await mirror.load()
    assert set(mirror.values) == {PREFIX + b"a"}
    await _run_until(fake, mirror, 3)
    assert fake.watch_starts == [6, 8, 8]
    assert mirror.values == {}
    assert mirror.revision == 7
    assert changes[0] is None
    assert len(changes) == 4


async def test_compacted_history_reloads_snapshot_before_watching() -> None:
    fake = ScriptedEtcd(
        [Snapshot([_kv(b"a", 3)], 5), Snapshot([_kv(b"c", 40)], 50)],
        [HistoryCompacted(30)])
    mirror = PrefixMirror(cast(EtcdConnection, fake), PREFIX, lambda event: None)
    await mirror.load()
    await _run_until(fake, mirror, 2)
    assert fake.watch_starts == [6, 51]
    assert set(mirror.values) == {PREFIX + b"c"}
    assert mirror.values[PREFIX + b"c"].lease_id == 7


async def test_events_the_snapshot_already_holds_are_ignored() -> None:
    fake = ScriptedEtcd([Snapshot([_kv(b"a", 3)], 5)], [])
    mirror = PrefixMirror(cast(EtcdConnection, fake), PREFIX, lambda event: None)
    await mirror.load()
    mirror.apply(WatchEvent("delete", PREFIX + b"a", b"", 4))
    assert set(mirror.values) == {PREFIX + b"a"}
    assert not mirror.healthy
