"""Topic metadata: the value stored in etcd for each topic, and the rules it must follow."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
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
    # while partitions grow: the count asked for, when, and by which gateway (publishes pause until
    # it is reached; the others abandon it once that gateway's node key is gone)
    growing_to: int | None = None
    growth_since_ms: int | None = None
    growth_by: str | None = None
    epochs: tuple[Epoch, ...] = ()  # every growth so far, oldest first
    # each writer's key state kept in its tenant's key space (docs/security.md): every topic
    # created since spaces exist; False for one stored before, whose keys all share one space
    key_spaces: bool = False

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
                "growth": (None if self.growing_to is None
                           else {"to": self.growing_to, "since_ms": self.growth_since_ms,
                                 "by": self.growth_by}),
                "epochs": [epoch.to_dict() for epoch in self.epochs],
                "key_spaces": self.key_spaces,
            }
        )

    @classmethod
    def from_json(cls, raw: bytes, version: int) -> TopicMetadata:
        """Parse a value written by ``to_json``."""
        data: dict[str, Any] = orjson.loads(raw)
        growth = data.get("growth")
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
            growing_to=None if growth is None else int(growth["to"]),
            growth_since_ms=None if growth is None else int(growth["since_ms"]),
            growth_by=None if growth is None or growth.get("by") is None else str(growth["by"]),
            epochs=tuple(Epoch.from_dict(epoch) for epoch in data.get("epochs") or ()),
            key_spaces=bool(data.get("key_spaces", False)),
        )

    def with_changes(self, retention_ms: int | None, max_length: int | None,
                     clear_max_length: bool = False) -> TopicMetadata:
        """Apply a PATCH's retention and length (either way); partitions grow by ``growing``."""
        updated = replace(
            self,
            retention_ms=self.retention_ms if retention_ms is None else retention_ms,
            max_length=(None if clear_max_length
                        else (self.max_length if max_length is None else max_length)),
        )
        validate_settings(TopicSettings(updated.name, updated.partitions, updated.retention_ms,
                                        updated.max_length, updated.key_index, updated.compact))
        return updated

    def growing(self, partitions: int, now_ms: int, by: str | None = None) -> TopicMetadata:
        """The topic while publishes pause for a growth to ``partitions`` asked of gateway ``by``;
        partitions may only grow."""
        if partitions <= self.partitions:
            raise InvalidTopic(f"partitions may only grow: topic has {self.partitions}, asked for "
                               f"{partitions}", field="partitions")
        validate_settings(TopicSettings(self.name, partitions, self.retention_ms))
        return replace(self, growing_to=partitions, growth_since_ms=now_ms, growth_by=by)

    @property
    def fenced(self) -> bool:
        """Whether the growth under way has its fences already (its last step is left)."""
        return (self.growing_to is not None and bool(self.epochs)
                and self.epochs[-1].before == self.partitions)

    def with_fences(self, fences: Sequence[str]) -> TopicMetadata:
        """The growing topic with the old partitions' last offsets as the growth's fences; the
        partition count changes in the next step (``grown``), once every gateway knows them."""
        if self.growing_to is None or self.fenced or len(fences) != self.partitions:
            raise ValueError("with_fences() needs an unfenced growth and a fence per old partition")
        epoch = Epoch(self.partitions, self.growing_to, tuple(fences))
        return replace(self, epochs=(*self.epochs, epoch))

    def grown(self) -> TopicMetadata:
        """The topic after its growth: the new count, publishes resume."""
        if self.growing_to is None or not self.fenced:
            raise ValueError("grown() needs a fenced growth")
        return replace(self, partitions=self.growing_to, growing_to=None, growth_since_ms=None,
                       growth_by=None)

    def growth_abandoned(self) -> TopicMetadata:
        """The topic as before a growth that did not finish (its fences dropped)."""
        epochs = self.epochs[:-1] if self.fenced else self.epochs
        return replace(self, growing_to=None, growth_since_ms=None, growth_by=None,
                       epochs=epochs)


@dataclass(frozen=True, slots=True)
class Epoch:
    """One growth: ``before`` partitions became ``after``; ``fences[p]`` is old partition p's last
    offset when publishes paused ("0-0": empty). Entries after a fence were placed by ``after``."""

    before: int
    after: int
    fences: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        """The JSON form stored in etcd."""
        return {"before": self.before, "after": self.after, "fences": list(self.fences)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Epoch:
        """Parse ``to_dict``'s form."""
        return cls(int(data["before"]), int(data["after"]), tuple(map(str, data["fences"])))

    def fence(self, partition: int) -> str:
        """Where this growth cuts ``partition``: its fence, or "0-0" for a partition it added."""
        return self.fences[partition] if partition < self.before else "0-0"

    def sources(self, partition: int) -> list[int]:
        """The old partitions other than ``partition`` whose keys this growth may move to it.

        A key hashed to h lands on h % before, then h % after; both are possible for a pair
        (p, q) exactly when p and q agree modulo gcd(before, after).
        """
        if partition >= self.after:
            return []
        step = math.gcd(self.before, self.after)
        return [p for p in range(partition % step, self.before, step) if p != partition]


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
