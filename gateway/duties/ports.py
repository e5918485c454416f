"""What the duties need from partition ownership and storage (structural types, so tests can fake them)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from storage.models import AppendResult, TrimReport


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

    async def wait_changed(self) -> object:
        """Return when ``owned`` may have changed."""
        ...


class DelayedStore(Protocol):
    """Delayed-message promotion."""

    async def promote_due(self, topic: str, partition: int, *, limit: int,
                          max_length: int | None) -> Sequence[AppendResult]:
        """Move due delayed messages into the stream, atomically, in due order."""
        ...


class RetentionStore(Protocol):
    """Retention trimming."""

    async def trim(self, topic: str, partition: int, *, min_offset: str | None,
                   max_length: int | None) -> TrimReport:
        """Apply retention; report what was removed and how much of it groups had not acked."""
        ...
