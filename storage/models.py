"""Plain values that cross the storage boundary."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field


class Acks(enum.Enum):
    """How much durability a publish waits for (docs/architecture.md, acks)."""

    NONE = "0"  # accepted by the gateway's batcher only
    LEADER = "1"  # written on the primary owning the partition's slot
    ALL = "all"  # written and acknowledged by min_insync_replicas replicas through WAIT

    __hash__ = object.__hash__  # members are singletons compared by identity; Enum's own hash is a Python call


class ValueFormat(enum.Enum):
    """How the gateway should render a stored value: JSON text or opaque bytes."""

    JSON = "j"
    BINARY = "b"

    __hash__ = object.__hash__  # as Acks: the publish path hashes it several times per partition written


@dataclass(frozen=True, slots=True)
class Record:
    """One message to append to one partition."""

    partition: int
    value: bytes
    value_format: ValueFormat = ValueFormat.BINARY
    key: bytes | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    idempotency_key: str | None = None


_new_record = object.__new__
_RECORD_SETTERS = tuple(getattr(Record, name).__set__ for name in Record.__slots__)


def new_record(partition: int, value: bytes, value_format: ValueFormat, key: bytes | None,
               headers: Mapping[str, str], idempotency_key: str | None) -> Record:
    """``Record(...)`` for the publish hot path: filled through its slots (the frozen dataclass __init__ costs
    about twice as much); the record is as immutable afterwards."""
    set_partition, set_value, set_format, set_key, set_headers, set_idempotency_key = _RECORD_SETTERS
    record = _new_record(Record)
    set_partition(record, partition)
    set_value(record, value)
    set_format(record, value_format)
    set_key(record, key)
    set_headers(record, headers)
    set_idempotency_key(record, idempotency_key)
    return record


@dataclass(frozen=True, slots=True)
class PlainRecords:
    """Records with a value and an optional key and nothing else (the common publish), as columns.

    Record ``i`` is ``Record(partitions[i], values[i], value_format, keys[i])``: the same stream entries as
    those records (``as_records``), without an object per record on the publish hot path.
    """

    partitions: list[int]
    values: list[bytes]
    keys: list[bytes | None]
    value_format: ValueFormat = ValueFormat.JSON

    def __len__(self) -> int:
        return len(self.values)

    def as_records(self) -> list[Record]:
        """The same records as objects."""
        fmt = self.value_format
        return [new_record(partition, value, fmt, key, {}, None)
                for partition, value, key in zip(self.partitions, self.values, self.keys, strict=True)]


@dataclass(frozen=True, slots=True)
class AppendResult:
    """Where a record landed; ``duplicate`` is true when an idempotent retry found the first write."""

    partition: int
    offset: str
    duplicate: bool = False


@dataclass(frozen=True, slots=True)
class StoredEntry:
    """One entry read back from a partition."""

    partition: int
    offset: str
    value: bytes
    value_format: ValueFormat
    key: bytes | None
    headers: Mapping[str, str]
    timestamp_ms: int


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    """Size and bounds of one partition's stream; offsets are None when it is empty."""

    partition: int
    length: int
    first_offset: str | None
    last_offset: str | None


@dataclass(frozen=True, slots=True)
class AppendOptions:
    """Per-topic write options: retention by length (``MAXLEN ~``) and the idempotency window."""

    acks: Acks = Acks.LEADER
    max_length: int | None = None
    dedup_ttl_ms: int = 24 * 3600 * 1000


@dataclass(frozen=True, slots=True)
class Delivery:
    """An entry handed to a consumer of a group, with how many times it has been delivered (1 = first)."""

    entry: StoredEntry
    delivery_count: int


_DELIVERY_SETTERS = tuple(getattr(Delivery, name).__set__ for name in ("entry", "delivery_count"))


def first_deliveries(entries: list[StoredEntry]) -> list[Delivery]:
    """``[Delivery(entry, 1) for entry in entries]`` for the group read path, filled through the slots (the
    frozen dataclass ``__init__`` costs about twice as much); as immutable afterwards."""
    new, (set_entry, set_count) = object.__new__, _DELIVERY_SETTERS
    deliveries: list[Delivery] = []
    for entry in entries:
        delivery = new(Delivery)
        set_entry(delivery, entry)
        set_count(delivery, 1)
        deliveries.append(delivery)
    return deliveries


@dataclass(frozen=True, slots=True)
class PendingEntry:
    """An entry delivered to a group but not acked yet (one row of XPENDING)."""

    partition: int
    offset: str
    consumer: str
    idle_ms: int
    delivery_count: int


@dataclass(frozen=True, slots=True)
class GroupPartitionState:
    """A group's position on one partition; ``lag`` is None when Redis cannot tell (never guessed as 0)."""

    partition: int
    exists: bool
    last_delivered_offset: str | None
    pending: int
    oldest_pending_offset: str | None
    lag: int | None


@dataclass(frozen=True, slots=True)
class ScheduledResult:
    """Where a delayed message waits until ``due_ms`` (epoch ms).

    ``duplicate`` is true when an idempotent retry found the first schedule; then ``schedule_id`` and
    ``due_ms`` are the first schedule's. When that message was already promoted, ``offset`` is its stream
    offset, ``schedule_id`` is empty and ``due_ms`` is the offset's timestamp.
    """

    partition: int
    schedule_id: str
    due_ms: int
    duplicate: bool = False
    offset: str | None = None


@dataclass(frozen=True, slots=True)
class TrimReport:
    """What a retention trim removed from one partition.

    ``unacked_removed`` maps each group that lost entries it had not acked (pending, or never delivered) to
    how many; groups that lost nothing unacked are absent.
    """

    partition: int
    removed: int
    unacked_removed: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ConsumerInfo:
    """One consumer of a group on one partition (a row of XINFO CONSUMERS)."""

    name: str
    pending: int
    idle_ms: int
