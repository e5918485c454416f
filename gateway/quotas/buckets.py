"""The arithmetic of the retained-bytes ledger: minute buckets per topic, the cut below which a
topic retains nothing, and what a subject's buckets still count."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from storage.models import PartitionInfo

BUCKET_MS = 60_000
SEPARATOR = "\x1f"  # never in a topic name


@dataclass(frozen=True, slots=True)
class TopicSpan:
    """What a topic retains now: its incarnation, its retention and the ms of the oldest offset
    any of its partitions holds (None: it holds nothing)."""

    created_at_ms: int
    retention_ms: int
    log_start_ms: int | None

    def cut_ms(self, now_ms: int) -> int | None:
        """Bytes charged to buckets ending at or before the cut are gone (None: all are)."""
        if self.log_start_ms is None:
            return None
        return max(now_ms - self.retention_ms, self.log_start_ms)


@dataclass(slots=True)
class Tally:
    """A subject's buckets read against the topics' spans: the bytes still retained, when the
    oldest counted bucket leaves retention, and the fields that can never count again."""

    used: int = 0
    leaves_at_ms: int | None = None
    dead: dict[str, int] = field(default_factory=dict)


def bucket_end_ms(now_ms: int) -> int:
    """The end of the bucket a charge at ``now_ms`` goes to (a bucket ends on a BUCKET_MS
    multiple)."""
    return -(-now_ms // BUCKET_MS) * BUCKET_MS


def field_of(topic: str, created_at_ms: int, end_ms: int) -> str:
    """The ledger field of a topic incarnation's bucket."""
    return f"{topic}{SEPARATOR}{created_at_ms}{SEPARATOR}{end_ms}"


def parse_field(name: str) -> tuple[str, int, int] | None:
    """(topic, created_at_ms, end_ms) of a ledger field; None when it is not one."""
    parts = name.rsplit(SEPARATOR, 2)
    if len(parts) != 3 or not parts[1].isdigit() or not parts[2].isdigit():
        return None
    return parts[0], int(parts[1]), int(parts[2])


def topics_of(buckets: Mapping[str, int]) -> set[str]:
    """The topics a subject's buckets name."""
    return {parsed[0] for parsed in map(parse_field, buckets) if parsed is not None}


def log_start_ms(infos: Sequence[PartitionInfo]) -> int | None:
    """The ms of the oldest offset any partition still holds, its archive first (None: the topic
    holds nothing). Offsets are ``<ms>-<seq>`` stream ids."""
    starts = [_ms_of(first) for first in map(_first_offset, infos) if first is not None]
    return min(starts) if starts else None


def tally(buckets: Mapping[str, int], spans: Mapping[str, TopicSpan | None],
          now_ms: int) -> Tally:
    """What ``buckets`` still count given each topic's span (a topic missing from ``spans`` or
    mapped to None no longer exists)."""
    result = Tally()
    for name, nbytes in buckets.items():
        parsed = parse_field(name)
        span = None if parsed is None else spans.get(parsed[0])
        if parsed is None or span is None or not _counts(parsed, span, now_ms):
            result.dead[name] = nbytes
            continue
        result.used += nbytes
        leaves = parsed[2] + span.retention_ms
        if result.leaves_at_ms is None or leaves < result.leaves_at_ms:
            result.leaves_at_ms = leaves
    return result


def _counts(parsed: tuple[str, int, int], span: TopicSpan, now_ms: int) -> bool:
    _, created_at_ms, end_ms = parsed
    if created_at_ms < span.created_at_ms:  # an earlier incarnation of the topic
        return False
    cut = span.cut_ms(now_ms)
    return cut is not None and end_ms > cut


def _first_offset(info: PartitionInfo) -> str | None:
    archived = info.archived
    if archived is not None and archived.first_offset is not None:
        return archived.first_offset
    return info.first_offset


def _ms_of(offset: str) -> int:
    return int(offset.partition("-")[0])
