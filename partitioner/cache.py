"""A process-local copy of topic metadata, fed by an etcd watch so publish never reads etcd per request."""

from __future__ import annotations

from collections.abc import Iterable

from partitioner.topics import TopicMetadata


class TopicCache:
    """Topic metadata by name. Newer versions win, so a late watch event never rolls back a local write."""

    def __init__(self) -> None:
        self._topics: dict[str, TopicMetadata] = {}
        self._deleted_at: dict[str, int] = {}
        self.revision = 0  # highest etcd revision applied; a watch resumes from revision + 1

    def get(self, name: str) -> TopicMetadata | None:
        """The cached metadata of a topic, or None when unknown."""
        return self._topics.get(name)

    def all(self) -> list[TopicMetadata]:
        """Every cached topic, sorted by name."""
        return [self._topics[name] for name in sorted(self._topics)]

    def replace_all(self, topics: Iterable[TopicMetadata], revision: int) -> None:
        """Load a full snapshot read at ``revision`` (used at start and after a watch is lost)."""
        self._topics = {topic.name: topic for topic in topics}
        self._deleted_at.clear()
        self.revision = max(self.revision, revision)

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

    def forget(self, name: str, revision: int) -> None:
        """Apply a deletion seen at ``revision``."""
        current = self._topics.get(name)
        if current is not None and current.version > revision:
            return
        self._topics.pop(name, None)
        self._deleted_at[name] = revision
        self.revision = max(self.revision, revision)
