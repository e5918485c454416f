"""The batch reader: one read of (startingOffsets, endingOffsets] per partition."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition

from streamgate_spark import stream_ids
from streamgate_spark.options import LATEST
from streamgate_spark.planner import Planner
from streamgate_spark.ranges import read_planned


class StreamgateBatchReader(DataSourceReader):
    """Plans its ranges on the driver; read() runs on executors with their own clients."""

    def __init__(self, planner: Planner, columns: tuple[str, ...] | None = None) -> None:
        self.planner = planner
        self.columns = columns  # a user-given schema's columns (None: all)

    def partitions(self) -> Sequence[InputPartition]:
        """One task per partition with entries between the starting and ending offsets."""
        options = self.planner.options
        try:
            start = {p: self.planner.resolve(p, options.start_for(p))
                     for p in self.planner.partitions}
            end = {p: self._end(p, start[p]) for p in self.planner.partitions}
            ranges: list[InputPartition] = list(self.planner.ranges(start, end))
            if options.from_snapshot:
                ranges = [*self.planner.snapshot_ranges(start), *ranges]
            return ranges
        finally:
            self.planner.close()

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """One planned range (segment files, then paged XRANGE) or a snapshot's pages, as Arrow
        batches."""
        return read_planned(partition, self.columns)

    def _end(self, partition: int, start: str) -> str:
        position = self.planner.options.end_for(partition)
        if position == LATEST:
            return self.planner.latest({partition: start})[partition]
        return stream_ids.later(start, self.planner.resolve(partition, position))
