"""The watch that keeps a process's ``TopicCache`` in step with the topics stored in etcd."""

from __future__ import annotations

import asyncio
import logging
from types import TracebackType

from partitioner.backoff import MAX_BACKOFF_S, Backoff
from partitioner.cache import TopicCache
from partitioner.errors import CoordinationUnavailable, HistoryCompacted
from partitioner.etcd.connection import EtcdConnection
from partitioner.etcd.values import DEFAULT_PREFIX, WatchEvent
from partitioner.etcd_registry import topics_prefix
from partitioner.tasks import cancel_until_done
from partitioner.topics import TopicMetadata

__all__ = ["TopicWatcher"]

log = logging.getLogger(__name__)


class TopicWatcher:
    """Keeps a ``TopicCache`` in step with etcd: a snapshot on enter, then a watch in a background
    task.

    When the watch dies (etcd restarted or unreachable) ``healthy`` turns False and the watch is
    retried with capped exponential backoff from ``cache.revision + 1``; if etcd compacted that
    history, a full snapshot is reloaded first. Entering raises ``CoordinationUnavailable`` if the
    first snapshot cannot be read.
    """

    def __init__(self, conn: EtcdConnection, cache: TopicCache, prefix: str = DEFAULT_PREFIX,
                 initial_backoff_s: float = 0.1, max_backoff_s: float = MAX_BACKOFF_S) -> None:
        self._conn = conn
        self._cache = cache
        self._topics_prefix = topics_prefix(prefix).encode()
        self._backoff = Backoff(initial_backoff_s, max_backoff_s)
        self._synced = asyncio.Event()
        self._progress = asyncio.Condition()
        self._task: asyncio.Task[None] | None = None

    @property
    def healthy(self) -> bool:
        """True while a watch is established and events flow into the cache."""
        return self._synced.is_set()

    async def __aenter__(self) -> TopicWatcher:
        await self._load_snapshot()
        self._task = asyncio.create_task(self._run(), name="streamgate-topic-watcher")
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Cancel and await the background watch. Safe to call more than once."""
        task, self._task = self._task, None
        if task is not None:
            # a cancel inside the watch's gRPC call surfaces as a retried error
            await cancel_until_done([task])
        self._synced.clear()

    async def wait_synced(self, timeout_s: float | None = None) -> bool:
        """Wait until the watch is established; False if ``timeout_s`` passed first."""
        try:
            await asyncio.wait_for(self._synced.wait(), timeout_s)
        except TimeoutError:
            return False
        return True

    async def wait_for_revision(self, revision: int, timeout_s: float) -> bool:
        """Wait until the cache has applied ``revision`` (e.g. our own write); False on timeout."""
        async with self._progress:
            try:
                await asyncio.wait_for(
                    self._progress.wait_for(lambda: self._cache.revision >= revision), timeout_s)
            except TimeoutError:
                return False
        return True

    async def _load_snapshot(self) -> None:
        snapshot = await self._conn.get_prefix(self._topics_prefix)
        topics = [TopicMetadata.from_json(kv.value, kv.mod_revision) for kv in snapshot.values]
        self._cache.replace_all(topics, snapshot.revision)
        await self._notify_progress()

    async def _run(self) -> None:
        while True:
            try:
                await self._follow()
            except HistoryCompacted as exc:
                log.warning("topic watch fell behind compaction (%s); reloading snapshot", exc)
                await self._reload_after_compaction()
                continue
            except CoordinationUnavailable as exc:
                log.warning("topic watch lost: %s; retrying", exc)
            self._synced.clear()
            await self._backoff.sleep()

    async def _follow(self) -> None:
        """Watch from the cache's revision until the watch ends or fails."""
        watch = await self._conn.watch_prefix(self._topics_prefix, self._cache.revision + 1)
        self._synced.set()
        self._backoff.reset()
        try:
            async for event in watch.events():
                self._apply(event)
                await self._notify_progress()
        finally:
            self._synced.clear()
            await watch.cancel()

    async def _reload_after_compaction(self) -> None:
        self._synced.clear()
        try:
            await self._load_snapshot()
        except CoordinationUnavailable as exc:
            log.warning("topic snapshot reload failed: %s", exc)
            await self._backoff.sleep()

    def _apply(self, event: WatchEvent) -> None:
        if event.kind == "delete":
            name = event.key[len(self._topics_prefix):].decode()
            self._cache.forget(name, event.mod_revision)
            return
        try:
            self._cache.remember(TopicMetadata.from_json(event.value, event.mod_revision))
        except (ValueError, KeyError, TypeError):
            log.exception("ignoring unreadable topic metadata at %r", event.key)

    async def _notify_progress(self) -> None:
        async with self._progress:
            self._progress.notify_all()
