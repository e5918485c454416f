"""An in-memory StreamStore for the gateway unit tests (its own module: ``conftest`` is not a unique
module name when several test directories are collected in one run, so tests import it from
here)."""

from __future__ import annotations

import time
from collections.abc import Sequence

from storage.errors import StorageFull, StorageUnavailable
from storage.models import (
    Appended,
    AppendOptions,
    AppendResult,
    Conditions,
    PartitionInfo,
    PurgeReport,
    Record,
    Records,
    ScheduledResult,
    StoredEntry,
)


class InMemoryStreamStore:
    """A StreamStore in dicts, with the same offset and idempotency rules as the Redis one."""

    def __init__(self) -> None:
        self.streams: dict[tuple[str, int], list[StoredEntry]] = {}
        self.dedup: dict[tuple[str, int, str], str] = {}
        self.unavailable = False
        self.full = False  # every append refused for memory, as past the publish watermark
        self.scheduled: list[tuple[str, Record, int]] = []
        self.appends = 0

    def _next_offset(self, stream: list[StoredEntry]) -> str:
        now = int(time.time() * 1000)
        if stream:
            ms, seq = (int(x) for x in stream[-1].offset.split("-"))
            if now <= ms:
                return f"{ms}-{seq + 1}"
        return f"{now}-0"

    def check_room(self, topic: str, partitions: Sequence[int]) -> None:
        if self.full:
            raise StorageFull("node full (test)", retry_after_s=7, reason="watermark")

    async def append(self, topic: str, records: Records | Sequence[Record],
                     options: AppendOptions, conditions: Conditions | None = None) -> Appended:
        # conditional appends and key indexes live in the Redis script: tested on the real cluster
        assert conditions is None
        assert not options.key_index
        if self.unavailable:
            raise StorageUnavailable("redis is down (test)", retry_after_s=2)
        self.check_room(topic, [])
        self.appends += 1
        rows = records.rows() if isinstance(records, Records) else list(records)
        results = []
        for record in rows:
            stream = self.streams.setdefault((topic, record.partition), [])
            dedup_key = (topic, record.partition, record.idempotency_key or "")
            if record.idempotency_key and dedup_key in self.dedup:
                results.append(AppendResult(record.partition, self.dedup[dedup_key], True))
                continue
            offset = self._next_offset(stream)
            stream.append(StoredEntry(record.partition, offset, record.value, record.value_format,
                                      record.key, dict(record.headers), int(offset.split("-")[0])))
            if record.idempotency_key:
                self.dedup[dedup_key] = offset
            if options.max_length is not None and len(stream) > options.max_length:
                del stream[: len(stream) - options.max_length]
            results.append(AppendResult(record.partition, offset, False))
        keyed = any(record.idempotency_key is not None for record in rows)
        return Appended([r.partition for r in results], [r.offset for r in results],
                        [r.duplicate for r in results] if keyed else None)

    async def read(self, topic: str, partition: int, *, after: str | None = None,
                   from_time_ms: int | None = None, limit: int = 100) -> list[StoredEntry]:
        if self.unavailable:
            raise StorageUnavailable("redis is down (test)")

        def key(offset: str) -> tuple[int, ...]:
            return tuple(int(x) for x in offset.split("-"))

        entries = self.streams.get((topic, partition), [])
        if after is not None:
            entries = [e for e in entries if key(e.offset) > key(after)]
        if from_time_ms is not None:
            entries = [e for e in entries if e.timestamp_ms >= from_time_ms]
        return entries[:limit]

    async def last_offset(self, topic: str, partition: int) -> str | None:
        stream = self.streams.get((topic, partition))
        return stream[-1].offset if stream else None

    async def last_offsets(self, topic: str, partitions: Sequence[int]) -> dict[int, str | None]:
        return {partition: await self.last_offset(topic, partition) for partition in partitions}

    async def length(self, topic: str, partition: int) -> int:
        return len(self.streams.get((topic, partition), []))

    async def partition_info(self, topic: str, partitions: int) -> list[PartitionInfo]:
        infos = []
        for p in range(partitions):
            s = self.streams.get((topic, p), [])
            infos.append(PartitionInfo(p, len(s), s[0].offset if s else None,
                                       s[-1].offset if s else None))
        return infos

    async def delete_entries(self, topic: str, partition: int, offsets: Sequence[str]) -> int:
        stream = self.streams.get((topic, partition), [])
        kept = [entry for entry in stream if entry.offset not in set(offsets)]
        self.streams[(topic, partition)] = kept
        return len(stream) - len(kept)

    async def purge_partition(self, topic: str, partition: int) -> PurgeReport:
        stream = self.streams.get((topic, partition), [])
        cut = stream[-1].offset if stream else None
        self.streams[(topic, partition)] = []
        return PurgeReport(partition, len(stream), 0, cut)

    async def delete_topic(self, topic: str, partitions: int) -> None:
        for p in range(partitions):
            self.streams.pop((topic, p), None)

    async def ping(self) -> None:
        if self.unavailable:
            raise StorageUnavailable("redis is down (test)")

    async def schedule(self, topic: str, items: Sequence[tuple[Record, int]],
                       options: AppendOptions) -> list[ScheduledResult]:
        if self.unavailable:
            raise StorageUnavailable("redis is down (test)")
        results = []
        for record, due_ms in items:
            self.scheduled.append((topic, record, due_ms))
            results.append(ScheduledResult(record.partition, f"{len(self.scheduled):016d}", due_ms,
                                           False))
        return results

    def total_entries(self) -> int:
        return sum(len(s) for s in self.streams.values())
