"""The port for topic metadata, and an in-memory implementation for unit tests."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Protocol

from partitioner.errors import ConcurrentModification, TopicExists, TopicNotFound
from partitioner.topics import TopicMetadata, TopicSettings, validate_settings


class TopicRegistry(Protocol):
    """Where topic metadata lives (etcd in production)."""

    async def create(self, settings: TopicSettings, owner: str) -> TopicMetadata:
        """Record a new topic; ``TopicExists`` if the name is taken."""
        ...

    async def get(self, name: str) -> TopicMetadata:
        """Read one topic; ``TopicNotFound`` if absent."""
        ...

    async def list(self) -> Sequence[TopicMetadata]:
        """Every topic, sorted by name."""
        ...

    async def update(self, metadata: TopicMetadata) -> TopicMetadata:
        """Store a changed topic only if its version is still current (``ConcurrentModification`` if
        not)."""
        ...

    async def delete(self, name: str) -> TopicMetadata:
        """Remove a topic and return what it was; ``TopicNotFound`` if absent."""
        ...


class InMemoryTopicRegistry:
    """A ``TopicRegistry`` in a dict, for unit tests and single-process tools."""

    def __init__(self) -> None:
        self._topics: dict[str, TopicMetadata] = {}
        self._revision = 0

    async def create(self, settings: TopicSettings, owner: str) -> TopicMetadata:
        validate_settings(settings)
        if settings.name in self._topics:
            raise TopicExists(settings.name)
        self._revision += 1
        metadata = TopicMetadata(settings.name, settings.partitions, settings.retention_ms,
                                 settings.max_length, int(time.time() * 1000), owner,
                                 self._revision, key_index=settings.key_index,
                                 compact=settings.compact, key_spaces=True)
        self._topics[settings.name] = metadata
        return metadata

    async def get(self, name: str) -> TopicMetadata:
        try:
            return self._topics[name]
        except KeyError:
            raise TopicNotFound(name) from None

    async def list(self) -> Sequence[TopicMetadata]:
        return [self._topics[name] for name in sorted(self._topics)]

    async def update(self, metadata: TopicMetadata) -> TopicMetadata:
        validate_settings(TopicSettings(metadata.name, metadata.partitions, metadata.retention_ms,
                                        metadata.max_length))
        current = await self.get(metadata.name)
        if current.version != metadata.version:
            raise ConcurrentModification(metadata.name)
        self._revision += 1
        stored = replace(metadata, version=self._revision)
        self._topics[metadata.name] = stored
        return stored

    async def delete(self, name: str) -> TopicMetadata:
        metadata = await self.get(name)
        del self._topics[name]
        return metadata
