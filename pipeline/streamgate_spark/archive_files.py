"""Segment files of the archive tier read synchronously, as Spark's driver and executors need them:
where the archive is (``archiveUrl`` and the S3 settings) and the Arrow columns of an offset range
of one segment, only the row groups that may hold it decoded."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.fs as pafs

from storage.archive.object_store import S3Settings, archive_location
from storage.archive.segment_reader import SegmentFile
from storage.errors import ArchiveUnavailable
from streamgate_spark.errors import ArchiveReadFailed

OFFSET_COLUMNS = ("offset_ms", "offset_seq")
# What reading a file can raise: I/O errors (a missing file among them), Arrow's own (a truncated
# or corrupt file) and storage's ArchiveUnavailable (a Parquet file, but none the tier wrote).
_FAILURES = (OSError, pa.ArrowException, ArchiveUnavailable)


@dataclass(frozen=True)
class ArchiveAccess:
    """Where the archive's segments are: ``url`` (``file:///path`` or ``s3://bucket/prefix``, as
    the gateway's ``archive_url``) and, for S3, how to reach the store. Picklable: tasks carry it
    and open their own filesystem."""

    url: str
    s3: S3Settings | None = None

    def location(self) -> tuple[pafs.FileSystem, str]:
        """A filesystem reaching the archive and the folder segment names are relative to
        (nothing is contacted yet); ValueError for a URL that is neither form."""
        return archive_location(self.url, self.s3)

    def root(self) -> str:
        """The folder segment names are relative to; ValueError for a URL of neither form."""
        return self.location()[1]


class SegmentFiles:
    """Reads ranges of the archive's segment files over one filesystem (opened on first use)."""

    def __init__(self, access: ArchiveAccess) -> None:
        self.access = access
        self._location: tuple[pafs.FileSystem, str] | None = None

    def table(self, name: str, columns: Sequence[str] | None, after: str,
              until: str) -> pa.Table:
        """The segment's entries in (after, until] as a table of ``columns`` (None: all);
        ArchiveReadFailed when the file cannot be read."""
        if self._location is None:
            self._location = self.access.location()
        filesystem, root = self._location
        try:
            with filesystem.open_input_file(f"{root}/{name}") as file:
                return SegmentFile(file, name).table(columns, after, until)
        except _FAILURES as exc:
            raise ArchiveReadFailed(self.access.url, name, str(exc)) from exc

    def offsets(self, name: str, after: str, until: str) -> list[str]:
        """The offsets (stream IDs) of the segment's entries in (after, until], in order."""
        table = self.table(name, OFFSET_COLUMNS, after, until)
        return [f"{ms}-{seq}" for ms, seq in zip(table["offset_ms"].to_pylist(),
                                                 table["offset_seq"].to_pylist(), strict=True)]
