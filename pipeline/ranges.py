"""A planned read of one partition, (start, end], and its execution on an executor with paged
XRANGE."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from pipeline.errors import StreamgateDataLoss
from pipeline.options import RedisTls
from pipeline.rows import to_record_batch
from pipeline.streams import entries_in_range, open_cluster
from storage.keys import log_key

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
