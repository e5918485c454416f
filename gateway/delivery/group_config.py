"""How a group is served on this gateway (``GroupConfig``) and which partition a group reader
serves (``ReaderScope``): what every room of a group reader is built with."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from gateway.delivery.filters import HeaderFilter
from partitioner.group_policy import NO_BACKOFF, RetryBackoff

if TYPE_CHECKING:
    from gateway.delivery.pinning import PinnedVersion


@dataclass(frozen=True, slots=True)
class GroupConfig:
    """How a group is served on this gateway; every session of the group must agree on it."""

    ack_timeout_ms: int
    max_deliveries: int
    filter: HeaderFilter
    start: str  # where a new group starts: "earliest", "latest" or an offset
    auto_ack: bool
    exclusive: bool
    retry_backoff: RetryBackoff = NO_BACKOFF
    # key_shared: one message of a key in flight at a time (gateway.delivery.key_order)
    key_ordered: bool = False
    # every delivery converted to this schema version (None: values as written)
    pinned: PinnedVersion | None = None

    @property
    def mode(self) -> str:
        """The mode as metrics label it."""
        return "key_shared" if self.key_ordered else "exclusive" if self.exclusive else "shared"


@dataclass(frozen=True, slots=True)
class ReaderScope:
    """The (topic, partition, group) a reader serves, as ``consumer``, and its metric labels."""

    topic: str
    partition: int
    group: str
    consumer: str
    labels: tuple[str, str, str]  # (topic, group, mode)

    @classmethod
    def of(cls, topic: str, partition: int, group: str, consumer: str,
           config: GroupConfig) -> ReaderScope:
        """The scope of a reader of ``group`` served with ``config``."""
        return cls(topic, partition, group, consumer, (topic, group, config.mode))
