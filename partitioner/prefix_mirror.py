"""A local copy of every key under one etcd prefix, kept in step by a watch that survives etcd
restarts.

``load`` reads a snapshot; ``follow`` (run it as a background task) watches from the mirror's
revision + 1 and applies every event. When the watch dies (etcd restarted, paused, or unreachable)
it is re-established from the last applied revision + 1 with capped backoff, so no change is missed;
when etcd compacted that history, a fresh snapshot replaces the mirror first. The owner learns about
changes through ``on_change`` (called with the event, or with None after a snapshot replaced
everything).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from partitioner.backoff import Backoff
from partitioner.errors import CoordinationUnavailable, HistoryCompacted
from partitioner.etcd.connection import EtcdConnection
from partitioner.etcd.values import StoredValue, WatchEvent
from partitioner.tasks import cancel_until_done

__all__ = ["PrefixMirror"]

log = logging.getLogger(__name__)


class PrefixMirror:
    """Every key under ``prefix`` as of ``revision``; ``healthy`` while a watch is established."""

    def __init__(self, conn: EtcdConnection, prefix: bytes,
                 on_change: Callable[[WatchEvent | None], None]) -> None:
        self._conn = conn
        self.prefix = prefix
        self._on_change = on_change
        self.values: dict[bytes, StoredValue] = {}
        self.revision = 0
        self._snapshot_revision = 0
        self.healthy = False
        self._backoff = Backoff()
        self._task: asyncio.Task[None] | None = None

    async def start(self, task_name: str) -> None:
        """Load, then follow in a background task named ``task_name`` until ``stop``."""
        await self.load()
        self._task = asyncio.create_task(self.follow(), name=task_name)

    async def stop(self) -> None:
        """Stop following (idempotent)."""
        task, self._task = self._task, None
        if task is not None:
            await cancel_until_done([task])

    async def load(self) -> None:
        """Replace the mirror with a snapshot; ``CoordinationUnavailable`` if etcd does not
        answer."""
        snapshot = await self._conn.get_prefix(self.prefix)
        self.values = {stored.key: stored for stored in snapshot.values}
        self.revision = self._snapshot_revision = snapshot.revision
        self._on_change(None)

    async def follow(self) -> None:
        """Apply watch events forever, re-watching (or reloading) whenever the watch dies."""
        while True:
            try:
                await self._follow_once()
            except HistoryCompacted as exc:
                log.warning("watch on %r fell behind compaction (%s); reloading", self.prefix, exc)
                await self._reload()
                continue
            except CoordinationUnavailable as exc:
                log.warning("watch on %r lost: %s; retrying", self.prefix, exc)
            await self._backoff.sleep()

    async def _follow_once(self) -> None:
        watch = await self._conn.watch_prefix(self.prefix, self.revision + 1)
        self.healthy = True
        self._backoff.reset()
        try:
            async for event in watch.events():
                self.apply(event)
        finally:
            self.healthy = False
            await watch.cancel()

    async def _reload(self) -> None:
        try:
            await self.load()
        except CoordinationUnavailable as exc:
            log.warning("snapshot of %r failed: %s", self.prefix, exc)
            await self._backoff.sleep()

    def apply(self, event: WatchEvent) -> None:
        """Apply one event (events the snapshot already holds are ignored) and tell the owner.

        Several events may share a revision (a transaction, or a lease revoking all its keys at
        once).
        """
        if event.mod_revision <= self._snapshot_revision:
            return
        self.revision = max(self.revision, event.mod_revision)
        if event.kind == "delete":
            self.values.pop(event.key, None)
        else:
            self.values[event.key] = StoredValue(event.key, event.value, event.create_revision,
                                                 event.mod_revision, event.lease_id)
        self._on_change(event)
