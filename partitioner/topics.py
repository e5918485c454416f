"""Topic metadata: the value stored in etcd for each topic, and the rules it must follow."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

import orjson

from partitioner.errors import InvalidTopic

TOPIC_NAME_PATTERN = re.compile(r"[A-Za-z0-9._-]{1,200}")
MAX_PARTITIONS = 4096
DEFAULT_RETENTION_MS = 14 * 24 * 3600 * 1000


@dataclass(frozen=True, slots=True)
class TopicSettings:
    """What a client asks for when creating a topic."""

    name: str
    partitions: int
    retention_ms: int = DEFAULT_RETENTION_MS
    max_length: int | None = None
    key_index: bool = False  # keep each key's history (an index per key), fixed at creation
    compact: bool = False  # keep the newest message of every key (implies key_index), fixed too


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    """A topic as recorded in etcd."""

    name: str
    partitions: int
    retention_ms: int
    max_length: int | None
    created_at_ms: int
    owner: str
    version: int = 0  # etcd mod_revision of the key; 0 before it is stored
    key_index: bool = False
    compact: bool = False

    def to_json(self) -> bytes:
        """Serialise for etcd (the version is etcd's, not stored in the value)."""
        return orjson.dumps(
            {
                "name": self.name,
                "partitions": self.partitions,
                "retention_ms": self.retention_ms,
                "max_length": self.max_length,
                "created_at_ms": self.created_at_ms,
                "owner": self.owner,
                "key_index": self.key_index,
                "compact": self.compact,
            }
        )

    @classmethod
    def from_json(cls, raw: bytes, version: int) -> TopicMetadata:
        """Parse a value written by ``to_json``."""
        data: dict[str, Any] = orjson.loads(raw)
        return cls(
            name=str(data["name"]),
            partitions=int(data["partitions"]),
            retention_ms=int(data["retention_ms"]),
            max_length=None if data.get("max_length") is None else int(data["max_length"]),
            created_at_ms=int(data["created_at_ms"]),
            owner=str(data["owner"]),
            version=version,
            key_index=bool(data.get("key_index", False)),
            compact=bool(data.get("compact", False)),
        )

    def with_changes(self, partitions: int | None, retention_ms: int | None,
                     max_length: int | None, clear_max_length: bool = False) -> TopicMetadata:
        """Apply a PATCH: partitions may only grow; retention may change either way."""
        if partitions is not None and partitions < self.partitions:
            raise InvalidTopic(
                f"partitions may only grow: topic has {self.partitions}, asked for {partitions}",
                field="partitions",
            )
        updated = replace(
            self,
            partitions=self.partitions if partitions is None else partitions,
            retention_ms=self.retention_ms if retention_ms is None else retention_ms,
            max_length=(None if clear_max_length
                        else (self.max_length if max_length is None else max_length)),
        )
        validate_settings(TopicSettings(updated.name, updated.partitions, updated.retention_ms,
                                        updated.max_length, updated.key_index, updated.compact))
        return updated


def validate_topic_name(name: str) -> None:
    """Raise ``InvalidTopic`` unless ``name`` matches ``[A-Za-z0-9._-]{1,200}``."""
    if not TOPIC_NAME_PATTERN.fullmatch(name):
        raise InvalidTopic(f"topic name {name!r} must match [A-Za-z0-9._-]{{1,200}}", field="name")


def validate_settings(settings: TopicSettings) -> None:
    """Raise ``InvalidTopic`` naming the first field that breaks the rules."""
    validate_topic_name(settings.name)
    if not 1 <= settings.partitions <= MAX_PARTITIONS:
        raise InvalidTopic(f"partitions must be between 1 and {MAX_PARTITIONS}", field="partitions")
    if settings.retention_ms < 1:
        raise InvalidTopic("retention_ms must be positive", field="retention_ms")
    if settings.max_length is not None and settings.max_length < 1:
        raise InvalidTopic("max_length must be positive", field="max_length")
    if settings.compact and settings.max_length is not None:
        raise InvalidTopic("a compacted topic keeps every key's newest message: it takes no "
                           "max_length", field="max_length")
    if settings.compact and not settings.key_index:
        raise InvalidTopic("a compacted topic keeps key indexes: key_index must be true",
                           field="key_index")
