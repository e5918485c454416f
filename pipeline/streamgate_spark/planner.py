"""Driver-side offset planning shared by the batch and streaming readers.

Positions are exclusive stream IDs per partition, in either tier (``streamgate_spark.archived``).
``earliest`` resolves to just before the oldest retained entry, archived ones included, ``latest``
to the last generated ID; a planned end is always an existing entry's ID (or the start), so a range
can never grow after planning: Redis only accepts IDs above the last one, and a move keeps IDs.
"""

from __future__ import annotations

import logging

from redis.cluster import RedisCluster

from storage.keys import log_key
from streamgate_spark import archived, stream_ids
from streamgate_spark.archive_files import SegmentFiles
from streamgate_spark.budget import allocate
from streamgate_spark.data_loss import find_loss, handle_loss
from streamgate_spark.options import EARLIEST, LATEST, SNAPSHOT, Position, SourceOptions
from streamgate_spark.progress import group_position, publish_position
from streamgate_spark.ranges import SnapshotRange, StreamRange
from streamgate_spark.schema_reading import SchemaReading, refreshed
from streamgate_spark.streams import last_id, open_cluster, stream_state
from streamgate_spark.topic_partitions import snapshot_lag_ms

log = logging.getLogger(__name__)

Offsets = dict[int, str]


class Planner:
    """Resolves positions, bounds micro-batches, checks retention and publishes progress for one
    topic."""

    def __init__(self, options: SourceOptions, partitions: tuple[int, ...],
                 reading: SchemaReading | None = None) -> None:
        self.options = options
        self.partitions = partitions
        self.reading = reading  # the schema version to read at, planned into every range
        self.lost_entries = 0
        self._client: RedisCluster | None = None
        self._files: SegmentFiles | None = None
        self._checked: Offsets = {}
        self._published: Offsets = {}

    @property
    def client(self) -> RedisCluster:
        """The driver's cluster client, opened on first use (never pickled)."""
        if self._client is None:
            self._client = open_cluster(self.options.redis_nodes, self.options.redis_tls)
        return self._client

    @property
    def files(self) -> SegmentFiles | None:
        """The archive's segment files as the driver reads them (None: no ``archiveUrl``)."""
        if self._files is None and self.options.archive is not None:
            self._files = SegmentFiles(self.options.archive)
        return self._files

    def close(self) -> None:
        """Close the driver's client; idempotent."""
        if self._client is not None:
            self._client.close()
            self._client = None

    def key(self, partition: int) -> str:
        """The partition's stream key."""
        return log_key(self.options.topic, partition)

    def resolve(self, partition: int, position: Position) -> str:
        """An exclusive start ID for earliest/latest/an ID; earliest and timestamps never precede
        retention."""
        if position in (LATEST, SNAPSHOT):  # a snapshot is taken as of the last ID now
            return stream_state(self.client, self.key(partition)).last_generated_id
        if position == EARLIEST:
            return archived.log_state(self.client, self.options.topic, partition).floor
        return position

    def latest(self, start: Offsets) -> Offsets:
        """The newest entry of every partition (or its start when it has nothing newer), in the
        stream or, when all of it is archived, in the archive."""
        ends = {}
        for partition, position in start.items():
            newest = (last_id(self.client, self.key(partition))
                      or archived.newest_archived(self.client, self.options.topic, partition))
            ends[partition] = position if newest is None else stream_ids.later(position, newest)
        return ends

    def bounded(self, start: Offsets, ends: Offsets, max_rows: int) -> Offsets:
        """Move ends back so the ranges (start, end] hold at most ``max_rows`` entries in total."""
        counted = {partition: self._count(partition, position, ends[partition], max_rows)
                   for partition, position in start.items()}
        shares = allocate(max_rows, {p: count.count for p, count in counted.items()})
        bounded = dict(start)
        for partition, share in shares.items():
            if share == counted[partition].count and share > 0:
                bounded[partition] = counted[partition].last or start[partition]
            elif share > 0:
                nth = self._count(partition, start[partition], ends[partition], share).last
                bounded[partition] = nth or start[partition]
        return bounded

    def _count(self, partition: int, start: str, end: str, limit: int) -> archived.Counted:
        return archived.count_after(self.client, self.files, self.options.topic, partition,
                                    start, end, limit)

    def check_retention(self, start: Offsets) -> None:
        """Fail (or log and count) when retention trimmed entries after a start position; once per
        position."""
        for partition, position in start.items():
            if self._checked.get(partition) == position:
                continue
            key = self.key(partition)
            loss = find_loss(position, archived.log_state(self.client, self.options.topic,
                                                          partition),
                             group_position(self.client, key, self.options.consumer_name))
            if loss is not None:
                self.lost_entries += handle_loss(self.options.topic, partition, loss,
                                                 self.options.fail_on_data_loss)
            self._checked[partition] = position

    def publish(self, positions: Offsets) -> None:
        """Record committed positions in the pipeline's consumer group (advisory; failures are
        logged)."""
        if not self.options.commit_progress:
            return
        for partition, position in positions.items():
            if self._published.get(partition) == position:
                continue
            try:
                publish_position(self.client, self.options.topic, partition,
                                 self.options.consumer_name, position)
            except Exception:  # progress is advisory: never fail a batch for it
                log.warning("could not publish progress of partition %d", partition, exc_info=True)
                continue
            self._published[partition] = position

    def snapshot_ranges(self, as_of: Offsets) -> list[SnapshotRange]:
        """One snapshot read per partition, as of its offset in ``as_of``."""
        lag_ms = snapshot_lag_ms(self.options)
        return [SnapshotRange(topic=self.options.topic, partition=partition, as_of=position,
                              lag_ms=lag_ms, redis_nodes=self.options.redis_nodes,
                              page_size=self.options.page_size, redis_tls=self.options.redis_tls,
                              reading=self.reading)
                for partition, position in sorted(as_of.items())]

    def ranges(self, start: Offsets, end: Offsets) -> list[StreamRange]:
        """One planned range per partition with entries in (start, end]."""
        planned = []
        for partition in sorted(end):
            begin = start.get(partition, stream_ids.ZERO)
            if not stream_ids.before(begin, end[partition]):
                continue
            first = self._count(partition, begin, end[partition], 1).first
            planned.append(StreamRange(
                topic=self.options.topic, partition=partition, start=begin, end=end[partition],
                first_id=first, redis_nodes=self.options.redis_nodes,
                page_size=self.options.page_size, fail_on_data_loss=self.options.fail_on_data_loss,
                redis_tls=self.options.redis_tls, archive=self.options.archive,
                reading=self.reading))
        return planned

    def refresh_reading(self) -> None:
        """Take the schema versions registered since the query started (a stream runs for long:
        values of a newer version would otherwise all fail to convert); the versions known so far
        stay when the gateway cannot be asked."""
        if self.reading is None:
            return
        try:
            self.reading = refreshed(self.reading, self.options)
        except Exception:  # the versions known so far still convert what they did
            log.warning("could not refresh the schema versions of %s", self.options.topic,
                        exc_info=True)

    def __getstate__(self) -> dict[str, object]:
        state = dict(self.__dict__)
        state["_client"] = None  # a cluster client does not pickle; workers open their own in
                                 # read()
        state["_files"] = None
        return state


SNAPSHOT_MARK = "snapshot"  # in a start offset: its positions are snapshots' offsets, read first


def to_json(offsets: Offsets, *, snapshot: bool = False) -> dict[str, str]:
    """Offsets as Spark checkpoints them: {"<partition>": "<stream ID>"}; a query's first start
    from snapshots says so (``"snapshot": "true"``): that batch reads each partition's snapshot as
    of its position, then what follows it."""
    doc = {str(partition): position for partition, position in sorted(offsets.items())}
    return {**doc, SNAPSHOT_MARK: "true"} if snapshot else doc


def from_json(doc: dict[str, str]) -> Offsets:
    """Offsets read back from Spark's checkpoint."""
    return {int(partition): position for partition, position in doc.items()
            if partition != SNAPSHOT_MARK}


def starts_from_snapshot(doc: dict[str, str]) -> bool:
    """Whether a start offset (``to_json``) asks for the snapshots first."""
    return doc.get(SNAPSHOT_MARK) == "true"
