"""Plain values that cross the storage boundary."""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar, overload


class Acks(enum.Enum):
    """How much durability a publish waits for (docs/architecture.md, acks)."""

    NONE = "0"  # accepted by the gateway's batcher only
    LEADER = "1"  # written on the primary owning the partition's slot
    ALL = "all"  # written and acknowledged by min_insync_replicas replicas through WAIT

    # members are singletons compared by identity; Enum's own hash is a Python call
    __hash__ = object.__hash__


class ValueFormat(enum.Enum):
    """How the gateway should render a stored value: JSON text or opaque bytes."""

    JSON = "j"
    BINARY = "b"

    # as Acks: the publish path hashes it several times per partition written
    __hash__ = object.__hash__


@dataclass(frozen=True, slots=True)
class Record:
    """One message to append to one partition."""

    partition: int
    value: bytes
    value_format: ValueFormat = ValueFormat.BINARY
    key: bytes | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    idempotency_key: str | None = None


# Not frozen: it is built on every publish, where a frozen __init__ costs several times more.
@dataclass(slots=True)
class Records:
    """A batch of records as columns: what every append takes, from the publish route down to Redis.

    Record ``i`` is ``partitions[i]``, ``values[i]`` and ``keys[i]``; ``formats`` is one format for
    every record or one per record; ``headers`` and ``idempotency_keys`` are None when no record has
    any (the common publish, which then costs no object per record). ``batch_key`` (without
    per-record keys) makes the whole batch idempotent: each partition's records are written once,
    under one marker, and a retry of the same batch answers their first offsets. ``key_space``
    is the key space whose key state (indexes, expected positions) the records' keys reach: one
    per batch, a batch comes from one writer (``storage.keys.key_identity``).
    """

    partitions: list[int]
    values: list[bytes]
    keys: list[bytes | None]
    formats: ValueFormat | list[ValueFormat] = ValueFormat.JSON
    headers: Sequence[Mapping[str, str]] | None = None
    idempotency_keys: list[str | None] | None = None
    batch_key: str | None = None
    key_space: bytes = b""

    def __len__(self) -> int:
        return len(self.values)

    @classmethod
    def of(cls, rows: Sequence[Record], key_space: bytes = b"") -> Records:
        """Records given one object each, as columns, their keys in ``key_space``."""
        headers = [row.headers for row in rows]
        idempotency_keys = [row.idempotency_key for row in rows]
        return cls([row.partition for row in rows], [row.value for row in rows],
                   [row.key for row in rows], [row.value_format for row in rows],
                   headers if any(headers) else None,
                   None if all(k is None for k in idempotency_keys) else idempotency_keys,
                   key_space=key_space)

    @classmethod
    def joined(cls, batches: Sequence[Records]) -> Records:
        """Several batches as one, in order."""
        if len(batches) == 1:
            return batches[0]
        if len({b.key_space for b in batches}) > 1:
            raise ValueError("batches of two key spaces are never joined")
        batches = [b.with_record_keys() for b in batches]
        return cls([p for b in batches for p in b.partitions],
                   [v for b in batches for v in b.values], [k for b in batches for k in b.keys],
                   [f for b in batches for f in b.format_column()],
                   _joined_column([b.headers for b in batches], [len(b) for b in batches], {}),
                   _joined_column([b.idempotency_keys for b in batches], [len(b) for b in batches],
                                  None), key_space=batches[0].key_space)

    def with_record_keys(self) -> Records:
        """The same records with a batch key turned into per-record keys ``<batch key>:<i>`` (for
        joining with others); records without a batch key as they are."""
        if self.batch_key is None:
            return self
        keys: list[str | None] = [f"{self.batch_key}:{i}" for i in range(len(self.values))]
        return Records(self.partitions, self.values, self.keys, self.formats, self.headers, keys,
                       key_space=self.key_space)

    def format_column(self) -> list[ValueFormat]:
        """Each record's value format."""
        formats = self.formats
        return [formats] * len(self.values) if isinstance(formats, ValueFormat) else formats

    def taken(self, indexes: Sequence[int]) -> Records:
        """The records at ``indexes``, in that order."""
        values, keys, partitions = self.values, self.keys, self.partitions
        return Records([partitions[i] for i in indexes], [values[i] for i in indexes],
                       [keys[i] for i in indexes], *self._other_columns(indexes),
                       self.batch_key, self.key_space)

    def partition_of(self, partition: int, indexes: Sequence[int], values: list[bytes],
                     keys: list[bytes | None]) -> Records:
        """One partition's records, at ``indexes``, with their values and keys already taken (as
        ``split_by_partition`` gives them)."""
        return Records([partition] * len(values), values, keys, *self._other_columns(indexes),
                       self.batch_key, self.key_space)

    def _other_columns(self, indexes: Sequence[int]) -> _OtherColumns:
        formats, headers, idempotency_keys = self.formats, self.headers, self.idempotency_keys
        return (formats if isinstance(formats, ValueFormat) else [formats[i] for i in indexes],
                None if headers is None else [headers[i] for i in indexes],
                None if idempotency_keys is None else [idempotency_keys[i] for i in indexes])

    def rows(self) -> list[Record]:
        """The same records as one object each (a batch key as per-record keys)."""
        if self.batch_key is not None:
            return self.with_record_keys().rows()
        headers = self.headers or [{}] * len(self.values)
        idempotency_keys = self.idempotency_keys or [None] * len(self.values)
        return [Record(*row)
                for row in zip(self.partitions, self.values, self.format_column(), self.keys,
                               headers, idempotency_keys, strict=True)]


T = TypeVar("T")
_OtherColumns = tuple[ValueFormat | list[ValueFormat], list[Mapping[str, str]] | None,
                      list[str | None] | None]  # formats, headers and idempotency keys


def _joined_column(columns: list[Sequence[T] | None], sizes: list[int],
                   default: T) -> list[T] | None:
    if all(column is None for column in columns):
        return None
    return [item for column, size in zip(columns, sizes, strict=True)
            for item in (column or [default] * size)]


@dataclass(frozen=True, slots=True)
class AppendResult:
    """Where a record landed; ``duplicate`` is true when an idempotent retry found the first
    write."""

    partition: int
    offset: str
    duplicate: bool = False


class Appended(Sequence[AppendResult]):
    """What an append wrote, as columns: record ``i`` landed on ``partitions[i]`` at ``offsets[i]``,
    and was a duplicate (an idempotent retry that found the first write) where ``duplicates[i]``
    says so; ``duplicates`` is None when none was (no record carried an idempotency key, or every
    one was a first write). Read as a sequence,
    it is one ``AppendResult`` each."""

    __slots__ = ("duplicates", "offsets", "partitions")

    def __init__(self, partitions: list[int], offsets: list[str],
                 duplicates: list[bool] | None) -> None:
        self.partitions = partitions
        self.offsets = offsets
        self.duplicates = duplicates

    def __len__(self) -> int:
        return len(self.offsets)

    @overload
    def __getitem__(self, index: int) -> AppendResult: ...

    @overload
    def __getitem__(self, index: slice) -> list[AppendResult]: ...

    def __getitem__(self, index: int | slice) -> AppendResult | list[AppendResult]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        duplicates = self.duplicates
        return AppendResult(self.partitions[index], self.offsets[index],
                            False if duplicates is None else duplicates[index])

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence):
            return NotImplemented
        return list(self) == list(other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Appended({list(self)!r})"


# Compiled readers (storage._speedups._entries, gateway._speedups._frames) index its fields in
# declaration order through __slots__: add a field at the end, or update their C with it.
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
class ArchivedRange:
    """What a partition's archive tier holds: its first and last offsets (None when it holds
    nothing), entries, segments and their bytes."""

    first_offset: str | None
    last_offset: str | None
    entries: int
    segments: int
    bytes: int


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    """Size and bounds of one partition's stream (the hot tier); offsets are None when it is
    empty. ``archived``: what its archive tier holds (None: the store has no archive tier)."""

    partition: int
    length: int
    first_offset: str | None
    last_offset: str | None
    archived: ArchivedRange | None = None


@dataclass(frozen=True, slots=True)
class ParkedKey:
    """A key of a key_shared group waiting for the redelivery of its failed message at ``offset``,
    since ``since_ms`` (epoch ms)."""

    key: bytes
    offset: str
    since_ms: int


@dataclass(frozen=True, slots=True)
class LostRange:
    """Entries retention removed from a partition past a reader's position: everything after
    ``after`` and before ``first_kept`` (None: nothing is left) is gone, ``count`` entries when
    known."""

    partition: int
    after: str
    first_kept: str | None
    count: int | None = None


@dataclass(frozen=True, slots=True)
class AppendOptions:
    """Per-topic write options: retention by length (``MAXLEN ~``), the idempotency window, and
    whether keys are indexed."""

    acks: Acks = Acks.LEADER
    max_length: int | None = None
    dedup_ttl_ms: int = 24 * 3600 * 1000
    key_index: bool = False  # keep each key's index (its history) with every append
    compact: bool = False  # a compacted topic's append (key_index too): tells compaction of work


NO_MESSAGE = "none"  # an expected position: no retained message yet


@dataclass(frozen=True, slots=True)
class Conditions:
    """What one partition's append expects, checked atomically with it: the partition's last
    offset, and per record its key's newest retained offset (None: no expectation; ``NO_MESSAGE``:
    nothing there)."""

    last_offset: str | None = None
    key_offsets: list[str | None] | None = None


# gateway._speedups._frames indexes its fields in declaration order through __slots__.
@dataclass(frozen=True, slots=True)
class Delivery:
    """An entry handed to a consumer of a group, with how many times it has been delivered (1 =
    first)."""

    entry: StoredEntry
    delivery_count: int


_DELIVERY_SETTERS = tuple(getattr(Delivery, name).__set__ for name in ("entry", "delivery_count"))


def first_deliveries(entries: list[StoredEntry]) -> list[Delivery]:
    """``[Delivery(entry, 1) for entry in entries]`` for the group read path, filled through the
    slots (the frozen dataclass ``__init__`` costs about twice as much); as immutable afterwards."""
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
    """A group's position on one partition; ``lag`` is None when Redis cannot tell (never guessed as
    0)."""

    partition: int
    exists: bool
    last_delivered_offset: str | None
    pending: int
    oldest_pending_offset: str | None
    lag: int | None
    entries_read: int | None = None  # entries ever delivered to the group (None: unknown)


@dataclass(frozen=True, slots=True)
class ScheduledResult:
    """Where a delayed message waits until ``due_ms`` (epoch ms).

    ``duplicate`` is true when an idempotent retry found the first schedule; then ``schedule_id``
    and ``due_ms`` are the first schedule's. When that message was already promoted, ``offset`` is
    its stream offset, ``schedule_id`` is empty and ``due_ms`` is the offset's timestamp.
    """

    partition: int
    schedule_id: str
    due_ms: int
    duplicate: bool = False
    offset: str | None = None


@dataclass(frozen=True, slots=True)
class PurgeReport:
    """What purging one partition removed: ``removed`` entries and ``scheduled`` delayed messages,
    all up to ``cut`` (the partition's last offset, None when it never had an entry); ``groups``
    moved their positions to the cut."""

    partition: int
    removed: int
    scheduled: int
    cut: str | None
    groups: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class TrimReport:
    """What a retention trim removed from one partition: ``removed`` entries of its stream,
    ``archived_removed`` entries in ``segments_removed`` whole segments of its archive tier.

    ``unacked_removed`` maps each group that lost entries it had not acked (pending, or never
    delivered) to how many; groups that lost nothing unacked are absent.
    """

    partition: int
    removed: int
    unacked_removed: dict[str, int] = field(default_factory=dict)
    archived_removed: int = 0  # entries of the archive tier's segments that went
    segments_removed: int = 0


@dataclass(frozen=True, slots=True)
class ConsumerInfo:
    """One consumer of a group on one partition (a row of XINFO CONSUMERS)."""

    name: str
    pending: int
    idle_ms: int
