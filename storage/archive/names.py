"""Where a segment lives in the archive: names built from a topic, a partition, the segment's
first offset and the ownership epoch that wrote it, so that listing a partition in lexicographic
order lists it in offset order and two owners never write the same file."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote, unquote

from storage.codec import offset_key, validate_offset

SUFFIX = ".parquet"
_DIGITS = 20  # 2**64 - 1 has 20 digits: any stream ID part fits, zero-padded


def escape_topic(topic: str) -> str:
    """A topic name as one safe path segment: percent-encoding (RFC 3986) of its UTF-8 bytes except
    ``A-Z a-z 0-9 _ . - ~``, and of a leading ``.`` too, so that no topic becomes ``.``, ``..`` or a
    hidden name. ``unescape_topic`` reverses it; distinct topics never share a segment."""
    if not topic:
        raise ValueError("a topic name is not empty")
    escaped = quote(topic, safe="")
    return "%2E" + escaped[1:] if escaped.startswith(".") else escaped


def unescape_topic(segment: str) -> str:
    """The topic name ``escape_topic`` escaped into ``segment``."""
    return unquote(segment, errors="strict")


def topic_dir(topic: str) -> str:
    """The folder holding every segment of ``topic`` (relative to the store's root)."""
    return escape_topic(topic)


def partition_dir(topic: str, partition: int) -> str:
    """The folder holding the segments of one partition (relative to the store's root)."""
    if partition < 0:
        raise ValueError(f"a partition is not negative: {partition}")
    return f"{escape_topic(topic)}/{partition}"


def segment_name(topic: str, partition: int, first_offset: str, epoch: int = 0) -> str:
    """The segment of ``topic``'s ``partition`` starting at ``first_offset``, written by the owner
    of ownership epoch ``epoch``: ``<topic escaped>/<partition>/<ms:020>-<seq:020>-e<epoch:020>
    .parquet`` (an owner that lost the partition writes a name nobody commits, never over the
    committed segment of its successor)."""
    ms, seq = offset_key(validate_offset(first_offset))
    if epoch < 0:
        raise ValueError(f"an epoch is not negative: {epoch}")
    return (f"{partition_dir(topic, partition)}/{ms:0{_DIGITS}d}-{seq:0{_DIGITS}d}"
            f"-e{epoch:0{_DIGITS}d}{SUFFIX}")


@dataclass(frozen=True, slots=True)
class SegmentName:
    """What a segment's name says: its topic, partition, first offset and writer's epoch."""

    topic: str
    partition: int
    first_offset: str
    epoch: int


def parse_segment_name(name: str) -> SegmentName:
    """The parts of a name ``segment_name`` built; ValueError for any other name (it must be the
    canonical spelling, so that one segment never has two names)."""
    try:
        topic, partition, base = name.split("/")
        ms, seq, epoch = base.removesuffix(SUFFIX).split("-")
        parsed = SegmentName(unescape_topic(topic), int(partition), f"{int(ms)}-{int(seq)}",
                             int(epoch.removeprefix("e")))
        canonical = segment_name(parsed.topic, parsed.partition, parsed.first_offset,
                                 parsed.epoch)
    except ValueError as exc:
        raise ValueError(f"not a segment name: {name!r}") from exc
    if canonical != name:
        raise ValueError(f"not a segment name: {name!r}")
    return parsed


def is_segment_file(basename: str) -> bool:
    """True for a finished segment's file name (temporary files start with a dot)."""
    return basename.endswith(SUFFIX) and not basename.startswith(".")

