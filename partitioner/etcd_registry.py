"""The ``TopicRegistry`` in etcd: ``<prefix>topics/<name>`` -> ``TopicMetadata.to_json()``; a
topic's ``version`` is the key's ``mod_revision``, which makes every update a compare-and-swap."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace

from partitioner.errors import ConcurrentModification, TopicExists, TopicNotFound
from partitioner.etcd.connection import EtcdConnection
from partitioner.etcd.values import DEFAULT_PREFIX
from partitioner.topics import TopicMetadata, TopicSettings, validate_settings

__all__ = ["EtcdTopicRegistry", "topics_prefix"]


def topics_prefix(prefix: str) -> str:
    """Where the topics live under the key prefix ``prefix``."""
    return prefix.rstrip("/") + "/topics/"


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class EtcdTopicRegistry:
    """``TopicRegistry`` in etcd: ``<prefix>topics/<name>``, version = the key's mod_revision."""

    def __init__(self, conn: EtcdConnection, prefix: str = DEFAULT_PREFIX) -> None:
        self._conn = conn
        self._topics_prefix = topics_prefix(prefix)

    def _key(self, name: str) -> bytes:
        return f"{self._topics_prefix}{name}".encode()

    async def create(self, settings: TopicSettings, owner: str) -> TopicMetadata:
        """Record a new topic; ``TopicExists`` if the name is taken (atomic: create_revision ==
        0)."""
        validate_settings(settings)
        metadata = TopicMetadata(settings.name, settings.partitions, settings.retention_ms,
                                 settings.max_length, _now_ms(), owner,
                                 key_index=settings.key_index, compact=settings.compact,
                                 key_spaces=True)
        revision = await self._conn.put_if_absent(self._key(settings.name), metadata.to_json())
        if revision is None:
            raise TopicExists(settings.name)
        return _with_version(metadata, revision)

    async def get(self, name: str) -> TopicMetadata:
        """Read one topic; ``TopicNotFound`` if absent."""
        stored = await self._conn.get(self._key(name))
        if stored is None:
            raise TopicNotFound(name)
        return TopicMetadata.from_json(stored.value, stored.mod_revision)

    async def list(self) -> Sequence[TopicMetadata]:
        """Every topic, sorted by name."""
        snapshot = await self._conn.get_prefix(self._topics_prefix.encode())
        return [TopicMetadata.from_json(kv.value, kv.mod_revision) for kv in snapshot.values]

    async def update(self, metadata: TopicMetadata) -> TopicMetadata:
        """Store ``metadata`` if the topic is still at ``metadata.version``.

        ``ConcurrentModification`` when someone changed it since, ``TopicNotFound`` when it is gone.
        """
        validate_settings(TopicSettings(metadata.name, metadata.partitions, metadata.retention_ms,
                                        metadata.max_length))
        key = self._key(metadata.name)
        revision, current = await self._conn.put_if_unchanged(key, metadata.to_json(),
                                                              metadata.version)
        if revision is not None:
            return _with_version(metadata, revision)
        if current is None:
            raise TopicNotFound(metadata.name)
        raise ConcurrentModification(metadata.name)

    async def delete(self, name: str) -> TopicMetadata:
        """Remove a topic and return what it was; ``TopicNotFound`` if absent."""
        deleted = await self._conn.delete(self._key(name))
        if deleted is None:
            raise TopicNotFound(name)
        return TopicMetadata.from_json(deleted.value, deleted.mod_revision)


def _with_version(metadata: TopicMetadata, version: int) -> TopicMetadata:
    return replace(metadata, version=version)
