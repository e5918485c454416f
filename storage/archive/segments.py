"""Segment files: one partition's entries over one contiguous offset range, as a Parquet file
(zstd, row groups with statistics, a summary in the footer), and how they are written."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from storage.archive.names import segment_name
from storage.archive.object_store import ArchiveStore
from storage.pages import PageColumns, columns_of_items

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
_META = "streamgate."  # the footer's key-value metadata: the segment's summary under this prefix

RawEntry = tuple[bytes | str, Sequence[bytes] | Mapping[bytes, bytes]]  # as XRANGE returns one


@dataclass(frozen=True, slots=True)
class SegmentSettings:
    """How segments are written: row groups of about ``row_group_bytes`` (uncompressed) and at
    most ``row_group_max_rows`` rows, the unit a read skips by statistics; zstd at
    ``compression_level``."""

    row_group_bytes: int = 4 << 20
    row_group_max_rows: int = 1 << 16
    # zstd's fastest level: half the CPU of its default on stream values, files hardly larger
    compression_level: int = 1


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
    columns = entries if isinstance(entries, EntryColumns) else columns_of_raw(entries)
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


def columns_of_raw(entries: Sequence[RawEntry]) -> EntryColumns:
    """Raw stream entries (an ID and a flat field list or a field map each) as columns, read as
    the XRANGE page decoder reads a reply."""
    return entry_columns([columns_of_items([[_bytes(entry_id), _flat(fields)]
                                            for entry_id, fields in entries])])


def entry_columns(pages: Sequence[PageColumns]) -> EntryColumns:
    """XRANGE pages (``storage.pages``) as a segment's columns, over the pages' own buffers."""
    return EntryColumns(
        offset_ms=pc.cast(pc.divide(_concat(pages, _timestamps_us), 1000), pa.uint64()),
        offset_seq=_concat(pages, _sequences), values=_concat(pages, _values),
        keys=_concat(pages, _keys), formats=_concat(pages, _formats),
        headers=_concat(pages, _headers))


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


def _bytes(raw: bytes | str) -> bytes:
    return raw.encode() if isinstance(raw, str) else raw


def _flat(fields: Sequence[bytes] | Mapping[bytes, bytes]) -> list[bytes]:
    if isinstance(fields, Mapping):
        return [part for pair in fields.items() for part in pair]
    return list(fields)


def _concat(pages: Sequence[PageColumns], column: Callable[[PageColumns], pa.Array]) -> pa.Array:
    arrays = [column(page) for page in pages]
    return arrays[0] if len(arrays) == 1 else pa.concat_arrays(arrays)


def _buffer(data: bytes | None) -> pa.Buffer | None:
    return None if data is None else pa.py_buffer(data)


def _timestamps_us(page: PageColumns) -> pa.Array:
    return pa.Array.from_buffers(pa.int64(), page.rows, [None, pa.py_buffer(page.timestamps_us)])


def _sequences(page: PageColumns) -> pa.Array:
    return pa.Array.from_buffers(pa.uint64(), page.rows, [None, pa.py_buffer(page.sequences)])


def _values(page: PageColumns) -> pa.Array:
    return pa.Array.from_buffers(pa.binary(), page.rows, [
        None, pa.py_buffer(page.value_offsets), pa.py_buffer(page.value_data)])


def _keys(page: PageColumns) -> pa.Array:
    return pa.Array.from_buffers(pa.binary(), page.rows, [
        _buffer(page.key_validity), pa.py_buffer(page.key_offsets), pa.py_buffer(page.key_data)],
        page.key_nulls)


def _formats(page: PageColumns) -> pa.Array:
    """The ``f`` fields as text; ValueError for one that is not UTF-8 (the gateway writes none)."""
    formats = pa.Array.from_buffers(pa.string(), page.rows, [
        _buffer(page.format_validity), pa.py_buffer(page.format_offsets),
        pa.py_buffer(page.format_data)], page.format_nulls)
    try:
        formats.validate(full=True)
    except pa.ArrowInvalid as exc:
        raise ValueError(f"a format that is not text: {exc}") from exc
    return formats


def _headers(page: PageColumns) -> pa.Array:
    return pa.Array.from_buffers(pa.binary(), page.rows, [
        _buffer(page.header_validity), pa.py_buffer(page.header_offsets),
        pa.py_buffer(page.header_data)], page.header_nulls)
