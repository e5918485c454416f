"""The archive on a local path (a tmp_path): every behaviour of archive_behaviours, and what only a
filesystem shows (row groups decoded, the temporary file of an atomic put)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from storage.archive import segment_reader
from storage.archive.names import segment_name
from storage.archive.object_store import ArchiveStore, open_archive
from storage.archive.segment_reader import SegmentFile, read_range
from storage.archive.segments import EntryColumns, SegmentSettings, write_segment
from storage.errors import ArchiveUnavailable
from tests.unit.storage.archive.archive_behaviours import (
    BASE_MS,
    ArchiveBehaviours,
    expected,
    numbered,
)


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[ArchiveStore]:
    async with open_archive(f"file://{tmp_path}/archive") as archive:
        yield archive


class TestLocalArchive(ArchiveBehaviours):
    """Every behaviour on a local path."""


async def test_read_near_the_end_decodes_only_the_last_row_groups(
        store: ArchiveStore, tmp_path: Path) -> None:
    entries = numbered(5000)
    want = expected(0, entries)
    info = await write_segment(store, "t", 0, entries, SegmentSettings(row_group_max_rows=100))
    with pa.OSFile(str(tmp_path / "archive" / info.name)) as file:
        segment = SegmentFile(file, info.name)
        groups = segment._parquet.metadata.num_row_groups
        assert segment.entries(after=want[-6].offset) == want[-5:]
    assert groups == 50
    assert segment.row_groups_read == [49]


async def test_time_and_key_lookups_skip_row_groups(store: ArchiveStore, tmp_path: Path) -> None:
    entries = [(f"{BASE_MS + i}-0", [b"K" + (b"late" if i >= 950 else b"early"), b"1"])
               for i in range(1000)]
    info = await write_segment(store, "t", 0, entries, SegmentSettings(row_group_max_rows=100))
    with pa.OSFile(str(tmp_path / "archive" / info.name)) as file:
        segment = SegmentFile(file, info.name)
        assert segment.first_at_or_after_time(BASE_MS + 420) == f"{BASE_MS + 420}-0"
        assert segment.row_groups_read == [4]
        segment.row_groups_read.clear()
        assert len(segment.key_entries(b"late")) == 50
    # the groups holding only "early" are passed over by their key statistics; the last holds
    # both: its key and offset columns are read, then its rows
    assert segment.row_groups_read == [9, 9]


async def test_pages_of_a_decoded_row_group_need_no_file(store: ArchiveStore,
                                                          tmp_path: Path) -> None:
    want = expected(0, entries := numbered(300))
    info = await write_segment(store, "t", 0, entries, SegmentSettings(row_group_max_rows=100))
    assert await read_range(store, info.name, limit=10) == want[:10]
    (tmp_path / "archive" / info.name).rename(tmp_path / "elsewhere")
    # the rest of the first row group comes from memory; the second was never decoded
    assert await read_range(store, info.name, after=want[9].offset, limit=80) == want[10:90]
    with pytest.raises(ArchiveUnavailable):
        await read_range(store, info.name, after=want[149].offset, limit=10)


async def test_a_page_ending_near_its_row_group_end_has_the_next_decoded_ahead(
        store: ArchiveStore, tmp_path: Path) -> None:
    want = expected(0, entries := numbered(300))
    info = await write_segment(store, "t", 0, entries, SegmentSettings(row_group_max_rows=100))
    assert await read_range(store, info.name, after=want[84].offset, limit=10) == want[85:95]
    await asyncio.gather(*segment_reader._AHEAD)
    (tmp_path / "archive" / info.name).rename(tmp_path / "elsewhere")
    assert await read_range(store, info.name, after=want[94].offset, limit=10) == want[95:105]


async def test_segments_from_columns_read_like_raw_entries(store: ArchiveStore) -> None:
    columns = EntryColumns([BASE_MS, BASE_MS, BASE_MS + 1], [0, 1, 0], [b"a", b"\x00", b"c"],
                           keys=[None, b"k", b"k"], formats=[None, "b", None],
                           headers=[None, None, b'{"x":"y"}'])
    info = await write_segment(store, "t", 0, columns)
    raw = [(f"{BASE_MS}-0", [b"v", b"a"]), (f"{BASE_MS}-1", [b"Kk", b"\x00", b"f", b"b"]),
           (f"{BASE_MS + 1}-0", [b"Kk", b"c", b"h", b'{"x":"y"}'])]
    assert await read_range(store, info.name) == expected(0, raw)


async def test_failed_rename_leaves_no_temporary_file(store: ArchiveStore, tmp_path: Path) -> None:
    name = segment_name("t", 0, "5-0")
    in_the_way = tmp_path / "archive" / name / "occupied"
    in_the_way.mkdir(parents=True)  # a non-empty folder where the segment would go
    with pytest.raises(ArchiveUnavailable):
        await store.put(name, b"data")
    assert sorted(p.name for p in in_the_way.parent.parent.iterdir()) == [Path(name).name]
    assert await store.list_segments("t", 0) == []


async def test_check_makes_the_local_root(tmp_path: Path) -> None:
    async with open_archive(f"file://{tmp_path}/new/root") as archive:
        await archive.check()
    assert (tmp_path / "new" / "root").is_dir()


async def test_a_root_that_is_a_file_is_archive_unavailable(tmp_path: Path) -> None:
    (tmp_path / "file").write_bytes(b"")
    async with open_archive(f"file://{tmp_path}/file") as archive:
        with pytest.raises(ArchiveUnavailable):
            await archive.check()
        with pytest.raises(ArchiveUnavailable):
            await write_segment(archive, "t", 0, numbered(1))


@pytest.mark.parametrize("url", ["file://relative/path", "http://host/x", "s3://", "/abs/path"])
def test_only_file_and_s3_urls_open(url: str) -> None:
    with pytest.raises(ValueError, match="archive URL"):
        open_archive(url)


async def test_listing_passes_over_temporary_and_foreign_files(
        store: ArchiveStore, tmp_path: Path) -> None:
    info = await write_segment(store, "t", 0, numbered(3))
    folder = (tmp_path / "archive" / info.name).parent
    (folder / f".{Path(info.name).name}.0123.tmp").write_bytes(b"half")
    (folder / "notes.txt").write_bytes(b"")
    assert await store.list_segments("t", 0) == [info.name]


async def test_segment_is_plain_parquet_with_its_summary_and_statistics(
        store: ArchiveStore, tmp_path: Path) -> None:
    info = await write_segment(store, "t", 7, numbered(30), SegmentSettings(row_group_max_rows=10))
    metadata = pq.read_metadata(tmp_path / "archive" / info.name)
    summary = {k: v for k, v in (metadata.metadata or {}).items() if k.startswith(b"streamgate.")}
    assert summary[b"streamgate.topic"] == b"t"
    assert summary[b"streamgate.partition"] == b"7"
    assert summary[b"streamgate.first_offset"] == info.first_offset.encode()
    assert summary[b"streamgate.count"] == b"30"
    assert metadata.num_row_groups == 3
    last = metadata.row_group(2)
    assert last.column(0).compression == "ZSTD"
    timestamps = last.column(2).statistics
    assert timestamps.has_min_max
    assert (timestamps.min, timestamps.max) == (_utc(BASE_MS + 20 // 3), _utc(BASE_MS + 29 // 3))


def _utc(ms: int) -> datetime:
    return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=ms)


async def test_columns_of_nulls_in_a_row_group_are_not_decoded_yet_read_as_nulls(
        store: ArchiveStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the first row group has neither keys nor headers, the second both
    entries = [(f"{BASE_MS + i}-0", [b"v", b"1"] if i < 10 else [b"Kk", b"2", b"h", b'{"a":"b"}'])
               for i in range(20)]
    info = await write_segment(store, "t", 0, entries, SegmentSettings(row_group_max_rows=10))
    asked: list[list[str]] = []
    read_row_group = pq.ParquetFile.read_row_group

    def spied(self: pq.ParquetFile, group: int, columns: list[str], **kwargs: object) -> pa.Table:
        asked.append(list(columns))
        return read_row_group(self, group, columns=columns, **kwargs)

    monkeypatch.setattr(pq.ParquetFile, "read_row_group", spied)
    with pa.OSFile(str(tmp_path / "archive" / info.name)) as file:
        table = SegmentFile(file, info.name).table(["offset_ms", "key", "headers"])
    assert asked == [["offset_ms", "offset_seq"], ["offset_ms", "offset_seq", "key", "headers"]]
    assert table.column_names == ["offset_ms", "key", "headers"]
    assert table["key"].to_pylist() == [None] * 10 + [b"k"] * 10
    assert table["headers"].to_pylist() == [None] * 10 + [b'{"a":"b"}'] * 10
    assert table["offset_ms"].to_pylist() == [BASE_MS + i for i in range(20)]
