"""The archive tier of a partition's log: moving its oldest entries into a segment (written, then
committed with the trim), reading across both tiers in offset order, and dropping it all."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

from storage.archive.manifest import (
    COMMIT,
    CONSUMED,
    EXPIRE,
    SegmentRef,
    archive_key,
    archive_readers_key,
    commit_call,
    conflict_of,
    expire_call,
    expired_prefix,
    segment_refs,
    segments_key,
)
from storage.archive.names import parse_segment_name, topic_dir
from storage.archive.object_store import ArchiveStore
from storage.archive.oldest import PageShape, oldest_pages
from storage.archive.segment_reader import read_range, read_raw_range, read_table
from storage.archive.segments import (
    EntryColumns,
    SegmentInfo,
    SegmentSettings,
    entry_columns,
    write_segment,
)
from storage.cluster import ClusterRouter
from storage.codec import decode_raw_entries, offset_key
from storage.errors import ArchiveUnavailable
from storage.keys import log_key, slot_of
from storage.models import StoredEntry
from storage.pages import PageColumns
from storage.wire.lanes import NodeLanes
from storage.wire.resp import encode_command
from storage.wire.scripts import run_script

MAX_SEQ = 2**64 - 1
# deleting a topic's folder races an owner's last move into it: a few tries
DROP_ATTEMPTS, DROP_RETRY_S = 5, 0.2
# segments one retention round looks at per partition: a round's work stays bounded
EXPIRE_BATCH = 64
PAGE_SHAPE = PageShape()
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class ArchiveSettings:
    """How big a segment gets: at most ``segment_max_entries`` entries and about
    ``segment_max_bytes`` of values; how its file is laid out (``segment``)."""

    segment_max_entries: int = 100_000
    segment_max_bytes: int = 64 << 20
    segment: SegmentSettings = field(default_factory=SegmentSettings)


class ArchiveTier:
    """One store's archive: segments in ``store``, manifests in Redis beside each stream."""

    def __init__(self, router: ClusterRouter, lanes: NodeLanes, store: ArchiveStore,
                 settings: ArchiveSettings) -> None:
        self._router = router
        self._lanes = lanes
        self.store = store
        self.settings = settings
        # the last offset of the newest segment each read met, per partition: a read from below
        # it asks the manifest alone (it may be stale: a read into the stream checks again)
        self._tips: dict[tuple[str, int], str] = {}

    async def _on_partition(self, what: str, topic: str, partition: int,
                            commands: list[tuple[Any, ...]]) -> list[Any]:
        """Commands on the partition's primary in one round trip, retried as reads are; the
        first error reply is raised."""
        slot = slot_of(topic, partition)

        async def op() -> list[Any]:
            replies = await self._lanes.execute(self._router.node_for_slot(slot), commands,
                                                exclusive=False)
            for reply in replies:
                if isinstance(reply, BaseException):
                    raise reply
            return list(replies)

        return await self._router.call(what, self._router.settings.read_deadline_s, op)

    async def segments(self, topic: str, partition: int) -> list[SegmentRef]:
        """Every committed segment of the partition, oldest first."""
        (items,) = await self._on_partition("archive_segments", topic, partition,
                                            [("XRANGE", segments_key(topic, partition), "-",
                                              "+")])
        return segment_refs(items)

    async def consumed(self, topic: str, partition: int) -> str | None:
        """The end (XRANGE syntax, ``(`` exclusive) of what every consumer group of the partition
        has delivered and settled; None when it has none (archive readers do not count)."""
        slot = slot_of(topic, partition)

        async def op() -> Any:
            return await run_script(self._lanes, self._router.node_for_slot(slot), CONSUMED,
                                    [log_key(topic, partition),
                                     archive_readers_key(topic, partition)], [])

        bound = await self._router.call("archive_consumed", self._router.settings.read_deadline_s,
                                        op)
        return None if bound is None else _text(bound)

    async def move_oldest(self, topic: str, partition: int, *, epoch: int,
                          until: str | None, pass_behind: bool = False) -> SegmentInfo | None:
        """Move the partition's oldest entries, none after ``until`` (None: any), into one
        segment: written whole, then committed to the manifest and trimmed from the stream in one
        script. None when there is nothing to move. ArchiveConflict when a later owner committed,
        the stream moved under it, or a group has not consumed it (without ``pass_behind``, which
        moves such groups to catch-up streams instead); the file written stays an orphan, removed
        by ``remove_orphans``."""
        entries = await self._oldest(topic, partition, until)
        if entries is None:
            return None
        # the file is written on I/O threads a cancel does not stop: a cancelled move still ends
        # in its commit or its file's deletion, never in a file no owner would remove (the
        # partition's owner is cancelled when its topic is deleted)
        return await _to_the_end(self._write_and_commit(topic, partition, entries, epoch,
                                                        pass_behind))

    async def _write_and_commit(self, topic: str, partition: int, entries: EntryColumns,
                                epoch: int, pass_behind: bool) -> SegmentInfo:
        info = await write_segment(self.store, topic, partition, entries, self.settings.segment,
                                   epoch)
        keys, args = commit_call(info, epoch, pass_behind)
        slot = slot_of(topic, partition)

        async def commit() -> Any:
            return await run_script(self._lanes, self._router.node_for_slot(slot), COMMIT, keys,
                                    args)

        try:
            await self._router.call("archive_commit", self._router.settings.write_deadline_s,
                                    commit)
        except Exception as exc:
            conflict = conflict_of(exc.__cause__ or exc)
            if conflict is None:
                raise
            await self.store.delete(info.name)  # ours, and never to be committed
            raise conflict from exc
        return info

    async def _oldest(self, topic: str, partition: int,
                      until: str | None) -> EntryColumns | None:
        """The oldest entries of the stream as columns, cut at the segment's entry and byte caps;
        None when there is none. Pages come on a connection of their own, read from the reply's
        bytes straight into Arrow buffers, the event loop free between them."""
        slot = slot_of(topic, partition)
        log = log_key(topic, partition)

        async def fetch(start: str, count: int) -> PageColumns:
            payload = encode_command(("XRANGE", log, start, until or "+", "COUNT", count))

            async def op() -> PageColumns:
                page: PageColumns = await self._lanes.execute_shaped(
                    self._router.node_for_slot(slot), payload, PAGE_SHAPE, exclusive=True)
                return page

            return await self._router.call("archive_read", self._router.settings.read_deadline_s,
                                           op)

        pages = await oldest_pages(fetch, self.settings.segment_max_entries,
                                   self.settings.segment_max_bytes)
        return entry_columns(pages) if pages else None

    async def read(self, topic: str, partition: int, start: str, limit: int,
                   decode: Callable[[int, Any], list[StoredEntry]] = decode_raw_entries,
                   ) -> list[StoredEntry]:
        """Up to ``limit`` entries from ``start`` (XRANGE syntax: ``-``, ``(<offset>``, or
        ``<offset>`` inclusive), archived ones first, then the stream's, in offset order. A step
        into the stream asks the manifest and the stream in one transaction, so a move committed
        meanwhile cannot open a gap between them: one round trip for a read in the stream. A start
        below the archive's last offset seen asks the manifest alone."""
        after = _exclusive(start)
        entries: list[StoredEntry] = []
        while len(entries) < limit:
            refs = (await self._segment_from(topic, partition, start)
                    if self._below_tip(topic, partition, after) else [])
            if not refs:
                first, hot = await self._manifest_and_stream(topic, partition, start,
                                                             limit - len(entries))
                refs = segment_refs(first)
                if not refs:
                    return entries + decode(partition, hot or [])
            self._tips[(topic, partition)] = refs[0].last_offset
            entries += await read_range(self.store, refs[0].name, after=after,
                                        limit=limit - len(entries))
            after = refs[0].last_offset
            start = "(" + after
        return entries

    async def entries_at(self, topic: str, partition: int,
                         offsets: list[str]) -> dict[str, StoredEntry]:
        """The archived entries at ``offsets`` by offset (those no segment holds are missing):
        each segment that holds some read once, over the range they span."""
        wanted = sorted(set(offsets), key=offset_key)
        found: dict[str, StoredEntry] = {}
        while wanted:
            refs = await self._segment_from(topic, partition, wanted[0])
            if not refs:
                break
            ref = refs[0]
            inside = [o for o in wanted if offset_key(o) <= offset_key(ref.last_offset)]
            entries = await read_range(self.store, ref.name, after=_before(inside[0]),
                                       until=inside[-1])
            asked = set(inside)
            found.update((entry.offset, entry) for entry in entries if entry.offset in asked)
            wanted = wanted[len(inside):]
        return found

    async def archived_after(self, topic: str, partition: int, after: str,
                             limit: int) -> list[list[Any]]:
        """Up to ``limit`` archived entries after ``after``, none from the stream, as the
        ``[id, fields]`` items XRANGE would have returned: what a catch-up stream is filled
        with."""
        items: list[list[Any]] = []
        while len(items) < limit:
            refs = await self._segment_from(topic, partition, "(" + after)
            if not refs:
                break
            items += await read_raw_range(self.store, refs[0].name, after=after,
                                          limit=limit - len(items))
            after = refs[0].last_offset
        return items

    def _below_tip(self, topic: str, partition: int, after: str | None) -> bool:
        tip = self._tips.get((topic, partition))
        return tip is not None and (after is None or offset_key(after) < offset_key(tip))

    async def _segment_from(self, topic: str, partition: int, start: str) -> list[SegmentRef]:
        (items,) = await self._on_partition(
            "archive_segments", topic, partition,
            [("XRANGE", segments_key(topic, partition), start, "+", "COUNT", 1)])
        return segment_refs(items)

    async def _manifest_and_stream(self, topic: str, partition: int, start: str,
                                   count: int) -> tuple[Any, Any]:
        """The first segment holding entries from ``start`` and the stream's first ``count``
        from it, read at one instant (MULTI/EXEC)."""
        replies = await self._on_partition(
            "read", topic, partition,
            [("MULTI",), ("XRANGE", segments_key(topic, partition), start, "+", "COUNT", 1),
             ("XRANGE", log_key(topic, partition), start, "+", "COUNT", count), ("EXEC",)])
        first, hot = replies[-1]
        return first, hot

    async def remove_orphans(self, topic: str, partition: int, *, epoch: int) -> int:
        """Delete the partition's segment files the manifest does not name and no later owner
        may still commit (written by this epoch or an earlier one): what a move cut short
        left. Returns how many went."""
        committed = {ref.name for ref in await self.segments(topic, partition)}
        removed = 0
        for name in await self.store.list_segments(topic, partition):
            if name not in committed and parse_segment_name(name).epoch <= epoch:
                await self.store.delete(name)
                removed += 1
        return removed

    async def expiring(self, topic: str, partition: int, *, before: str | None,
                       max_length: int | None) -> list[SegmentRef]:
        """The partition's oldest segments retention takes now (``expired_prefix``), read with the
        archived total and the stream's length at one instant."""
        replies = await self._on_partition(
            "archive_expiring", topic, partition,
            [("MULTI",), ("XRANGE", segments_key(topic, partition), "-", "+", "COUNT",
                          EXPIRE_BATCH),
             ("HGET", archive_key(topic, partition), "entries"),
             ("XLEN", log_key(topic, partition)), ("EXEC",)])
        items, archived, hot = replies[-1]
        return expired_prefix(segment_refs(items), int(archived or 0) + int(hot), before,
                              max_length)

    async def expire(self, topic: str, partition: int,
                     refs: list[SegmentRef]) -> list[SegmentRef]:
        """Drop ``refs`` (the oldest segments, oldest first): their manifest entries in one script
        (no read finds them afterwards; each only while it is still the first), then their files.
        Those dropped; a file left by a failure here is an orphan ``remove_orphans`` deletes."""
        if not refs:
            return []
        keys, args = expire_call(topic, partition, refs)
        slot = slot_of(topic, partition)

        async def drop() -> Any:
            return await run_script(self._lanes, self._router.node_for_slot(slot), EXPIRE, keys,
                                    args)

        dropped = refs[:int(await self._router.call(
            "archive_expire", self._router.settings.write_deadline_s, drop))]
        for ref in dropped:
            await self.store.delete(ref.name)
        return dropped

    async def count_after(self, ref: SegmentRef, offset: str) -> int:
        """How many entries of the segment come after ``offset``."""
        return int((await read_table(self.store, ref.name, ["offset_ms"], after=offset)).num_rows)

    async def drop_partition(self, topic: str, partition: int) -> None:
        """Forget the partition's archive: its manifest first (no read finds the segments
        afterwards), then the files."""
        self._tips.pop((topic, partition), None)
        await self._on_partition("archive_drop", topic, partition,
                                 [("DEL", segments_key(topic, partition),
                                   archive_key(topic, partition))])
        for name in await self.store.list_segments(topic, partition):
            await self.store.delete(name)

    async def drop_topic(self, topic: str) -> None:
        """Every file of the topic (its manifests go with its Redis keys)."""
        self._tips = {key: tip for key, tip in self._tips.items() if key[0] != topic}
        for attempt in range(DROP_ATTEMPTS):
            try:
                await self.store.delete_prefix(topic_dir(topic))
                return
            except ArchiveUnavailable:  # an owner's last move wrote a file meanwhile
                if attempt == DROP_ATTEMPTS - 1:
                    raise
                await asyncio.sleep(DROP_RETRY_S)


async def _to_the_end(work: Coroutine[Any, Any, T]) -> T:
    """``work`` run to its end even when the caller is cancelled meanwhile; the cancel is raised
    once it has ended."""
    task = asyncio.ensure_future(work)
    cancelled = False
    while not task.done():
        try:
            await asyncio.wait({task})  # a cancel of the wait leaves the task running
        except asyncio.CancelledError:
            cancelled = True
    if cancelled:
        if not task.cancelled():
            task.exception()  # retrieved: the cancel is what the caller hears
        raise asyncio.CancelledError
    return task.result()


def _text(raw: Any) -> str:
    return raw.decode() if isinstance(raw, bytes) else str(raw)


def _exclusive(start: str) -> str | None:
    """The XRANGE start as the offset just before it (None: from the first)."""
    if start == "-":
        return None
    if start.startswith("("):
        return start[1:]
    ms, seq = offset_key(start)
    if seq:
        return f"{ms}-{seq - 1}"
    return f"{ms - 1}-{MAX_SEQ}" if ms else None


def _before(offset: str) -> str | None:
    """The offset right before ``offset`` (None before the very first): an exclusive start that
    includes it."""
    ms, seq = offset_key(offset)
    if seq:
        return f"{ms}-{seq - 1}"
    return f"{ms - 1}-{MAX_SEQ}" if ms else None
