"""A planned read of one partition, (start, end], and its execution on an executor: archived
entries from their segment files, the rest with paged XRANGE."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import InputPartition
from redis.cluster import RedisCluster
from redis.exceptions import ResponseError

from storage.archive.manifest import SegmentRef
from storage.compaction import SNAPSHOT_LUA
from storage.keys import key_registry_key, log_key
from storage.pages import columns_of_items
from streamgate_spark import stream_ids
from streamgate_spark.archive_files import ArchiveAccess, SegmentFiles
from streamgate_spark.archived import first_piece
from streamgate_spark.errors import (
    ArchiveNotConfigured,
    StreamgateDataLoss,
    StreamgateSnapshotExpired,
)
from streamgate_spark.node_pages import NodePages
from streamgate_spark.options import RedisTls
from streamgate_spark.rows import SEGMENT_COLUMNS, record_batch, segment_batch
from streamgate_spark.schema_reading import SchemaReading
from streamgate_spark.streams import forget_cluster, kept_cluster, open_cluster

log = logging.getLogger(__name__)


@dataclass
class StreamRange(InputPartition):
    """The half-open ID range (start, end] of one partition; ``first_id`` is the first entry planned
    in it."""

    topic: str
    partition: int
    start: str
    end: str
    first_id: str | None
    redis_nodes: tuple[tuple[str, int], ...]
    page_size: int
    fail_on_data_loss: bool
    redis_tls: RedisTls | None = None
    archive: ArchiveAccess | None = None
    reading: SchemaReading | None = None  # the schema version to convert to (None: as written)


def read_planned(planned: InputPartition,
                 columns: tuple[str, ...] | None) -> Iterator[pa.RecordBatch]:
    """What a reader's ``read`` runs on an executor: a planned range or a snapshot's pages, each
    batch converted to the schema version the plan carries, if any, then cut to ``columns``
    (None: all) before it goes to the JVM, which copies every column of every row."""
    reading = _reading(planned)
    batches = (read_snapshot(planned) if isinstance(planned, SnapshotRange)
               else read_range(_stream_range(planned)))
    if reading is not None:
        # imported here: the gateway's schema engine is loaded only by a read at a version
        from streamgate_spark.schema_conversion import BatchConversion
        batches = map(BatchConversion(reading).batch, batches)
    if columns is None:
        yield from batches
        return
    for batch in batches:
        yield batch.select(list(columns))


def _reading(planned: InputPartition) -> SchemaReading | None:
    return planned.reading if isinstance(planned, (StreamRange, SnapshotRange)) else None


def _stream_range(planned: InputPartition) -> StreamRange:
    assert isinstance(planned, StreamRange)
    return planned


def read_range(planned: StreamRange) -> Iterator[pa.RecordBatch]:
    """Arrow batches of every entry in the range, archived ones from their segment files, then the
    stream's, over the process's kept cluster client (dropped after a failure) and a socket of
    its own to the partition's primary."""
    client = kept_cluster(planned.redis_nodes, planned.redis_tls)
    key = log_key(planned.topic, planned.partition)
    try:
        with NodePages(client, key, planned.redis_tls) as node:
            checked = False
            for batch in _tiered(planned, client, node):
                if batch.num_rows and not checked:
                    _check_first(planned, batch["offset"][0].as_py())
                    checked = True
                yield batch
            if not checked:
                _check_first(planned, None)
    except Exception:
        forget_cluster()
        raise


def _tiered(planned: StreamRange, client: RedisCluster,
            node: NodePages) -> Iterator[pa.RecordBatch]:
    """The range in offset order across the tiers. A stream page is kept when the manifest,
    asked after it, has no segment holding entries after the page's start: none had left the
    stream when the page was read. Else that segment comes first and the page is read again."""
    cursor, end = planned.start, planned.end
    files = SegmentFiles(planned.archive) if planned.archive is not None else None
    piece = first_piece(client, planned.topic, planned.partition, cursor, end)
    while stream_ids.before(cursor, end):
        if piece is not None:
            until = piece.last_offset if stream_ids.before(piece.last_offset, end) else end
            yield from _archived(planned, files, piece, cursor, until)
            cursor = until
            piece = first_piece(client, planned.topic, planned.partition, cursor, end)
            continue
        page = node.page(f"({cursor}", end, planned.page_size)
        piece = first_piece(client, planned.topic, planned.partition, cursor, end)
        if piece is not None:
            continue  # entries moved meanwhile: the segment first, then this page again
        if not page.rows:
            return
        yield record_batch(planned.topic, planned.partition, page)
        if page.rows < planned.page_size:
            return
        cursor = page.last_id()


def _archived(planned: StreamRange, files: SegmentFiles | None, piece: SegmentRef, after: str,
              until: str) -> Iterator[pa.RecordBatch]:
    if files is None:
        raise ArchiveNotConfigured(planned.topic, planned.partition, piece.first_offset,
                                   piece.last_offset)
    table = files.table(piece.name, SEGMENT_COLUMNS, after, until)
    for rows in table.to_batches():
        yield segment_batch(planned.topic, planned.partition, rows)


@dataclass
class SnapshotRange(InputPartition):
    """A compacted partition's snapshot as of ``as_of``: every key's newest value at or before it
    (tombstones left out), read by pages of keys."""

    topic: str
    partition: int
    as_of: str
    lag_ms: int
    redis_nodes: tuple[tuple[str, int], ...]
    page_size: int
    redis_tls: RedisTls | None = None
    reading: SchemaReading | None = None  # as in StreamRange


def read_snapshot(planned: SnapshotRange) -> Iterator[pa.RecordBatch]:
    """Arrow batches of the snapshot, a page of keys each; ``StreamgateSnapshotExpired`` once the
    snapshot is older than the lag (values it needs may be compacted)."""
    client = open_cluster(planned.redis_nodes, planned.redis_tls)
    keys = (key_registry_key(planned.topic, planned.partition),
            log_key(planned.topic, planned.partition))
    after = b""
    try:
        while True:
            try:
                last, items = client.eval(SNAPSHOT_LUA, 2, *keys, after, planned.as_of,
                                          planned.page_size, planned.lag_ms)
            except ResponseError as exc:
                raise StreamgateSnapshotExpired(planned.topic, planned.partition, planned.as_of,
                                                str(exc)) from exc
            if not last:
                return
            if items:
                yield record_batch(planned.topic, planned.partition, columns_of_items(items))
            after = last
    finally:
        client.close()


def _check_first(planned: StreamRange, first_read: str | None) -> None:
    # IDs only grow, so a different first entry means retention trimmed entries of this range after
    # planning.
    if planned.first_id is None or first_read == planned.first_id:
        return
    error = StreamgateDataLoss(planned.topic, planned.partition, planned.start,
                               first_read or "(none)", None)
    if planned.fail_on_data_loss:
        raise error
    log.warning("%s; continuing (failOnDataLoss=false)", error.message)
