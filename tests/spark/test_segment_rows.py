"""A segment file's rows as the source's Arrow batches, read from a real file: values that are not
UTF-8 have no text, headers become a map, offsets and timestamps come from the offset columns."""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson
import pytest

from storage.archive.object_store import open_archive
from storage.archive.segments import SegmentInfo, write_segment
from streamgate_spark.archive_files import ArchiveAccess, SegmentFiles
from streamgate_spark.errors import ArchiveReadFailed
from streamgate_spark.rows import ARROW_SCHEMA, SEGMENT_COLUMNS, segment_batch

pytestmark = pytest.mark.spark

ENTRIES = [
    (b"1700000000000-0", [b"Kk0", b'{"n":0}']),
    (b"1700000000000-1", [b"v", b"\xff\xfe", b"h", orjson.dumps({"a": "1"})]),
    (b"1700000000001-7", [b"Kk2", "é".encode(), b"h", b""]),
]


def written(root: Path) -> SegmentInfo:
    async def write() -> SegmentInfo:
        async with open_archive(f"file://{root}") as store:
            return await write_segment(store, "t", 3, ENTRIES)

    return asyncio.run(write())


def test_segment_rows_become_the_source_columns(tmp_path: Path) -> None:
    info = written(tmp_path)
    files = SegmentFiles(ArchiveAccess(f"file://{tmp_path}"))
    table = files.table(info.name, SEGMENT_COLUMNS, "0-0", info.last_offset)
    (batch,) = [segment_batch("t", 3, rows) for rows in table.to_batches()]
    assert batch.schema == ARROW_SCHEMA
    rows = batch.to_pylist()
    assert [row["offset"] for row in rows] == [entry_id.decode() for entry_id, _ in ENTRIES]
    assert [(row["topic"], row["partition"]) for row in rows] == [("t", 3)] * 3
    assert [row["key"] for row in rows] == [b"k0", None, b"k2"]
    assert [row["value_str"] for row in rows] == ['{"n":0}', None, "é"]
    assert [row["headers"] for row in rows] == [None, [("a", "1")], None]
    assert [row["timestamp"].timestamp() for row in rows] == [1700000000.0, 1700000000.0,
                                                              1700000000.001]


def test_a_range_cut_inside_a_segment_reads_only_its_offsets(tmp_path: Path) -> None:
    info = written(tmp_path)
    files = SegmentFiles(ArchiveAccess(f"file://{tmp_path}"))
    assert files.offsets(info.name, "1700000000000-0", "1700000000001-7") == [
        "1700000000000-1", "1700000000001-7"]
    assert files.offsets(info.name, "0-0", "1700000000000-5") == [
        "1700000000000-0", "1700000000000-1"]


def test_a_missing_segment_file_fails_naming_it(tmp_path: Path) -> None:
    files = SegmentFiles(ArchiveAccess(f"file://{tmp_path}"))
    with pytest.raises(ArchiveReadFailed, match=r"cannot read segment t/3/gone\.parquet"):
        files.offsets("t/3/gone.parquet", "0-0", "1-0")
