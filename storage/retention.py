"""Retention trimming of a partition's log, its stream and its archived segments, never silent about
entries a group had not acked."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from storage.archive.catch_up import CatchUp
from storage.archive.manifest import SegmentRef
from storage.archive.tier import ArchiveTier
from storage.cluster import ClusterRouter
from storage.codec import decode_offset, offset_key, validate_offset
from storage.compaction import Compaction
from storage.group_replies import info_row, is_missing_group, text
from storage.key_index import KeyHistory
from storage.keys import log_key, slot_of_key
from storage.models import TrimReport
from storage.wire.errors import ResponseError
from storage.wire.lanes import NodeLanes

_PAGE = 1000


def offset_for_time(ms: int) -> str:
    """The smallest offset at or after a time (epoch ms): entries older than ``ms`` sort below
    it."""
    return f"{max(0, ms)}-0"


def after(offset: str) -> str:
    """The smallest id greater than ``offset``."""
    ms, seq = offset_key(offset)
    return f"{ms}-{seq + 1}"


class RedisRetention:
    """Trims partition streams on a Redis Cluster, sharing the ClusterRouter of a RedisStreamStore.

    Take it from ``RedisStreamStore.retention``; it owns no connections of its own.

    A trim removes every entry older than a *cut* id: ``min_offset`` (time retention:
    ``offset_for_time``) and/or the id of the entry at position ``len - max_length`` (length
    retention), whichever is later. Before trimming, each consumer group's unacked entries below the
    cut are counted: pending entries (delivered, not acked) and entries after the group's
    last-delivered id (never delivered). Retention wins, but the caller gets the counts to record as
    a metric and an event.

    The trim is exact (``XTRIM MINID = cut``), not ``~``: an approximate trim stops at a macro-node
    boundary, so the counted entries would not be the removed ones and the rest would be counted
    again on the next run. The exact trim costs one partial node rewrite on top of what ``~``
    removes.

    Only entries still in the stream are counted (pending ids of entries trimmed earlier are
    skipped), so repeated trims never count an entry twice. Counting and trimming are separate
    commands: an entry acked in between is still counted (an over-count, never an under-count). A
    trim retried after a lost reply reports what the retry removed.

    With an ``archive`` tier the same trim then drops its oldest whole segments
    (``ArchiveTier.expiring``): those whose last offset is before ``min_offset``, and those the
    whole log (archived and stream entries) can lose while keeping ``max_length``; a segment
    straddling the cut stays whole, so reads may return a few entries older than the retention.
    The archive duty never moves what a group has not consumed, but a group may still be
    positioned before an archived entry (created from the start after the move): each group's
    unacked entries in the dropped segments are counted the same way before they go.
    """

    def __init__(self, router: ClusterRouter, lanes: NodeLanes,
                 archive: ArchiveTier | None = None) -> None:
        self._router = router
        self._lanes = lanes
        self._settings = router.settings
        self._archive = archive

    async def _on(self, key: str, command: tuple[Any, ...]) -> Any:
        """One command on the node connection of the primary of ``key``'s slot (asked at each
        attempt); an error reply is raised."""
        return await self._router.execute_on(self._lanes, slot_of_key(key), command)

    async def trim(
        self, topic: str, partition: int, *, min_offset: str | None = None,
        max_length: int | None = None
    ) -> TrimReport:
        """Remove entries below ``min_offset`` and/or beyond the newest ``max_length``; report what
        went.

        ``TrimReport.unacked_removed`` names every group that lost entries it had not acked, with
        how many.
        """
        _check_bounds(min_offset, max_length)
        report = await self._trim_stream(topic, partition, min_offset, max_length)
        if self._archive is None:
            return report
        return await self._expire_archive(self._archive, report, topic, min_offset, max_length)

    async def preview(
        self, topic: str, partition: int, *, min_offset: str | None = None,
        max_length: int | None = None
    ) -> TrimReport:
        """What ``trim`` would remove now, counted by reads alone (a dry run writes nothing).

        The stream's figures are exact at the instant of the reads; the archive's segments are
        chosen before the stream is trimmed, so their length rule is an estimate.
        """
        _check_bounds(min_offset, max_length)
        key = log_key(topic, partition)
        read_s = self._settings.read_deadline_s
        cut = await self._router.call("trim_preview", read_s,
                                      lambda: self._cut(key, min_offset, max_length))
        report = TrimReport(partition, 0)
        if cut is not None:
            removed = await self._router.call("trim_preview", read_s,
                                              lambda: self._count_entries(key, "-", "(" + cut))
            unacked = await self._router.call("trim_preview", read_s,
                                              lambda: self._count_unacked(key, cut))
            report = TrimReport(partition, removed, unacked)
        if self._archive is None:
            return report
        refs = await self._archive.expiring(topic, partition, before=min_offset,
                                            max_length=max_length)
        return await self._with_archived(self._archive, report, topic, refs)

    async def count_between(self, topic: str, partition: int, after: str, through: str,
                            limit: int) -> int:
        """How many entries of the partition's stream have ids in (``after``, ``through``],
        counting no further than ``limit`` (a bounded read: ``limit`` means at least that)."""
        key = log_key(topic, partition)
        return await self._router.call(
            "count_between", self._settings.read_deadline_s,
            lambda: self._count_entries(key, "(" + after, through, limit))

    async def _trim_stream(self, topic: str, partition: int, min_offset: str | None,
                           max_length: int | None) -> TrimReport:
        key = log_key(topic, partition)
        read_s, write_s = self._settings.read_deadline_s, self._settings.write_deadline_s
        cut = await self._router.call("trim", read_s,
                                      lambda: self._cut(key, min_offset, max_length))
        if cut is None:
            await self._sweep_key_indexes(topic, partition)
            return TrimReport(partition, 0)
        unacked = await self._router.call("trim", read_s, lambda: self._count_unacked(key, cut))
        removed = await self._router.call(
            "trim", write_s, lambda: self._on(key, ("XTRIM", key, "MINID", cut))
        )
        await self._sweep_key_indexes(topic, partition)
        return TrimReport(partition, int(removed), unacked)

    async def _expire_archive(self, archive: ArchiveTier, report: TrimReport, topic: str,
                              min_offset: str | None, max_length: int | None) -> TrimReport:
        """The stream's trim ``report`` with the archive's oldest segments dropped after it."""
        partition = report.partition
        refs = await archive.expiring(topic, partition, before=min_offset, max_length=max_length)
        if not refs:
            return report
        counted = await self._with_archived(archive, report, topic, refs)
        dropped = await archive.expire(topic, partition, refs)
        return dataclasses.replace(counted, archived_removed=sum(ref.count for ref in dropped),
                                   segments_removed=len(dropped))

    async def _with_archived(self, archive: ArchiveTier, report: TrimReport, topic: str,
                             refs: list[SegmentRef]) -> TrimReport:
        """``report`` with the segments ``refs`` going too, and each group's unacked entries in
        them."""
        if not refs:
            return report
        partition = report.partition
        unacked = await self._router.call(
            "trim", self._settings.read_deadline_s,
            lambda: self._count_archived_unacked(archive, topic, partition, refs))
        lost = dict(report.unacked_removed)
        for group, count in unacked.items():
            lost[group] = lost.get(group, 0) + count
        return TrimReport(partition, report.removed, lost, sum(ref.count for ref in refs),
                          len(refs))

    async def _count_archived_unacked(self, archive: ArchiveTier, topic: str, partition: int,
                                      refs: list[SegmentRef]) -> dict[str, int]:
        """Per group, the entries of ``refs`` it has not acked: pending ones, and those after its
        last delivered offset; for a group catching up, those after what its catch-up stream
        copied (its pending ones are copies)."""
        counts: dict[str, int] = {}
        catch_up = CatchUp(self._router, self._lanes, archive)
        for group, position in (await catch_up.positions(topic, partition)).items():
            lost = sum([await _undelivered(archive, ref, position) for ref in refs])
            if lost:
                counts[group] = lost
        key = log_key(topic, partition)
        for info in await self._group_infos(key):
            group = text(info["name"])
            delivered = decode_offset(info.get("last-delivered-id")) or "0-0"
            lost = 0
            if int(info.get("pending") or 0):
                lost += await self._count_pending(key, group, refs[0].first_offset,
                                                  after(refs[-1].last_offset))
            for ref in refs:
                lost += await _undelivered(archive, ref, delivered)
            if lost:
                counts[group] = lost
        return counts

    async def compact(self, topic: str, partition: int, lag_ms: int) -> int:
        """A compacted partition's retention: each key's messages superseded for longer than
        ``lag_ms`` go, and tombstones older than that with their keys; how many entries went."""
        return await Compaction(self._router, self._lanes).compact(topic, partition, lag_ms)

    async def _sweep_key_indexes(self, topic: str, partition: int) -> None:
        """Drop the key indexes whose entries are all gone (a trim here or an append's
        ``MAXLEN ~``), and trim those that lost some."""
        await KeyHistory(self._router, self._lanes).sweep(topic, partition)

    async def _cut(self, key: str, min_offset: str | None, max_length: int | None) -> str | None:
        """The id below which entries go, or None when nothing would be removed."""
        first = await self._first(key)
        if first is None:
            return None
        cuts = [min_offset] if min_offset is not None else []
        if max_length is not None:
            length_cut = await self._length_cut(key, max_length)
            if length_cut is not None:
                cuts.append(length_cut)
        cut = max(cuts, key=offset_key, default=None)
        return cut if cut is not None and offset_key(cut) > offset_key(first) else None

    async def _length_cut(self, key: str, max_length: int) -> str | None:
        """The id of the entry at position ``len - max_length`` (the oldest one kept)."""
        length = int(await self._on(key, ("XLEN", key)))
        drop = length - max_length
        if drop <= 0:
            return None
        if max_length == 0:
            newest = await self._on(key, ("XREVRANGE", key, "+", "-", "COUNT", 1))
            return after(_id_of(newest[0])) if newest else None
        # Read whichever end is shorter: the dropped prefix plus one, or the kept suffix.
        if drop < max_length:
            items = await self._on(key, ("XRANGE", key, "-", "+", "COUNT", drop + 1))
        else:
            items = await self._on(key, ("XREVRANGE", key, "+", "-", "COUNT", max_length))
        return _id_of(items[-1]) if items else None

    async def _first(self, key: str) -> str | None:
        items = await self._on(key, ("XRANGE", key, "-", "+", "COUNT", 1))
        return _id_of(items[0]) if items else None

    async def _count_unacked(self, key: str, cut: str) -> dict[str, int]:
        first = await self._first(key)
        if first is None or offset_key(first) >= offset_key(cut):
            return {}
        counts: dict[str, int] = {}
        for info in await self._group_infos(key):
            lost = await self._group_unacked(key, info, first, cut)
            if lost:
                counts[text(info["name"])] = lost
        return counts

    async def _group_unacked(self, key: str, info: Mapping[str, Any], first: str, cut: str) -> int:
        group = text(info["name"])
        last_delivered = decode_offset(info.get("last-delivered-id")) or "0-0"
        lost = 0
        if int(info.get("pending") or 0):
            lost += await self._count_pending(key, group, first, cut)
        delivered = offset_key(last_delivered)
        if delivered < offset_key(cut):
            start = first if delivered < offset_key(first) else "(" + last_delivered
            lost += await self._count_entries(key, start, "(" + cut)
        return lost

    async def _count_pending(self, key: str, group: str, start: str, cut: str) -> int:
        """Pending entries of ``group`` with ids in [start, cut)."""
        total = 0
        while True:
            try:
                rows = await self._on(key, ("XPENDING", key, group, start, "(" + cut, _PAGE))
            except ResponseError as exc:
                if is_missing_group(exc):  # destroyed meanwhile: it has nothing left to lose
                    return total
                raise
            total += len(rows)
            if len(rows) < _PAGE:
                return total
            start = "(" + text(rows[-1][0])

    async def _count_entries(self, key: str, start: str, end: str,
                             limit: int | None = None) -> int:
        """Stream entries with ids from ``start`` to ``end`` (each inclusive, or exclusive with a
        leading '('), no more than ``limit`` when given."""
        total = 0
        while limit is None or total < limit:
            page = _PAGE if limit is None else min(_PAGE, limit - total)
            items = list(await self._on(key, ("XRANGE", key, start, end, "COUNT", page)) or [])
            total += len(items)
            if len(items) < page:
                return total
            start = "(" + _id_of(items[-1])
        return total

    async def _group_infos(self, key: str) -> list[Mapping[str, Any]]:
        try:
            return [info_row(flat) for flat in await self._on(key, ("XINFO", "GROUPS", key))]
        except ResponseError as exc:
            if is_missing_group(exc):
                return []
            raise


async def _undelivered(archive: ArchiveTier, ref: SegmentRef, delivered: str) -> int:
    """The segment's entries after a group's last delivered offset."""
    if offset_key(delivered) >= offset_key(ref.last_offset):
        return 0
    if offset_key(delivered) < offset_key(ref.first_offset):
        return ref.count
    return await archive.count_after(ref, delivered)


def _check_bounds(min_offset: str | None, max_length: int | None) -> None:
    if min_offset is not None:
        validate_offset(min_offset)
    if max_length is not None and max_length < 0:
        raise ValueError(f"max_length must be >= 0, got {max_length}")


def _id_of(item: Any) -> str:
    return text(item[0])


__all__ = ["RedisRetention", "offset_for_time"]
