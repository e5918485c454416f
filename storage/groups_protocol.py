"""The port for consumer groups on a partitioned log (Redis Stream consumer groups underneath)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from storage.models import (
    Delivery,
    GroupPartitionState,
    LostRange,
    ParkedKey,
    PendingEntry,
    StoredEntry,
)


class GroupStore(Protocol):
    """At-least-once delivery bookkeeping per (topic, partition, group)."""

    async def ensure_group(self, topic: str, partition: int, group: str, start: str) -> None:
        """Create the group on the partition if absent (stream created if missing).

        ``start``: "earliest" (from the first entry), "latest" (only entries appended from now on)
        or an offset (deliver entries strictly after it). An existing group is left where it is.
        """
        ...

    async def read_new(self, topic: str, partition: int, group: str, consumer: str, *, count: int,
                       block_ms: int, until: str | None = None, last_read: str | None = None,
                       lost: bool = False) -> list[StoredEntry]:
        """Entries never delivered to the group (XREADGROUP ... >), blocking up to ``block_ms`` (0 =
        no block); with ``until``, none after that offset (and ``block_ms`` 0).

        With ``last_read`` (the newest offset the consumer's reads returned), a read retried after
        a failure, or one with ``lost`` set (the caller's last read failed), first returns the
        consumer's pending entries after it: what a lost reply handed to the consumer.

        The entries enter the group's pending list under ``consumer`` with delivery count 1. A group
        that vanished (e.g. the stream was deleted) is re-created from "earliest" before reading.
        """
        ...

    async def read_after(
        self, topic: str, partition: int, *, after: str | None, count: int, block_ms: int
    ) -> list[StoredEntry]:
        """Up to ``count`` entries strictly after ``after`` (None: from the first), blocking up to
        ``block_ms``."""
        ...

    async def ack(self, topic: str, partition: int, group: str, offsets: Sequence[str]) -> int:
        """Acknowledge entries (XACK); returns how many were pending. Works from any consumer or
        gateway."""
        ...

    async def expired(self, topic: str, partition: int, group: str, *, min_idle_ms: int, count: int,
                      after: str | None = None, consumer: str | None = None) -> list[PendingEntry]:
        """Pending entries idle for at least ``min_idle_ms``, oldest first (XPENDING ... IDLE).

        ``after``: only offsets strictly after it (paging); ``consumer``: only entries pending for
        that consumer.
        """
        ...

    async def claim(self, topic: str, partition: int, group: str, consumer: str,
                    pending: Sequence[PendingEntry], *, min_idle_ms: int) -> list[Delivery]:
        """Take over pending entries for ``consumer`` (XCLAIM) and return them with delivery_count +
        1.

        Entries someone else claimed meanwhile (idle below ``min_idle_ms``) are skipped. Entries
        that were trimmed away are acked (they cannot be delivered) and skipped.
        """
        ...

    async def claim_offsets(self, topic: str, partition: int, group: str, consumer: str,
                            offsets: Sequence[str], *, min_idle_ms: int) -> list[Delivery]:
        """``claim`` by offset, their delivery counts read alongside, without a walk of the
        pending list; offsets not pending or idle below ``min_idle_ms`` are skipped."""
        ...

    async def set_idle(self, topic: str, partition: int, group: str, consumer: str,
                       offsets: Sequence[str], idle_ms: int) -> None:
        """Reset the idle time of pending entries without counting a delivery (XCLAIM ... IDLE n
        JUSTID).

        ``extend`` uses idle 0 (the ack timeout starts again); ``nack`` with a delay d uses
        ack_timeout - d, so the entry becomes reclaimable after d; releasing at once uses a huge
        idle.
        """
        ...

    async def state(self, topic: str, partition: int, group: str) -> GroupPartitionState:
        """Where the group is on a partition: last delivered, pending count, oldest pending, lag."""
        ...

    async def park(self, topic: str, partition: int, group: str,
                   parked: Sequence[ParkedKey]) -> None:
        """Record keys of a key_shared group as parked (visible to every gateway)."""
        ...

    async def unpark(self, topic: str, partition: int, group: str, keys: Sequence[bytes]) -> None:
        """Forget parked keys (``keys`` empty: all of the group's on the partition)."""
        ...

    async def parked(self, topic: str, partition: int, group: str) -> list[ParkedKey]:
        """The group's parked keys on the partition, oldest first."""
        ...

    async def lost_after(self, topic: str, partition: int, after: str,
                         group: str | None = None) -> LostRange | None:
        """The entries after ``after`` that retention trimmed, or None when nothing after it was
        removed; with ``group`` (at ``after``), how many when Redis can tell."""
        ...

    async def seek(self, topic: str, partition: int, group: str, start: str) -> None:
        """Move the group's position: "earliest", "latest" or an offset (XGROUP SETID). Pending
        stays."""
        ...

    async def groups(self, topic: str, partition: int) -> list[str]:
        """Names of the groups that exist on a partition."""
        ...

    async def delete_group(self, topic: str, partition: int, group: str) -> None:
        """Remove the group from a partition (XGROUP DESTROY); absent is fine."""
        ...
