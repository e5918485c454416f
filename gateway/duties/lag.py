"""Lag of every group on a partition: entries not yet delivered, oldest un-acked and oldest unread age.

Unknown values are exported as NaN and returned as None, never as 0.
"""

from __future__ import annotations

import contextlib
import math
import time
from dataclasses import dataclass

from gateway.metrics import GatewayMetrics
from storage.groups_protocol import GroupStore
from storage.protocol import StreamStore


@dataclass(frozen=True, slots=True)
class GroupLag:
    """One group's lag on one partition."""

    group: str
    lag_entries: int | None
    oldest_unacked_age_ms: int | None
    oldest_unread_age_ms: int | None


def age_ms(offset: str | None, now_ms: int) -> int | None:
    """How old the entry with this stream ID is (its time part), or None without an offset."""
    return None if offset is None else max(0, now_ms - int(offset.split("-")[0]))


async def measure_lag(store: StreamStore, groups: GroupStore, topic: str, partition: int) -> list[GroupLag]:
    """The lag of every group that exists on the partition."""
    now_ms = int(time.time() * 1000)
    result = []
    for group in await groups.groups(topic, partition):
        state = await groups.state(topic, partition, group)
        unread = await store.read(topic, partition, after=state.last_delivered_offset, limit=1) \
            if state.last_delivered_offset is not None else []
        unread_age = age_ms(unread[0].offset, now_ms) if unread else (0 if state.lag == 0 else None)
        unacked_age = 0 if state.pending == 0 else age_ms(state.oldest_pending_offset, now_ms)
        result.append(GroupLag(group, state.lag, unacked_age, unread_age))
    return result


def export_lag(metrics: GatewayMetrics, topic: str, partition: int, lags: list[GroupLag]) -> None:
    """Set the lag gauges of a partition (NaN where unknown)."""
    for lag in lags:
        labels = (topic, lag.group, str(partition))
        metrics.group_lag_entries.labels(*labels).set(_or_nan(lag.lag_entries))
        metrics.group_oldest_unacked_age.labels(*labels).set(_seconds_or_nan(lag.oldest_unacked_age_ms))
        metrics.group_oldest_unread_age.labels(*labels).set(_seconds_or_nan(lag.oldest_unread_age_ms))


def forget_lag(metrics: GatewayMetrics, topic: str, partition: int, groups: list[str]) -> None:
    """Drop a partition's lag gauges (another node owns it now)."""
    for group in groups:
        labels = (topic, group, str(partition))
        for gauge in (metrics.group_lag_entries, metrics.group_oldest_unacked_age, metrics.group_oldest_unread_age):
            with contextlib.suppress(KeyError):
                gauge.remove(*labels)


def forget_length(metrics: GatewayMetrics, topic: str, partition: int) -> None:
    """Drop a partition's length gauge (another node owns it now)."""
    with contextlib.suppress(KeyError):
        metrics.partition_length.remove(topic, str(partition))


def _or_nan(value: int | None) -> float:
    return math.nan if value is None else float(value)


def _seconds_or_nan(value_ms: int | None) -> float:
    return math.nan if value_ms is None else value_ms / 1000
