"""The ``streamgate`` sink: ``df.writeStream.format("streamgate")`` publishes each micro-batch's
rows to a topic through the gateway (acks=all by default), exactly once across replayed batches.

A task cuts its rows into requests by row count and bytes only, and sends each under the
Idempotency-Key ``spark-<query id>-<batch id>-<task partition>-<request number>``. A batch Spark
replays after a crash reads the same input (its offsets are logged before it runs, and the
streamgate source reads the same entries in the same order), so it sends the same requests under
the same keys, and the gateway answers what was written before as duplicates instead of writing it
again. Requests of a task leave one after another, so a key's rows keep their order.
"""

from __future__ import annotations

import asyncio
import base64
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import orjson
import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from streamgate_spark.errors import InvalidSinkOption, SinkOutsideStreamingQuery
from streamgate_spark.sink_options import SinkColumns, SinkOptions, sink_columns

log = logging.getLogger(__name__)

# What Spark's streaming engine sets on every task of a micro-batch (local properties).
QUERY_ID_PROPERTY = "sql.streaming.queryId"
BATCH_ID_PROPERTY = "streaming.sql.batchId"


@dataclass
class SinkCommit(WriterCommitMessage):
    """What one task published: messages written now and those the gateway already held."""

    partition: int
    written: int
    duplicates: int


class StreamgateStreamWriter(DataSourceStreamArrowWriter):
    """Created on the driver (options and columns checked there); ``write`` runs in each task."""

    def __init__(self, options: SinkOptions, schema: StructType) -> None:
        self.options = options
        self.columns = sink_columns(schema)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommit:
        """Publish the task's rows, a request at a time, under keys of this batch and task."""
        context = TaskContext.get()
        query = context.getLocalProperty(QUERY_ID_PROPERTY) if context else None
        batch = context.getLocalProperty(BATCH_ID_PROPERTY) if context else None
        if context is None or not query or batch is None:
            raise SinkOutsideStreamingQuery()
        prefix = f"spark-{query}-{batch}-{context.partitionId()}"
        requests = cut_requests(iterator, self.columns, self.options)
        written, duplicates = asyncio.run(publish(self.options, prefix, requests))
        return SinkCommit(context.partitionId(), written, duplicates)

    def commit(self, messages: Sequence[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        """Every task published its rows: log the batch's counts."""
        done = [message for message in messages if isinstance(message, SinkCommit)]
        log.info("batch %d to %s: %d written, %d already there", batchId, self.options.topic,
                 sum(m.written for m in done), sum(m.duplicates for m in done))

    def abort(self, messages: Sequence[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        """A task failed: what was published stays; the batch's replay sends it as duplicates."""
        log.warning("batch %d to %s aborted; its replay publishes the rest, nothing twice",
                    batchId, self.options.topic)


def cut_requests(batches: Iterator[pa.RecordBatch], columns: SinkColumns,
                 options: SinkOptions) -> Iterator[list[bytes]]:
    """The rows as encoded messages, cut into requests by ``batch_size`` rows or
    ``max_request_bytes`` (whichever comes first): the same rows always make the same requests."""
    request: list[bytes] = []
    size = 0
    for batch in batches:
        for message in encoded_messages(batch, columns, options.value_format):
            if request and (len(request) == options.batch_size
                            or size + len(message) + 1 > options.max_request_bytes):
                yield request
                request, size = [], 0
            request.append(message)
            size += len(message) + 1
    if request:
        yield request


def encoded_messages(batch: pa.RecordBatch, columns: SinkColumns,
                     value_format: str) -> list[bytes]:
    """One publish API message (JSON) per row: the value verbatim as JSON (``json``) or as
    ``value_b64`` (``binary``), with its key and headers when the row has them."""
    values = batch.column(columns.value).to_pylist()
    keys = batch.column(columns.key).to_pylist() if columns.key is not None else None
    headers = batch.column(columns.headers).to_pylist() if columns.headers is not None else None
    messages = []
    for row, value in enumerate(values):
        parts = [_value(value, value_format)]
        if keys is not None and keys[row] is not None:
            parts.append(b'"key":' + orjson.dumps(_text(keys[row], "key")))
        if headers is not None and headers[row]:
            parts.append(b'"headers":' + orjson.dumps(dict(headers[row])))
        messages.append(b"{" + b",".join(parts) + b"}")
    return messages


def _value(value: bytes | str | None, value_format: str) -> bytes:
    if value is None:
        return b'"value":null'
    data = value.encode() if isinstance(value, str) else value
    if value_format == "json":
        return b'"value":' + data
    return b'"value_b64":"' + base64.b64encode(data) + b'"'


def _text(value: bytes | str, column: str) -> str:
    if isinstance(value, str):
        return value
    try:
        return value.decode()
    except UnicodeDecodeError:
        raise InvalidSinkOption(column, f"a row's {column} is not UTF-8: {value[:32]!r}") from None


async def publish(options: SinkOptions, prefix: str,
                  requests: Iterator[list[bytes]]) -> tuple[int, int]:
    """Send the requests one after another under ``<prefix>-<n>``: (written, duplicates)."""
    # Imported here: every process that imports the source (readers, planners) would pay for
    # the HTTP client otherwise.
    from streamgate_client.producer import Producer, RetryPolicy

    written = duplicates = 0
    async with Producer(options.gateway, options.topic, acks=options.acks,
                        timeout_s=options.timeout_s, api_key=options.api_key, token=options.token,
                        retry=RetryPolicy(max_retries=options.max_retries)) as producer:
        for number, request in enumerate(requests):
            results = await producer.send_request(request, f"{prefix}-{number}")
            repeated = sum(result.duplicate for result in results)
            written, duplicates = written + len(results) - repeated, duplicates + repeated
    return written, duplicates
