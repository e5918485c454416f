"""Segment files: one partition's entries over one contiguous offset range, as a Parquet file
(zstd, row groups with statistics, a summary in the footer), and how they are written."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from storage.archive.names import segment_name
from storage.archive.object_store import ArchiveStore
from storage.entry_fields import KEYED

FORMAT_VERSION = 1
SCHEMA = pa.schema([
    pa.field("offset_ms", pa.uint64(), nullable=False),
    pa.field("offset_seq", pa.uint64(), nullable=False),
    pa.field("timestamp", pa.timestamp("ms", tz="UTC"), nullable=False),  # = offset_ms, for Spark
    pa.field("key", pa.binary()),  # null: a keyless entry
    pa.field("value", pa.binary(), nullable=False),
    pa.field("format", pa.dictionary(pa.int32(), pa.string())),  # the f field; null: JSON
    pa.field("headers", pa.binary()),  # the h field as stored (an orjson map); null: none
])
_MAX_BINARY = 2**31 - 1  # binary_slice without a stop fails on some inputs (pyarrow 26)
_META = "streamgate."  # the footer's key-value metadata: the segment's summary under this prefix

RawEntry = tuple[bytes | str, Sequence[bytes] | Mapping[bytes, bytes]]  # as XRANGE returns one


@dataclass(frozen=True, slots=True)
class SegmentSettings:
    """How segments are written: row groups of about ``row_group_bytes`` (uncompressed) and at
    most ``row_group_max_rows`` rows, the unit a read skips by statistics; zstd at
    ``compression_level``."""

    row_group_bytes: int = 4 << 20
    row_group_max_rows: int = 1 << 16
    compression_level: int = 3


@dataclass(frozen=True, slots=True)
class SegmentInfo:
    """One written segment: its name in the store, what it holds and its size in bytes."""

    name: str
    topic: str
    partition: int
    first_offset: str
    last_offset: str
    count: int
    bytes: int
    min_timestamp_ms: int
    max_timestamp_ms: int


@dataclass(frozen=True, slots=True)
class EntryColumns:
    """Entries as columns, in offset order: entry ``i`` is ``offset_ms[i]-offset_seq[i]``, holds
    ``values[i]``, and ``keys``/``formats``/``headers`` ``[i]`` when those columns are given (None:
    no entry has one). Formats are the ``f`` field's text (None: JSON); headers the raw ``h``."""

    offset_ms: pa.Array | Sequence[int]
    offset_seq: pa.Array | Sequence[int]
    values: pa.Array | Sequence[bytes]
    keys: pa.Array | Sequence[bytes | None] | None = None
    formats: pa.Array | Sequence[str | None] | None = None
    headers: pa.Array | Sequence[bytes | None] | None = None


async def write_segment(store: ArchiveStore, topic: str, partition: int,
                        entries: Sequence[RawEntry] | EntryColumns,
                        settings: SegmentSettings | None = None, epoch: int = 0) -> SegmentInfo:
    """Write one partition's entries (raw XRANGE entries or columns, in offset order, at least
    one) as the segment named by its first offset and the writer's ownership ``epoch``; the store
    puts it whole or not at all. ValueError when the entries are not in strictly increasing
    offset order."""
    table, data = await asyncio.to_thread(encode_segment, topic, partition, entries,
                                          settings or SegmentSettings())
    info = _info(table, topic, partition, data.size, epoch)
    await store.put(info.name, data)
    return info


def encode_segment(topic: str, partition: int, entries: Sequence[RawEntry] | EntryColumns,
                   settings: SegmentSettings) -> tuple[pa.Table, pa.Buffer]:
    """The entries as a table and as the bytes of their segment file."""
    columns = entries if isinstance(entries, EntryColumns) else columns_from_entries(entries)
    table = entries_table(columns)
    summary = _summary(table, topic, partition)
    sink = pa.BufferOutputStream()
    with pq.ParquetWriter(
        sink, SCHEMA.with_metadata(summary), compression="zstd",
        compression_level=settings.compression_level, use_dictionary=["key", "format", "headers"],
        write_statistics=True, sorting_columns=[pq.SortingColumn(0), pq.SortingColumn(1)],
    ) as writer:
        writer.write_table(table, row_group_size=_row_group_rows(table, settings))
    return table, sink.getvalue()


def columns_from_entries(entries: Sequence[RawEntry]) -> EntryColumns:
    """Raw stream entries (an ID and a flat field list or a field map each) as columns."""
    names, values, formats, headers = _split_fields([fields for _, fields in entries])
    offset_ms, offset_seq = split_offsets([entry[0] for entry in entries])
    return EntryColumns(offset_ms, offset_seq, values, _keys(names), formats, headers)


_Other = tuple[bytes, bytes, str | None, bytes | None]  # value field name, value, format, headers


def _split_fields(all_fields: Sequence[Sequence[bytes] | Mapping[bytes, bytes]]
                  ) -> tuple[pa.Array, list[bytes], list[str | None] | None,
                             list[bytes | None] | None]:
    """Each entry's value field name and value, and the format and headers columns (None when no
    entry has more than its value field, the common segment)."""
    names: list[bytes] = []
    values: list[bytes] = []
    others: dict[int, _Other] = {}
    for index, fields in enumerate(all_fields):
        if type(fields) is list and len(fields) == 2:  # most entries: the value field only
            names.append(fields[0])
            values.append(fields[1])
        else:
            others[index] = other = _other_entry(fields)
            names.append(other[0])
            values.append(other[1])
    names_column = pa.array(names, pa.binary())
    not_value = pc.invert(pc.or_(pc.equal(names_column, b"v"),
                                 pc.starts_with(names_column, pattern=KEYED)))
    odd = pc.indices_nonzero(not_value).to_pylist()  # one field, but not the value's
    for index in odd:
        others[index] = other = _other_entry(all_fields[index])
        names[index], values[index] = other[0], other[1]
    if odd:
        names_column = pa.array(names, pa.binary())
    return names_column, values, *_other_columns(others, len(values))


def _other_columns(others: dict[int, _Other], count: int
                   ) -> tuple[list[str | None] | None, list[bytes | None] | None]:
    if not others:
        return None, None
    formats: list[str | None] = [None] * count
    headers: list[bytes | None] = [None] * count
    for index, (_, _, fmt, header) in others.items():
        formats[index], headers[index] = fmt, header
    return formats, headers


def split_offsets(ids: Sequence[bytes | str]) -> tuple[pa.Array, pa.Array]:
    """Stream IDs (``<ms>-<seq>``) as their two parts; ValueError for anything else."""
    text = pa.array(ids, pa.binary() if ids and isinstance(ids[0], bytes) else pa.string())
    parts = pc.split_pattern(text, "-", max_splits=1)
    try:
        if pc.any(pc.not_equal(pc.list_value_length(parts), 2)).as_py():
            raise ValueError("an ID without its two parts")
        return (pc.cast(pc.cast(pc.list_element(parts, 0), pa.string()), pa.uint64()),
                pc.cast(pc.cast(pc.list_element(parts, 1), pa.string()), pa.uint64()))
    except (ValueError, pa.ArrowException) as exc:
        raise ValueError(f"not stream IDs (<ms>-<seq>): {exc}") from exc


def entries_table(columns: EntryColumns) -> pa.Table:
    """The columns as a table of the segment schema; ValueError unless they hold at least one
    entry in strictly increasing offset order."""
    offset_ms = pa.array(columns.offset_ms, pa.uint64())
    offset_seq = pa.array(columns.offset_seq, pa.uint64())
    count = len(offset_ms)
    _check_order(offset_ms, offset_seq)
    return pa.Table.from_arrays([
        offset_ms, offset_seq,
        pc.cast(pc.cast(offset_ms, pa.int64()), pa.timestamp("ms", tz="UTC")),
        _column(columns.keys, pa.binary(), count),
        pa.array(columns.values, pa.binary()),
        _column(columns.formats, pa.string(), count).dictionary_encode(),
        _column(columns.headers, pa.binary(), count),
    ], schema=SCHEMA)


def summary_of(metadata: Mapping[bytes, bytes] | None, name: str, size: int) -> SegmentInfo:
    """A segment's summary from its footer's key-value metadata; ValueError when it has none."""
    meta = {k.decode(): v.decode() for k, v in (metadata or {}).items()
            if k.startswith(_META.encode())}
    try:
        if int(meta[_META + "format_version"]) != FORMAT_VERSION:
            raise ValueError(f"format version {meta[_META + 'format_version']}")
        return SegmentInfo(name, meta[_META + "topic"], int(meta[_META + "partition"]),
                           meta[_META + "first_offset"], meta[_META + "last_offset"],
                           int(meta[_META + "count"]), size,
                           int(meta[_META + "min_timestamp_ms"]),
                           int(meta[_META + "max_timestamp_ms"]))
    except (KeyError, ValueError) as exc:
        raise ValueError(f"{name} is not a segment of this version: {exc}") from exc


def _summary(table: pa.Table, topic: str, partition: int) -> dict[str, str]:
    first, last = offset_at(table, 0), offset_at(table, table.num_rows - 1)
    values: dict[str, Any] = {
        "format_version": FORMAT_VERSION, "topic": topic, "partition": partition,
        "first_offset": first, "last_offset": last, "count": table.num_rows,
        # offsets ascend, so their times do: the first and the last are the bounds
        "min_timestamp_ms": first.partition("-")[0], "max_timestamp_ms": last.partition("-")[0],
    }
    return {_META + key: str(value) for key, value in values.items()}


def _info(table: pa.Table, topic: str, partition: int, size: int, epoch: int) -> SegmentInfo:
    summary = {k.encode(): v.encode() for k, v in _summary(table, topic, partition).items()}
    return summary_of(summary, segment_name(topic, partition, offset_at(table, 0), epoch), size)


def offset_at(table: pa.Table, row: int) -> str:
    """The offset of a segment table's row ``row``."""
    return f"{table['offset_ms'][row].as_py()}-{table['offset_seq'][row].as_py()}"


def _row_group_rows(table: pa.Table, settings: SegmentSettings) -> int:
    row_bytes = max(1, table.nbytes // max(1, table.num_rows))
    return max(1, min(settings.row_group_max_rows, settings.row_group_bytes // int(row_bytes)))


def _check_order(offset_ms: pa.Array, offset_seq: pa.Array) -> None:
    count = len(offset_ms)
    if count == 0:
        raise ValueError("a segment holds at least one entry")
    if count != len(offset_seq):
        raise ValueError("offset_ms and offset_seq differ in length")
    ms0, ms1 = offset_ms.slice(0, count - 1), offset_ms.slice(1)
    seq0, seq1 = offset_seq.slice(0, count - 1), offset_seq.slice(1)
    ascending = pc.or_(pc.greater(ms1, ms0),
                       pc.and_(pc.equal(ms1, ms0), pc.greater(seq1, seq0)))
    if not pc.all(ascending, min_count=0).as_py():
        raise ValueError("a segment's entries are in strictly increasing offset order")


def _column(values: pa.Array | Sequence[Any] | None, kind: pa.DataType, count: int) -> pa.Array:
    column = pa.nulls(count, kind) if values is None else pa.array(values, kind)
    if len(column) != count:
        raise ValueError("every column holds one value per entry")
    return column


def _keys(names_column: pa.Array) -> pa.Array:
    """The key column from each entry's value field name: ``K<key>``, or ``v`` without a key."""
    return pc.if_else(pc.equal(names_column, b"v"), pa.scalar(None, pa.binary()),
                      pc.binary_slice(names_column, 1, _MAX_BINARY))


def _other_entry(fields: Sequence[bytes] | Mapping[bytes, bytes]
                 ) -> tuple[bytes, bytes, str | None, bytes | None]:
    """An entry with more than its value field: (value field name, value, format, headers).
    Entries of earlier versions held the key under ``k`` (a key-less ``v`` name then); as in
    ``codec.value_and_key``, the last of several wins."""
    pairs = fields.items() if isinstance(fields, Mapping) else zip(fields[::2], fields[1::2],
                                                                   strict=True)
    name, value, key, fmt, header = b"v", b"", None, None, None
    for field_name, data in pairs:
        if field_name == b"v" or field_name[:1] == KEYED:
            name, value = (b"v" if field_name == b"v" else bytes(field_name)), data
        elif field_name == b"k":
            key = data
        elif field_name == b"f":
            fmt = bytes(data).decode()
        elif field_name == b"h":
            header = data
    return (KEYED + key if key is not None and name == b"v" else name), value, fmt, header
