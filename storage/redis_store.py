"""RedisStreamStore: the StreamStore port on a Redis Cluster (one stream per partition)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from types import TracebackType
from typing import Any, TypeVar

from redis.asyncio import RedisCluster

from storage.append.batch import BatchAppender
from storage.archive.catch_up import CatchUp
from storage.archive.manifest import archived_range, range_commands
from storage.archive.object_store import ArchiveStore
from storage.archive.tier import ArchiveSettings, ArchiveTier
from storage.cluster import CallObserver, ClusterRouter, ignore_call
from storage.codec import decode_offset, decode_raw_entries, validate_offset, validate_offsets
from storage.compaction import Compaction
from storage.delayed import RedisDelayedStore
from storage.errors import StorageUnavailable
from storage.group_consumers import RedisGroupConsumers
from storage.groups import RedisGroupStore
from storage.key_index import KeyHistory
from storage.keys import PREFIX, log_key, slot_of
from storage.memory import MemoryWatch
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
from storage.overview import (
    PartitionOverview,
    partitions_by_node,
    read_last_offsets,
    read_overviews,
)
from storage.purge import Purge
from storage.quota_in_flight import RedisInFlightBoard
from storage.quota_ledger import RedisQuotaLedger
from storage.rate_limit import RedisRateLimiter
from storage.retention import RedisRetention
from storage.settings import RedisStoreSettings
from storage.verdicts import RedisVerdictBoard
from storage.wire.connection import NodeAddress
from storage.wire.errors import ClusterDownError
from storage.wire.lanes import NodeLanes
from storage.wire.resp import encode_command

T = TypeVar("T")
_SCAN_COUNT = 1000


class RedisStreamStore:
    """A partitioned log on a Redis Cluster; use as ``async with RedisStreamStore(settings) as
    store``.

    Every redis exception is translated to a storage error here; nothing above sees redis types.
    """

    def __init__(self, settings: RedisStoreSettings, observer: CallObserver = ignore_call,
                 archive: ArchiveStore | None = None,
                 archive_settings: ArchiveSettings | None = None) -> None:
        self.settings = settings
        # the cold tier: segments there, manifests beside the streams (storage.archive)
        self._archive_store = archive
        self._archive_settings = archive_settings or ArchiveSettings()
        self._archive: ArchiveTier | None = None
        self._catch_up: CatchUp | None = None  # groups placed inside the archive
        # appends, reads and acks over pipelined node connections (storage.wire.lanes)
        self._lanes = NodeLanes(settings)
        # told about every Redis attempt: (operation, seconds, error class or None)
        self._observer = observer
        self._router: ClusterRouter | None = None
        self._batches: BatchAppender | None = None
        self._groups: RedisGroupStore | None = None
        self._delayed: RedisDelayedStore | None = None
        self._retention: RedisRetention | None = None
        self._consumers: RedisGroupConsumers | None = None
        self._rate_limiter: RedisRateLimiter | None = None
        self._memory: MemoryWatch | None = None
        self._closed = False

    @classmethod
    def from_cluster(cls, cluster: RedisCluster, settings: RedisStoreSettings) -> RedisStreamStore:
        """Wrap an existing (initialised) cluster client; the caller keeps owning and closing it.

        ``settings`` must describe the same cluster: the per-node write clients are built from it.
        """
        store = cls(settings)
        store._attach(ClusterRouter(cluster, settings, owns_cluster=False))
        return store

    def _attach(self, router: ClusterRouter) -> None:
        router.observer = self._observer
        self._router = router
        lanes = self._lanes
        router.on_refresh(lanes.forget)  # connections to nodes no longer primaries are closed
        lanes.on_stall = lambda address: router.watch_failover(address, lanes.stalled)
        settings = self.settings
        self._memory = MemoryWatch(router, lanes, settings.publish_memory_watermark,
                                   settings.memory_poll_interval_s)
        self._batches = BatchAppender(router, lanes, self._memory)
        if self._archive_store is not None:
            self._archive = ArchiveTier(router, lanes, self._archive_store,
                                        self._archive_settings)
            self._catch_up = CatchUp(router, lanes, self._archive)

    async def open(self) -> None:
        """Connect to the cluster and load its slot map (raises StorageUnavailable); no-op when
        open."""
        if self._router is None:
            self._attach(await ClusterRouter.connect(self.settings))
            assert self._memory is not None
            await self._memory.__aenter__()

    async def __aenter__(self) -> RedisStreamStore:
        await self.open()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the cluster client (if owned) and every per-node client; safe to call twice."""
        if self._closed:
            return
        self._closed = True
        if self._memory is not None:
            await self._memory.aclose()
        await self._lanes.aclose()
        if self._router is not None:
            await self._router.aclose()

    @property
    def router(self) -> ClusterRouter:
        """The open connection router (raises StorageUnavailable before open / after close)."""
        if self._router is None or self._closed:
            raise StorageUnavailable("storage is not open")
        return self._router

    @property
    def archive(self) -> ArchiveTier | None:
        """The archive tier, when the store has one."""
        return self._archive

    @property
    def memory(self) -> MemoryWatch:
        """Every node's memory against its maxmemory and the publish watermark."""
        if self._memory is None or self._closed:
            raise StorageUnavailable("storage is not open")
        return self._memory

    @property
    def groups(self) -> RedisGroupStore:
        """Consumer groups on the same connections (created on first use, closed with this
        store)."""
        if self._groups is None:
            self._groups = RedisGroupStore(self.router, self._lanes, self._catch_up)
        return self._groups

    @property
    def delayed(self) -> RedisDelayedStore:
        """Delayed messages (schedule, promote_due, ...) on the same connections; nothing extra to
        close."""
        if self._delayed is None:
            self._delayed = RedisDelayedStore(self.router, self._lanes)
        return self._delayed

    @property
    def retention(self) -> RedisRetention:
        """Retention trimming with unacked-entry reporting, on the same connections; nothing extra
        to close."""
        if self._retention is None:
            self._retention = RedisRetention(self.router, self._lanes, self._archive)
        return self._retention

    @property
    def consumers(self) -> RedisGroupConsumers:
        """The consumers inside groups (listing, removing empty ones) on the same connections."""
        if self._consumers is None:
            self._consumers = RedisGroupConsumers(self.router, self._lanes)
        return self._consumers

    @property
    def verdicts(self) -> RedisVerdictBoard:
        """The partitions' group verdicts as their owners post them, on the same connections."""
        return RedisVerdictBoard(self.router, self._lanes)

    @property
    def in_flight(self) -> RedisInFlightBoard:
        """Each gateway's in-flight count per quota subject, shared on the same connections."""
        return RedisInFlightBoard(self.router, self._lanes)

    @property
    def quotas(self) -> RedisQuotaLedger:
        """The quota ledger shared by every gateway replica, on the same connections."""
        return RedisQuotaLedger(self.router, self._lanes)

    @property
    def rate_limiter(self) -> RedisRateLimiter:
        """Token buckets shared by every gateway replica, on the same connections."""
        if self._rate_limiter is None:
            self._rate_limiter = RedisRateLimiter(self.router, self._lanes)
        return self._rate_limiter

    def append(self, topic: str, records: Records | Sequence[Record], options: AppendOptions,
               conditions: Conditions | None = None) -> Coroutine[Any, Any, Appended]:
        """Append records (any partitions); what each got, in input order
        (``storage.append.batch``). The batch appender's coroutine itself, not one awaiting it: the
        publish path takes no extra step here."""
        if self._batches is None or self._closed:
            raise StorageUnavailable("storage is not open")
        memory = self._memory
        if memory is not None and memory.over:  # refused whole, before anything is written
            memory.check_room(topic, records.partitions if isinstance(records, Records)
                              else [record.partition for record in records],
                              self.router.node_for_slot)
        return self._batches.append(topic, records, options, conditions)

    def check_room(self, topic: str, partitions: Sequence[int]) -> None:
        """Raise StorageFull when a node that one of ``partitions`` lives on is past the publish
        watermark."""
        memory = self._memory
        if memory is not None and memory.over:
            memory.check_room(topic, partitions, self.router.node_for_slot)

    async def key_history(self, topic: str, partition: int, key: bytes, *, low: str = "-",
                          high: str = "+", limit: int = 100, newest_first: bool = False,
                          key_space: bytes = b"") -> list[StoredEntry]:
        """Up to ``limit`` of a key's retained entries in ``key_space`` with offsets in [low, high]
        (``-``/``+`` open, a leading ``(`` exclusive), from its index (never a scan of the
        partition), archived ones from their segments."""
        for bound in (low, high):
            if bound not in ("-", "+"):
                validate_offset(bound.removeprefix("("))
        if limit <= 0:
            return []
        return await KeyHistory(self.router, self._lanes, self._archive).read(
            topic, partition, key, low=low, high=high, limit=limit, newest_first=newest_first,
            key_space=key_space)

    async def snapshot_offset(self, topic: str, partition: int) -> str:
        """The offset a snapshot taken now is as of (the partition's newest ever, '0-0' when
        none)."""
        return await Compaction(self.router, self._lanes).snapshot_offset(topic, partition)

    async def snapshot_page(self, topic: str, partition: int, *, as_of: str,
                            after: str | None = None, limit: int = 100, lag_ms: int,
                            key_space: bytes = b"") -> tuple[str | None, list[StoredEntry]]:
        """One page of a compacted partition's snapshot: the newest value at or before ``as_of``
        of up to ``limit`` keys of ``key_space`` (every space's for the empty one) after the
        cursor ``after``, and the next page's cursor (None at the end). ``SnapshotExpired`` once
        messages written after ``as_of`` are older than ``lag_ms``; ``ValueError`` for a cursor
        that is not one."""
        validate_offset(as_of)
        return await Compaction(self.router, self._lanes).snapshot_page(
            topic, partition, after=after, as_of=as_of, limit=limit, lag_ms=lag_ms,
            key_space=key_space)

    async def read(
        self,
        topic: str,
        partition: int,
        *,
        after: str | None = None,
        from_time_ms: int | None = None,
        limit: int = 100,
    ) -> list[StoredEntry]:
        """Up to ``limit`` entries in offset order, strictly after ``after`` or from
        ``from_time_ms``.

        When both are given, ``after`` wins (a resumed cursor is more precise than a time). The
        XRANGE goes on the node connection of the slot's primary when there is one (replays and
        broadcast catch-up read page after page: far less client CPU per call than through redis-py,
        and the compiled decoder).
        """
        if after is not None:
            start = "(" + validate_offset(after)
        elif from_time_ms is not None:
            start = f"{max(0, from_time_ms)}-0"
        else:
            start = "-"
        if limit <= 0:
            return []
        if self._archive is not None:  # archived entries first, where the start lies there
            return await self._archive.read(topic, partition, start, limit)
        key, slot = log_key(topic, partition), slot_of(topic, partition)
        raw = await self._call("read", self.settings.read_deadline_s,
                               lambda: self._xrange_on_node(slot, key, start, limit))
        return decode_raw_entries(partition, raw or [])

    async def _xrange_on_node(self, slot: int, key: str, start: str, limit: int) -> Any:
        """XRANGE on the node connection of the slot's primary: its raw RESP2 reply (``[id, [field,
        value...]]`` items). An error reply is raised for the router to retry (MOVED refreshes the
        slot map first)."""
        command = encode_command(("XRANGE", key, start, "+", "COUNT", limit))
        (reply,) = await self._lanes.execute(self.router.node_for_slot(slot), [command],
                                             exclusive=False)
        if isinstance(reply, BaseException):
            raise reply
        return reply

    async def last_offset(self, topic: str, partition: int) -> str | None:
        """The newest existing offset of a partition, or None when it is empty or missing."""
        key = log_key(topic, partition)
        items = await self._on_partition("last_offset", topic, partition,
                                          ("XREVRANGE", key, "+", "-", "COUNT", 1))
        return decode_offset(items[0][0]) if items else None

    async def last_offsets(self, topic: str, partitions: Sequence[int]) -> dict[int, str | None]:
        """``last_offset`` of several partitions: one pipelined round per node on the node
        connections (a subscription storm costs Redis round trips, not a redis-py connection per
        lookup); a partition that did not answer plainly there is read the usual way."""
        found = await read_last_offsets(self.router, self._lanes, topic, partitions)
        return {partition: found[partition] if partition in found
                else await self.last_offset(topic, partition)
                for partition in partitions}

    async def length(self, topic: str, partition: int) -> int:
        """Entries in a partition now (XLEN; 0 when it is empty or missing)."""
        key = log_key(topic, partition)
        return int(await self._on_partition("length", topic, partition, ("XLEN", key)))

    async def delete_entries(self, topic: str, partition: int, offsets: Sequence[str]) -> int:
        """XDEL: remove entries by offset; returns how many were there (deleting again is 0)."""
        if not offsets:
            return 0
        command = ("XDEL", log_key(topic, partition), *validate_offsets(offsets))
        return int(await self.router.call_on_slot(self._lanes, "delete_entries",
                                                  self.settings.write_deadline_s,
                                                  slot_of(topic, partition), command))

    async def partition_overviews(self, topic: str,
                                  partitions: Sequence[int]) -> dict[int, PartitionOverview]:
        """Length and every group's position of several partitions (``storage.overview``): one
        pipelined round per node on the node connections; a partition that did not answer plainly
        there is read one call at a time with the usual retries, its oldest pending offsets
        included."""
        found = await read_overviews(self.router, self._lanes, topic, partitions, self.archive)
        for partition in partitions:
            if partition not in found:
                found[partition] = await self._overview_one(topic, partition)
        return found

    async def _overview_one(self, topic: str, partition: int) -> PartitionOverview:
        length = await self.length(topic, partition)
        states = {group: await self.groups.state(topic, partition, group)
                  for group in await self.groups.groups(topic, partition)}
        return PartitionOverview(partition, length, states)

    async def partition_info(self, topic: str, partitions: int) -> list[PartitionInfo]:
        """Length and first/last offset of partitions 0..partitions-1 and, with an archive tier,
        what each one's archive holds (pipelined, grouped per node)."""
        per = len(self._info_commands(topic, 0))
        replies = await self._call(
            "partition_info",
            self.settings.read_deadline_s,
            lambda: self._partition_info_replies(topic, partitions, per),
        )
        return [_partition_info(p, replies[per * p:per * (p + 1)]) for p in range(partitions)]

    def _info_commands(self, topic: str, partition: int) -> list[tuple[Any, ...]]:
        key = log_key(topic, partition)
        stream = [("XLEN", key), ("XRANGE", key, "-", "+", "COUNT", 1),
                  ("XREVRANGE", key, "+", "-", "COUNT", 1)]
        return stream + (range_commands(topic, partition) if self._archive is not None else [])

    async def _partition_info_replies(self, topic: str, partitions: int, per: int) -> list[Any]:
        """``_info_commands`` of every partition (``per`` each): one pipeline per owning node on
        the node connections (an error reply, MOVED included, is raised for a retry)."""
        by_node = partitions_by_node(self.router, topic, range(partitions))
        if partitions and not by_node:  # a slot has no owner now (failover): retried
            raise ClusterDownError("a slot of the topic has no primary")
        replies: list[Any] = [None] * (per * partitions)
        answers = await asyncio.gather(*(self._on_node(addr, [
            command for p in group for command in self._info_commands(topic, p)])
            for addr, group in by_node.items()))
        for group, answer in zip(by_node.values(), answers, strict=True):
            for index, p in enumerate(group):
                replies[per * p:per * (p + 1)] = answer[per * index:per * (index + 1)]
        return replies

    async def purge_partition(self, topic: str, partition: int) -> PurgeReport:
        """Remove every entry and scheduled message of a partition at one cut; each group's
        position moves to the cut and its pending entries below it are acked. The archived part goes
        first (its manifest, then its files), and groups catching up on it return to the log."""
        if self._archive is not None and self._catch_up is not None:
            await self._archive.drop_partition(topic, partition)
            await self._catch_up.abandon(topic, partition)
        return await Purge(self.router, self._lanes).partition(topic, partition)

    async def delete_topic(self, topic: str, partitions: int) -> None:
        """Remove every key of the topic's partitions (streams, delayed messages, idempotency keys,
        archive manifests), then its archived segments.

        One SCAN per primary (MATCH on the topic's hash-tag prefix), filtered exactly, then UNLINK
        per partition (a multi-key UNLINK must stay within one slot).
        """
        wanted = re.compile(re.escape(f"{PREFIX}:{{{topic}/") + r"(\d+)\}:")
        pattern = f"{PREFIX}:{_glob_escape('{' + topic + '/')}*"

        async def run() -> None:
            await asyncio.gather(
                *(self._delete_on_node(a, pattern, wanted, partitions)
                  for a in self.router.primaries())
            )

        await self._call("delete_topic", self.settings.write_deadline_s, run)
        if self._archive is not None:
            await self._archive.drop_topic(topic)

    async def _delete_on_node(self, addr: NodeAddress, pattern: str, wanted: re.Pattern[str],
                              partitions: int) -> None:
        by_partition: dict[int, list[bytes]] = {}
        cursor: bytes = b"0"
        while True:
            scanned = await self._on_node(addr, [("SCAN", cursor, "MATCH", pattern,
                                                  "COUNT", _SCAN_COUNT)])
            cursor, keys = scanned[0]
            for raw in keys:
                match = wanted.match(raw.decode(errors="replace"))
                if match and int(match.group(1)) < partitions:
                    by_partition.setdefault(int(match.group(1)), []).append(raw)
            if cursor == b"0":
                break
        unlinks = [("UNLINK", *keys[start:start + 500]) for keys in by_partition.values()
                   for start in range(0, len(keys), 500)]
        if unlinks:
            await self._on_node(addr, unlinks)

    async def _on_node(self, addr: NodeAddress, commands: list[tuple[Any, ...]]) -> list[Any]:
        """Commands on one node's node connection; the first error reply is raised."""
        replies = await self._lanes.execute(addr, commands, exclusive=False)
        for reply in replies:
            if isinstance(reply, BaseException):
                raise reply
        return replies

    async def ping(self) -> None:
        """Raise StorageUnavailable unless a node answers CLUSTER INFO with ``cluster_state:ok``."""
        info = await self._call("ping", self.settings.read_deadline_s,
                                lambda: self.router.cluster.cluster_info())
        fields: dict[Any, Any] = dict(info)
        state = _text(fields.get("cluster_state") or fields.get(b"cluster_state"))
        if state != "ok":
            raise StorageUnavailable(f"redis cluster state is {state!r}")

    async def _on_partition(self, what: str, topic: str, partition: int,
                            command: tuple[Any, ...]) -> Any:
        return await self.router.call_on_slot(self._lanes, what, self.settings.read_deadline_s,
                                              slot_of(topic, partition), command)

    async def _call(self, what: str, budget_s: float, op: Callable[[], Awaitable[T]]) -> T:
        return await self.router.call(what, budget_s, op)


def _partition_info(partition: int, replies: Sequence[Any]) -> PartitionInfo:
    length, first, last, *archived = replies
    return PartitionInfo(partition, int(length), decode_offset(first[0][0]) if first else None,
                         decode_offset(last[0][0]) if last else None,
                         archived_range(archived) if archived else None)


def _glob_escape(text: str) -> str:
    # SCAN MATCH is a glob; a topic may contain glob metacharacters.
    return "".join("\\" + ch if ch in "*?[]\\" else ch for ch in text)


def _text(raw: Any) -> str | None:
    if raw is None:
        return None
    return raw.decode() if isinstance(raw, bytes) else str(raw)


__all__ = ["RedisStoreSettings", "RedisStreamStore"]
