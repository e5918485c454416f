"""Reading segment files: a range of offsets, the first offset at a time, a key's entries or an
Arrow table, decoding only the row groups whose statistics say they may hold what is asked; a page
of decoded row groups is answered from memory, the next row group decoded ahead."""

from __future__ import annotations

import asyncio
import bisect
import contextlib
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from storage._speedups import entries_of_columns, items_of_columns
from storage.archive.object_store import ArchiveStore
from storage.archive.row_groups import Footer, RowGroupCache
from storage.archive.segments import SCHEMA, SegmentInfo, offset_at, summary_of
from storage.codec import offset_key, validate_offset
from storage.entry_fields import KEYED
from storage.errors import ArchiveUnavailable
from storage.models import StoredEntry

T = TypeVar("T")
_OFFSETS = ["offset_ms", "offset_seq"]
_OFFSET_MS_COLUMN, _KEY_COLUMN = SCHEMA.get_field_index("offset_ms"), SCHEMA.get_field_index("key")
_Bounds = tuple[tuple[int, int] | None, tuple[int, int] | None]  # (after, until) as (ms, seq)
# A row group as its entries are built from (``_item_table``), cached under this column list: a
# page converts only its own rows, with no per-page arithmetic over the whole group.
_ITEMS = ("#items",)
_ITEM_SOURCE = ["offset_ms", "offset_seq", "key", "value", "format", "headers"]
_ITEM_COLUMNS = ("id", "field", "value", "format", "headers")  # as entries_of_columns takes them
# decodes ahead under way (the loop keeps only weak references to its tasks)
_AHEAD: set[asyncio.Task[None]] = set()


class _NotCached(Exception):
    """A segment read from memory alone needs its file."""


async def read_range(store: ArchiveStore, name: str, after: str | None = None,
                     until: str | None = None, limit: int | None = None) -> list[StoredEntry]:
    """The segment's entries after ``after`` (exclusive) up to ``until`` (inclusive), at most
    ``limit``, in offset order (None: from the first, to the last, all). A page (``limit``
    given) whose row groups are cached is answered on the caller's thread, without the file; one
    that ends near its row group's end has the next decoded meanwhile."""
    page = partial(_entries, name, after, until, limit, store.row_groups)
    found = _from_memory(page) if limit is not None else None
    entries, ahead = found if found is not None else await store.read(name, page)
    if ahead is not None:
        _decode_ahead(store, name, ahead)
    return entries


async def read_table(store: ArchiveStore, name: str, columns: Sequence[str] | None = None,
                     after: str | None = None, until: str | None = None) -> pa.Table:
    """The same range as ``read_range``, as an Arrow table of ``columns`` (None: all)."""
    return await store.read(name, partial(_table, name, columns, after, until))


async def first_at_or_after_time(store: ArchiveStore, name: str, timestamp_ms: int) -> str | None:
    """The first offset whose timestamp is at or after ``timestamp_ms``; None when the segment
    ends before it."""
    return await store.read(name, partial(_first_at_or_after_time, name, timestamp_ms))


async def read_key(store: ArchiveStore, name: str, key: bytes, after: str | None = None,
                   limit: int | None = None) -> list[StoredEntry]:
    """``key``'s entries after ``after`` (exclusive), at most ``limit``, in offset order."""
    return await store.read(name, partial(_key_entries, name, key, after, limit))


async def read_summary(store: ArchiveStore, name: str) -> SegmentInfo:
    """What the segment's footer says it holds."""
    return await store.read(name, partial(_summary, name))


async def read_raw_range(store: ArchiveStore, name: str, after: str | None = None,
                         limit: int | None = None) -> list[list[Any]]:
    """As ``read_range``, as the ``[id, fields]`` items XRANGE would have returned."""
    return await store.read(name, partial(_raw_items, name, after, limit, store.row_groups))


def _entries(name: str, after: str | None, until: str | None, limit: int | None,
             cache: RowGroupCache, file: pa.NativeFile | None) -> tuple[list[StoredEntry],
                                                                       int | None]:
    segment = SegmentFile(file, name, cache)
    return segment.entries(after, until, limit), segment.ahead


def _from_memory(read: Callable[[pa.NativeFile | None], T]) -> T | None:
    """``read`` answered from the cache alone; None when it needs the file."""
    try:
        return read(None)
    except _NotCached:
        return None


def _decode_ahead(store: ArchiveStore, name: str, group: int) -> None:
    """Decode the segment's row ``group`` into the cache in the background."""
    task = asyncio.get_running_loop().create_task(_warm(store, name, group))
    _AHEAD.add(task)
    task.add_done_callback(_AHEAD.discard)


async def _warm(store: ArchiveStore, name: str, group: int) -> None:
    # whatever fails here (a closed store, a file gone), the page that needs the group reads it
    # again and fails in its turn, to its caller
    with contextlib.suppress(Exception):
        await store.read(name, partial(_warm_group, name, group, store.row_groups))


def _warm_group(name: str, group: int, cache: RowGroupCache, file: pa.NativeFile) -> None:
    SegmentFile(file, name, cache).warm(group)


def _raw_items(name: str, after: str | None, limit: int | None, cache: RowGroupCache,
               file: pa.NativeFile) -> list[list[Any]]:
    return SegmentFile(file, name, cache).raw_items(after, limit)


def _table(name: str, columns: Sequence[str] | None, after: str | None, until: str | None,
           file: pa.NativeFile) -> pa.Table:
    return SegmentFile(file, name).table(columns, after, until)


def _first_at_or_after_time(name: str, timestamp_ms: int, file: pa.NativeFile) -> str | None:
    return SegmentFile(file, name).first_at_or_after_time(timestamp_ms)


def _key_entries(name: str, key: bytes, after: str | None, limit: int | None,
                 file: pa.NativeFile) -> list[StoredEntry]:
    return SegmentFile(file, name).key_entries(key, after, limit)


def _summary(name: str, file: pa.NativeFile) -> SegmentInfo:
    return SegmentFile(file, name).info


class SegmentFile:
    """One segment open for reading (blocking calls: run it on the store's I/O threads; without a
    file, it answers from ``cache`` alone or raises _NotCached). ``row_groups_read`` lists the row
    groups decoded so far, in order; ``ahead``, the row group the page after the last range read
    needs and the cache does not hold yet (None: none)."""

    def __init__(self, file: pa.NativeFile | None, name: str,
                 cache: RowGroupCache | None = None) -> None:
        self._file, self._name, self._cache = file, name, cache
        self._parquet_file: pq.ParquetFile | None = None
        footer = None if cache is None else cache.footer(name)
        if footer is None:
            footer = self._read_footer()
            if cache is not None:
                cache.keep_footer(name, footer)
        self._metadata: pq.FileMetaData = footer[0]
        self.info: SegmentInfo = footer[1]
        self._ms_bounds = footer[2]
        self.row_groups_read: list[int] = []
        self.ahead: int | None = None

    @property
    def _parquet(self) -> pq.ParquetFile:
        """The file's reader, made on first use: a page of cached row groups needs none."""
        if self._parquet_file is None:
            self._parquet_file = _open(self._opened(), self._metadata)
        return self._parquet_file

    def _opened(self) -> pa.NativeFile:
        if self._file is None:
            raise _NotCached(self._name)
        return self._file

    def _read_footer(self) -> Footer:
        file = self._opened()
        self._parquet_file = parquet = _open(file, None)
        metadata = parquet.metadata
        try:
            info = summary_of(parquet.schema_arrow.metadata, self._name, file.size())
        except ValueError as exc:  # a Parquet file, but none this tier wrote
            raise ArchiveUnavailable(str(exc)) from exc
        return metadata, info, [_min_max(metadata.row_group(group), _OFFSET_MS_COLUMN)
                                for group in range(metadata.num_row_groups)]

    def entries(self, after: str | None = None, until: str | None = None,
                limit: int | None = None) -> list[StoredEntry]:
        """As ``read_range``."""
        tables = self._groups_within(_bounds(after, until), _ITEMS, limit)
        return _item_entries(self.info.partition, tables)

    def raw_items(self, after: str | None = None, limit: int | None = None) -> list[list[Any]]:
        """As ``read_raw_range``."""
        tables = self._groups_within(_bounds(after, None), _ITEMS, limit)
        return [item for table in tables for item in _item_rows(table)]

    def table(self, columns: Sequence[str] | None = None, after: str | None = None,
              until: str | None = None) -> pa.Table:
        """As ``read_table``."""
        wanted = list(columns) if columns is not None else None
        read = None if wanted is None else list(dict.fromkeys([*_OFFSETS, *wanted]))
        table = _concat(list(self._groups_within(_bounds(after, until), read, None)), None)
        return table if wanted is None else table.select(wanted)

    def warm(self, group: int) -> None:
        """Decode row ``group`` into the cache, as a page reads it."""
        self._read(group, _ITEMS)

    def first_at_or_after_time(self, timestamp_ms: int) -> str | None:
        """As ``first_at_or_after_time``: the first row group that reaches the time holds it."""
        for group, (_, high) in enumerate(self._ms_bounds):
            if high >= timestamp_ms:
                table = self._read(group, _OFFSETS)
                index = pc.index(pc.greater_equal(table["offset_ms"], timestamp_ms), True).as_py()
                if index >= 0:
                    return offset_at(table, index)
        return None

    def key_entries(self, key: bytes, after: str | None = None,
                    limit: int | None = None) -> list[StoredEntry]:
        """As ``read_key``: the key and offset columns of each row group that may hold the key,
        then every column of those that do."""
        bounds, found, count = _bounds(after, None), [], 0
        for group in self._candidate_groups(bounds):
            if not self._may_hold_key(group, key):
                continue
            mask = _within_mask(self._read(group, ["key", *_OFFSETS]), bounds, key)
            if pc.any(mask).as_py():
                found.append(self._read(group, None).filter(mask))
                count += found[-1].num_rows
                if limit is not None and count >= limit:
                    break
        return _item_entries(self.info.partition, [_item_table(_concat(found, limit))])

    def _groups_within(self, bounds: _Bounds, columns: Sequence[str] | None,
                       limit: int | None) -> list[pa.Table]:
        """The rows within the bounds, at most ``limit``, as slices of the row groups holding
        them (their rows ascend by offset); notes ``ahead``."""
        slices: list[pa.Table] = []
        left = limit
        for group in self._candidate_groups(bounds):
            if left is not None and left <= 0:
                break
            table = self._read(group, columns)
            start, stop = _span(table, bounds)
            if left is not None:
                stop = min(stop, start + left)
                left -= stop - start
                self._note_ahead(group, table.num_rows - stop, limit)
            slices.append(table.slice(start, stop - start))
        return slices

    def _note_ahead(self, group: int, rows_after: int, limit: int | None) -> None:
        """The next page starts in the next row group: decode it ahead, unless cached."""
        following = group + 1
        needed = limit is not None and rows_after < limit and following < len(self._ms_bounds)
        missing = self._cache is not None and (self._name, following, _ITEMS) not in self._cache
        self.ahead = following if needed and missing else None

    def _candidate_groups(self, bounds: _Bounds) -> Iterator[int]:
        """The row groups that may hold offsets within the bounds, by their offset_ms statistics
        (a group whose bounds touch a bound's millisecond may hold it: its rows are cut by
        offset)."""
        after, until = bounds
        for group, (low, high) in enumerate(self._ms_bounds):
            if (after is None or high >= after[0]) and (until is None or low <= until[0]):
                yield group

    def _may_hold_key(self, group: int, key: bytes) -> bool:
        statistics = self._metadata.row_group(group).column(_KEY_COLUMN).statistics
        if statistics is None or not statistics.has_min_max:
            return True
        return bool(statistics.min <= key <= statistics.max)

    def _read(self, group: int, columns: Sequence[str] | None) -> pa.Table:
        if self._cache is None:
            return self._decode(group, columns)
        key = (self._name, group, None if columns is None else tuple(columns))
        if self._file is None:
            table = self._cache.cached(key)
            if table is None:
                raise _NotCached(self._name)
            return table
        return self._cache.get(key, lambda: self._decode(group, columns))

    def _decode(self, group: int, columns: Sequence[str] | None) -> pa.Table:
        self.row_groups_read.append(group)
        if columns == _ITEMS:  # on one thread: Arrow's pool costs more CPU than it saves here
            return _item_table(self._decode_columns(group, _ITEM_SOURCE, use_threads=False))
        return self._decode_columns(group, SCHEMA.names if columns is None else columns)

    def _decode_columns(self, group: int, columns: Sequence[str], use_threads: bool = True
                        ) -> pa.Table:
        """The row group's ``columns``; one that its statistics say holds only nulls (headers,
        keys, formats seldom set) is made as nulls: decoding a chunk costs even when empty."""
        empty = self._null_columns(group, columns)
        read = [name for name in columns if name not in empty]
        table = self._parquet.read_row_group(group, columns=read, use_threads=use_threads)
        if not empty:
            return table
        rows = self._metadata.row_group(group).num_rows
        fields = [SCHEMA.field(name) for name in columns]
        return pa.table([pa.nulls(rows, field.type) if field.name in empty else table[field.name]
                         for field in fields], schema=pa.schema(fields, table.schema.metadata))

    def _null_columns(self, group: int, columns: Sequence[str]) -> set[str]:
        meta = self._metadata.row_group(group)
        empty = set()
        for name in columns:
            statistics = meta.column(SCHEMA.get_field_index(name)).statistics
            if statistics is not None and statistics.has_null_count \
                    and statistics.null_count == meta.num_rows:
                empty.add(name)
        return empty


def _open(file: pa.NativeFile, metadata: pq.FileMetaData | None) -> pq.ParquetFile:
    # pre_buffer: a row group's column chunks fetched in few large reads (an object store's
    # requests cost more than their bytes); a footer read before is not read again
    return pq.ParquetFile(file, pre_buffer=True, metadata=metadata)


def _item_table(table: pa.Table) -> pa.Table:
    """A row group's rows as the parts of the ``[id, fields]`` items XRANGE would have returned
    (each row's ID, value field name, value, format and headers), beside its offsets."""
    ids = pc.cast(pc.binary_join_element_wise(
        pc.cast(table["offset_ms"], pa.string()), pc.cast(table["offset_seq"], pa.string()),
        "-"), pa.binary())
    # the value field's name: K + the key, or v without one
    names = pc.fill_null(pc.binary_join_element_wise(KEYED, table["key"], b""), b"v")
    return pa.table({"offset_ms": table["offset_ms"], "offset_seq": table["offset_seq"],
                     "id": ids, "field": names, "value": table["value"],
                     "format": table["format"], "headers": table["headers"]})


def _item_rows(table: pa.Table) -> list[list[Any]]:
    """An item table's rows as the ``[id, fields]`` items XRANGE would have returned."""
    return items_of_columns(*(table[name] for name in _ITEM_COLUMNS))


def _item_entries(partition: int, tables: Sequence[pa.Table]) -> list[StoredEntry]:
    """Item tables' entries, built from their columns without a Python object per cell first."""
    entries: list[StoredEntry] = []
    for table in tables:
        for batch in table.to_batches():
            entries += entries_of_columns(partition, *(batch[name] for name in _ITEM_COLUMNS))
    return entries


def _bounds(after: str | None, until: str | None) -> _Bounds:
    return (None if after is None else offset_key(validate_offset(after)),
            None if until is None else offset_key(validate_offset(until)))


def _span(table: pa.Table, bounds: _Bounds) -> tuple[int, int]:
    """The table's rows after ``after`` and up to ``until``, as [start, stop) row numbers."""
    after, until = bounds
    start = 0 if after is None else _rows_through(table, after)
    stop = table.num_rows if until is None else _rows_through(table, until)
    return start, max(start, stop)


def _rows_through(table: pa.Table, bound: tuple[int, int]) -> int:
    """How many of the table's rows lie at or before ``bound``: its rows ascend by offset."""
    ms, seq = table["offset_ms"], table["offset_seq"]
    return bisect.bisect_right(range(table.num_rows), bound,
                               key=lambda row: (ms[row].as_py(), seq[row].as_py()))


def _within_mask(table: pa.Table, bounds: _Bounds, key: bytes | None) -> pa.ChunkedArray:
    """Which rows lie after ``after`` and up to ``until`` (and hold ``key`` when given)."""
    ms, seq = table["offset_ms"], table["offset_seq"]
    # offsets are never null: every row, the start of a mask narrowed by each condition given
    mask = pc.is_valid(ms) if key is None else pc.equal(table["key"], key)
    # uint64 scalars: a Python int past the int64 range is no compute argument
    after, until = (None if bound is None else (pa.scalar(bound[0], pa.uint64()),
                                                pa.scalar(bound[1], pa.uint64()))
                    for bound in bounds)
    if after is not None:
        mask = pc.and_(mask, pc.or_(pc.greater(ms, after[0]), pc.and_(
            pc.equal(ms, after[0]), pc.greater(seq, after[1]))))
    if until is not None:
        mask = pc.and_(mask, pc.or_(pc.less(ms, until[0]), pc.and_(
            pc.equal(ms, until[0]), pc.less_equal(seq, until[1]))))
    return pc.fill_null(mask, False)


def _concat(tables: list[pa.Table], limit: int | None) -> pa.Table:
    if not tables:
        return SCHEMA.empty_table()
    table = pa.concat_tables(tables)
    return table if limit is None else table.slice(0, limit)


def _min_max(row_group: pq.RowGroupMetaData, column: int) -> tuple[int, int]:
    statistics = row_group.column(column).statistics
    if statistics is None or not statistics.has_min_max:
        return 0, 2**64 - 1  # no statistics: the group may hold anything
    return int(statistics.min), int(statistics.max)
