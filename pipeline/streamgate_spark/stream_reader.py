"""The streaming reader: Spark checkpoints {partition: stream ID}; each micro-batch reads (start,
end]."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from streamgate_spark import stream_ids
from streamgate_spark.planner import Offsets, Planner, from_json, starts_from_snapshot, to_json
from streamgate_spark.ranges import read_planned


class StreamgateStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Admission control maps maxEntriesPerTrigger to ReadMaxRows; availableNow stops at the
    prepared target."""

    def __init__(self, planner: Planner, columns: tuple[str, ...] | None = None) -> None:
        self.planner = planner
        self.columns = columns  # a user-given schema's columns (None: all)
        self._target: Offsets | None = None

    def initialOffset(self) -> dict[str, str]:  # noqa: N802 - Spark's method name
        """Where a new query starts (a restarted one starts from its checkpoint instead)."""
        options = self.planner.options
        return to_json({p: self.planner.resolve(p, options.start_for(p))
                        for p in self.planner.partitions}, snapshot=options.from_snapshot)

    def getDefaultReadLimit(self) -> ReadLimit:  # noqa: N802
        """ReadMaxRows(maxEntriesPerTrigger) when set, else everything available."""
        cap = self.planner.options.max_entries_per_trigger
        return ReadAllAvailable() if cap is None else ReadMaxRows(cap)

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802
        """Freeze the target: entries written after this call belong to the next run."""
        self._target = self.planner.latest({p: "0-0" for p in self.planner.partitions})

    def latestOffset(self, start: dict[str, str], limit: ReadLimit) -> dict[str, str]:  # noqa: N802
        """The end of the next micro-batch: newest entries (or the availableNow target), within
        ``limit``."""
        positions = self._with_new_partitions(from_json(start))
        self.planner.check_retention(positions)
        self.planner.publish(positions)  # ``start`` is the end of a committed batch
        ends = (self.planner.latest(positions) if self._target is None
                else self._capped_by_target(positions))
        if isinstance(limit, ReadMaxRows):
            ends = self.planner.bounded(positions, ends, limit.max_rows)
        return to_json(ends)

    def partitions(self, start: dict[str, str], end: dict[str, str]) -> Sequence[InputPartition]:
        """One task per partition that has entries in (start, end]; on a start from snapshots, one
        more per partition reading its snapshot as of its start."""
        self.planner.refresh_reading()
        ranges: list[InputPartition] = list(self.planner.ranges(from_json(start), from_json(end)))
        if starts_from_snapshot(start):
            ranges = [*self.planner.snapshot_ranges(from_json(start)), *ranges]
        return ranges

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Runs on an executor: the planned range's archived entries from their segment files,
        then paged XRANGE, as Arrow batches."""
        return read_planned(partition, self.columns)

    def commit(self, end: dict[str, str]) -> None:
        """Spark finished every batch up to ``end``: publish it as the consumer group's position."""
        self.planner.publish(from_json(end))

    def stop(self) -> None:
        """The query ended: close the driver's client."""
        self.planner.close()

    def _with_new_partitions(self, positions: Offsets) -> Offsets:
        # A partition missing from the checkpoint (the source was given more partitions) starts at
        # earliest.
        missing = {p: self.planner.resolve(p, "earliest") for p in self.planner.partitions
                   if p not in positions}
        return {**positions, **missing}

    def _capped_by_target(self, positions: Offsets) -> Offsets:
        assert self._target is not None
        return {p: stream_ids.later(position, self._target.get(p, position))
                for p, position in positions.items()}
