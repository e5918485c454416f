"""A process-local copy of topic metadata, fed by an etcd watch so publish never reads etcd per
request."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from partitioner.topics import TopicMetadata


class TopicCache:
    """Topic metadata by name. Newer versions win, so a late watch event never rolls back a local
    write."""

    def __init__(self) -> None:
        self._topics: dict[str, TopicMetadata] = {}
        self._deleted_at: dict[str, int] = {}
        self.revision = 0  # highest etcd revision applied; a watch resumes from revision + 1
        self._growth_watchers: dict[str, dict[int, Callable[[int], None]]] = {}
        self._next_watcher = 0
        self._change_watchers: list[Callable[[TopicMetadata], None]] = []

    def get(self, name: str) -> TopicMetadata | None:
        """The cached metadata of a topic, or None when unknown."""
        return self._topics.get(name)

    def all(self) -> list[TopicMetadata]:
        """Every cached topic, sorted by name."""
        return [self._topics[name] for name in sorted(self._topics)]

    def watch_growth(self, name: str, callback: Callable[[int], None]) -> Callable[[], None]:
        """Call ``callback(partitions)`` whenever topic ``name`` gains partitions; returns the
        unwatch function.

        Callbacks run synchronously inside the cache update: they must only note the change (e.g.
        set an event).
        """
        watcher_id, self._next_watcher = self._next_watcher, self._next_watcher + 1
        self._growth_watchers.setdefault(name, {})[watcher_id] = callback

        def unwatch() -> None:
            watchers = self._growth_watchers.get(name)
            if watchers is not None:
                watchers.pop(watcher_id, None)
                if not watchers:
                    del self._growth_watchers[name]

        return unwatch

    def watch_changes(self, callback: Callable[[TopicMetadata], None]) -> Callable[[], None]:
        """Call ``callback(metadata)`` for every topic created or changed; returns the unwatch
        function. Like ``watch_growth``'s, callbacks only note the change."""
        self._change_watchers.append(callback)
        return lambda: self._change_watchers.remove(callback)

    def _announce(self, before: TopicMetadata | None, after: TopicMetadata) -> None:
        if before is not after:
            for watcher in list(self._change_watchers):
                watcher(after)
        if before is not None and after.partitions > before.partitions:
            for callback in list(self._growth_watchers.get(after.name, {}).values()):
                callback(after.partitions)

    def replace_all(self, topics: Iterable[TopicMetadata], revision: int) -> None:
        """Load a full snapshot read at ``revision`` (used at start and after a watch is lost)."""
        before, self._topics = self._topics, {topic.name: topic for topic in topics}
        self._deleted_at.clear()
        self.revision = max(self.revision, revision)
        for topic in self._topics.values():
            self._announce(before.get(topic.name), topic)

    def remember(self, metadata: TopicMetadata) -> None:
        """Apply a created or changed topic unless the cache already holds a newer version of it."""
        current = self._topics.get(metadata.name)
        if current is not None and current.version >= metadata.version:
            return
        if self._deleted_at.get(metadata.name, -1) >= metadata.version:
            return
        self._topics[metadata.name] = metadata
        self._deleted_at.pop(metadata.name, None)
        self.revision = max(self.revision, metadata.version)
        self._announce(current, metadata)

    def forget(self, name: str, revision: int) -> None:
        """Apply a deletion seen at ``revision``."""
        current = self._topics.get(name)
        if current is not None and current.version > revision:
            return
        self._topics.pop(name, None)
        self._deleted_at[name] = revision
        self.revision = max(self.revision, revision)
