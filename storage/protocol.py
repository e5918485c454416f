"""The port the gateway talks to: a log of partitions, each one stream."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from storage.models import (
    Appended,
    AppendOptions,
    Conditions,
    PartitionInfo,
    PurgeReport,
    Record,
    Records,
    StoredEntry,
)


class StreamStore(Protocol):
    """A partitioned append-only log."""

    async def append(self, topic: str, records: Records | Sequence[Record],
                     options: AppendOptions, conditions: Conditions | None = None) -> Appended:
        """Append records (any partitions) and return what each got, in input order.

        With ``conditions`` (the records all in one partition) nothing is written unless they
        hold: ``ConditionFailed`` names the first that does not.

        Records are grouped by partition and by node; each partition's group is written atomically.
        With ``Acks.ALL`` the write is followed by WAIT on the same connection; fewer replicas than
        required raise ``NotEnoughReplicas``. Raises ``StorageUnavailable`` when the cluster cannot
        be reached within the store's deadline, and ``StorageFull`` (nothing written) when a node
        the records would go to is past the publish watermark or Redis refuses them for memory.
        """
        ...

    def check_room(self, topic: str, partitions: Sequence[int]) -> None:
        """Raise ``StorageFull`` when a node that one of ``partitions`` lives on is past the
        publish watermark (``append`` checks it too; this is for writes queued before they are
        made)."""
        ...

    async def read(
        self,
        topic: str,
        partition: int,
        *,
        after: str | None = None,
        from_time_ms: int | None = None,
        limit: int = 100,
    ) -> list[StoredEntry]:
        """Read up to ``limit`` entries in offset order.

        ``after`` is exclusive (entries strictly after that offset); None means from the first
        entry. ``from_time_ms`` starts at the first entry whose timestamp is >= that time.
        """
        ...

    async def key_history(self, topic: str, partition: int, key: bytes, *, low: str = "-",
                          high: str = "+", limit: int = 100, newest_first: bool = False,
                          key_space: bytes = b"") -> list[StoredEntry]:
        """Up to ``limit`` of a key's retained entries in ``key_space`` with offsets in [low, high]
        (``-``/``+`` open, a leading ``(`` exclusive), from the key's index (a topic with
        ``key_index``)."""
        ...

    async def snapshot_offset(self, topic: str, partition: int) -> str:
        """The offset a snapshot taken now is as of: the partition's newest ever ('0-0')."""
        ...

    async def snapshot_page(self, topic: str, partition: int, *, as_of: str,
                            after: str | None = None, limit: int = 100, lag_ms: int,
                            key_space: bytes = b"") -> tuple[str | None, list[StoredEntry]]:
        """One page of a compacted partition's newest values as of ``as_of`` (the keys of
        ``key_space``; every space's for the empty one) and the next page's cursor (None at the
        end); ``SnapshotExpired`` once messages written after ``as_of`` are older than
        ``lag_ms``."""
        ...

    async def last_offset(self, topic: str, partition: int) -> str | None:
        """The newest offset of a partition, or None when it is empty."""
        ...

    async def last_offsets(self, topic: str, partitions: Sequence[int]) -> dict[int, str | None]:
        """``last_offset`` of each of ``partitions``."""
        ...

    async def length(self, topic: str, partition: int) -> int:
        """Entries in a partition now (0 when it is empty or missing)."""
        ...

    async def partition_info(self, topic: str, partitions: int) -> list[PartitionInfo]:
        """Length and first/last offset of partitions 0..partitions-1."""
        ...

    async def delete_entries(self, topic: str, partition: int, offsets: Sequence[str]) -> int:
        """Remove entries by offset; returns how many were there (deleting again is 0)."""
        ...

    async def purge_partition(self, topic: str, partition: int) -> PurgeReport:
        """Remove every entry and scheduled message of a partition at one cut; consumer groups'
        positions follow the cut."""
        ...

    async def delete_topic(self, topic: str, partitions: int) -> None:
        """Remove every key of a topic's partitions."""
        ...

    async def ping(self) -> None:
        """Raise ``StorageUnavailable`` unless the cluster is reachable and its state is ok."""
        ...
