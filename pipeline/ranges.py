"""A planned read of one partition, (start, end], and its execution on an executor with paged
XRANGE."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import InputPartition
from redis.exceptions import ResponseError

from pipeline.errors import StreamgateDataLoss, StreamgateSnapshotExpired
from pipeline.options import RedisTls
from pipeline.rows import to_record_batch
from pipeline.streams import entries_in_range, open_cluster
from storage.compaction import SNAPSHOT_LUA
from storage.keys import key_registry_key, log_key

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


def read_range(planned: StreamRange) -> Iterator[pa.RecordBatch]:
    """Arrow batches of every entry in the range, opening (and closing) a cluster client here."""
    client = open_cluster(planned.redis_nodes, planned.redis_tls)
    try:
        key = log_key(planned.topic, planned.partition)
        pages = entries_in_range(client, key, planned.start, planned.end, planned.page_size)
        checked = False
        for page in pages:
            if not checked:
                _check_first(planned, page[0][0].decode())
                checked = True
            yield to_record_batch(planned.topic, planned.partition, page)
        if not checked:
            _check_first(planned, None)
    finally:
        client.close()


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
            page = [(entry_id, dict(zip(fields[0::2], fields[1::2], strict=True)))
                    for entry_id, fields in items]
            if page:
                yield to_record_batch(planned.topic, planned.partition, page)
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
