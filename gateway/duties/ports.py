"""What the duties need from partition ownership and storage (structural types, so tests can fake
them)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from storage.models import AppendResult, StoredEntry, TrimReport
from storage.overview import PartitionOverview


class Ownership(Protocol):
    """Which partitions this node may act on right now."""

    @property
    def owned(self) -> frozenset[tuple[str, int]]:
        """(topic, partition) pairs held with a fresh lease."""
        ...

    @property
    def live_nodes(self) -> list[str]:
        """The registered node ids as this node sees them."""
        ...

    @property
    def healthy(self) -> bool:
        """False while the node cannot keep its lease or follow ownership changes."""
        ...

    def epoch(self, topic: str, partition: int) -> int | None:
        """The fencing token of an owned partition, else None."""
        ...

    async def wait_changed(self) -> object:
        """Return when ``owned`` may have changed."""
        ...


class DelayedStore(Protocol):
    """Delayed-message promotion."""

    async def promote_due_partitions(
        self, topic: str, partitions: Sequence[int], *, limit: int, max_length: int | None
    ) -> Mapping[int, Sequence[AppendResult]]:
        """Move due delayed messages of each partition into its stream, atomically per partition, in
        due order."""
        ...


class RetentionStore(Protocol):
    """Retention trimming."""

    async def trim(self, topic: str, partition: int, *, min_offset: str | None,
                   max_length: int | None) -> TrimReport:
        """Apply retention; report what was removed and how much of it groups had not acked."""
        ...

    async def compact(self, topic: str, partition: int, lag_ms: int) -> int:
        """A compacted partition's retention; how many entries went."""
        ...


class StreamReader(Protocol):
    """What the lag duty reads of the streams."""

    async def partition_overviews(self, topic: str,
                                  partitions: Sequence[int]) -> Mapping[int, PartitionOverview]:
        """Length and every group's position of each partition."""
        ...

    async def read(self, topic: str, partition: int, *, after: str | None = None,
                   from_time_ms: int | None = None, limit: int = 100) -> list[StoredEntry]:
        """Up to ``limit`` entries strictly after ``after``."""
        ...
