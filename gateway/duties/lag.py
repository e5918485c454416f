"""Lag of every group on a partition: entries not yet delivered, oldest un-acked and oldest unread
age; and how old the partition's hot tier is (its oldest entry still in Redis).

The node's ``LagExporter`` measures every owned partition of a topic from one overview round
(``storage.overview``) and asks Redis more only for groups that are behind or hold pending entries.

Unknown values are exported as NaN and returned as None, never as 0.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from gateway.duties.ports import StreamReader
from gateway.observe.metrics import GatewayMetrics
from storage.groups_protocol import GroupStore
from storage.overview import PartitionOverview


@dataclass(frozen=True, slots=True)
class GroupLag:
    """One group's lag on one partition."""

    group: str
    lag_entries: int | None
    oldest_unacked_age_ms: int | None
    oldest_unread_age_ms: int | None
    pending: int = 0
    last_delivered_offset: str | None = None
    entries_read: int | None = None  # entries ever delivered to the group (None: unknown)


class VerdictJudge(Protocol):
    """Judges the groups of a partition from their lag (``duties.verdict_duty``)."""

    async def judge(self, topic: str, partition: int, lags: Sequence[GroupLag]) -> None:
        """Judge, export and post the verdicts of a partition's groups."""
        ...

    def forget(self, topic: str, partition: int) -> None:
        """Drop what is kept of a partition (another node owns it now)."""
        ...


def age_ms(offset: str | None, now_ms: int) -> int | None:
    """How old the entry with this stream ID is (its time part), or None without an offset."""
    return None if offset is None else max(0, now_ms - int(offset.split("-")[0]))


async def lag_from_overview(streams: StreamReader, groups: GroupStore, topic: str,
                            overview: PartitionOverview) -> list[GroupLag]:
    """The lag of every group in a partition overview; asks Redis more only where the overview
    cannot tell: the oldest pending entry of a group with pending entries, the first unread entry of
    a group behind."""
    now_ms = int(time.time() * 1000)
    partition = overview.partition
    result = []
    for group, state in overview.groups.items():
        if state.pending and state.oldest_pending_offset is None:
            state = await groups.state(topic, partition, group)
        # lag 0: nothing is unread
        behind = state.last_delivered_offset is not None and state.lag != 0
        unread = (await streams.read(topic, partition, after=state.last_delivered_offset, limit=1)
                  if behind else [])
        unread_age = age_ms(unread[0].offset, now_ms) if unread else (0 if state.lag == 0 else None)
        unacked_age = 0 if state.pending == 0 else age_ms(state.oldest_pending_offset, now_ms)
        result.append(GroupLag(group, state.lag, unacked_age, unread_age, state.pending,
                               state.last_delivered_offset, state.entries_read))
    return result


def export_lag(metrics: GatewayMetrics, topic: str, partition: int, lags: list[GroupLag]) -> None:
    """Set the lag gauges of a partition (NaN where unknown)."""
    for lag in lags:
        labels = (topic, lag.group, str(partition))
        metrics.group_lag_entries.labels(*labels).set(_or_nan(lag.lag_entries))
        metrics.group_oldest_unacked_age.labels(*labels).set(
            _seconds_or_nan(lag.oldest_unacked_age_ms))
        metrics.group_oldest_unread_age.labels(*labels).set(
            _seconds_or_nan(lag.oldest_unread_age_ms))


def forget_lag(metrics: GatewayMetrics, topic: str, partition: int, groups: list[str]) -> None:
    """Drop a partition's lag gauges (another node owns it now)."""
    for group in groups:
        labels = (topic, group, str(partition))
        for gauge in (metrics.group_lag_entries, metrics.group_oldest_unacked_age,
                      metrics.group_oldest_unread_age):
            with contextlib.suppress(KeyError):
                gauge.remove(*labels)


def hot_age_s(overview: PartitionOverview, now_ms: int) -> float:
    """How old the partition's oldest entry still in Redis is: 0 when the stream is empty, NaN
    when the overview did not read its first entry."""
    if overview.length == 0:
        return 0.0
    return _seconds_or_nan(age_ms(overview.first_offset, now_ms))


def export_partition(metrics: GatewayMetrics, topic: str, overview: PartitionOverview) -> None:
    """Set a partition's length and hot age gauges."""
    labels = (topic, str(overview.partition))
    metrics.partition_length.labels(*labels).set(overview.length)
    metrics.archive_hot_age.labels(*labels).set(hot_age_s(overview, int(time.time() * 1000)))


def forget_partition(metrics: GatewayMetrics, topic: str, partition: int) -> None:
    """Drop a partition's length and hot age gauges (another node owns it now)."""
    for gauge in (metrics.partition_length, metrics.archive_hot_age):
        with contextlib.suppress(KeyError):
            gauge.remove(topic, str(partition))


def _or_nan(value: int | None) -> float:
    return math.nan if value is None else float(value)


def _seconds_or_nan(value_ms: int | None) -> float:
    return math.nan if value_ms is None else value_ms / 1000


class LagExporter:
    """The lag, length and hot age gauges of the partitions this node owns, measured a topic at a
    time; with ``verdicts``, each group's verdict judged from the same round."""

    def __init__(self, streams: StreamReader, groups: GroupStore, metrics: GatewayMetrics,
                 verdicts: VerdictJudge | None = None) -> None:
        self.streams, self.groups, self.metrics = streams, groups, metrics
        self.verdicts = verdicts
        # groups with gauges, per exported partition
        self._seen: dict[tuple[str, int], set[str]] = {}

    async def export_topic(self, topic: str, partitions: list[int],
                           still_owned: Callable[[str, int], bool]) -> None:
        """Measure the partitions (one overview round) and set their gauges, unless ownership moved
        meanwhile."""
        overviews = await self.streams.partition_overviews(topic, partitions)
        for partition in partitions:
            overview = overviews[partition]
            lags = await lag_from_overview(self.streams, self.groups, topic, overview)
            if not still_owned(topic, partition):
                continue
            groups = {lag.group for lag in lags}
            forget_lag(self.metrics, topic, partition,
                       sorted(self._seen.get((topic, partition), set()) - groups))
            self._seen[(topic, partition)] = groups
            export_lag(self.metrics, topic, partition, lags)
            export_partition(self.metrics, topic, overview)
            if self.verdicts is not None:
                await self.verdicts.judge(topic, partition, lags)

    def forget(self, topic: str, partition: int) -> None:
        """Drop a partition's gauges (another node owns it now)."""
        forget_lag(self.metrics, topic, partition,
                   sorted(self._seen.pop((topic, partition), set())))
        forget_partition(self.metrics, topic, partition)
        if self.verdicts is not None:
            self.verdicts.forget(topic, partition)

    def exported(self) -> list[tuple[str, int]]:
        """The partitions with gauges set by this exporter."""
        return list(self._seen)
