"""The ``streamgate`` Python Data Source: batch and streaming reads of one topic's partition
streams, and a streaming sink publishing to a topic."""

from __future__ import annotations

from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
)
from pyspark.sql.types import StructType

from streamgate_spark.batch_reader import StreamgateBatchReader
from streamgate_spark.options import parse_options
from streamgate_spark.planner import Planner
from streamgate_spark.rows import AT_VERSION_COLUMNS, COLUMNS, projection, schema_ddl
from streamgate_spark.schema_reading import schema_reading
from streamgate_spark.sink import StreamgateStreamWriter
from streamgate_spark.sink_options import parse_sink_options
from streamgate_spark.stream_reader import StreamgateStreamReader
from streamgate_spark.topic_partitions import source_partitions

FORMAT = "streamgate"


class StreamgateDataSource(DataSource):
    """``spark.read/readStream.format("streamgate")`` and ``writeStream.format("streamgate")``;
    see docs/pipeline.md for the options."""

    @classmethod
    def name(cls) -> str:
        """The format name Spark registers."""
        return FORMAT

    def schema(self) -> str:
        """topic, partition, offset, key, value, value_str, headers, timestamp; and schema_error
        when reading at a ``schemaVersion``."""
        return schema_ddl(self._columns())

    def reader(self, schema: StructType) -> DataSourceReader:
        """The batch reader; a user-given ``schema`` (a subset of the columns) cuts each batch to
        it before the JVM copies it."""
        return StreamgateBatchReader(self._planner(), self._projection(schema))

    # Spark's method name
    def streamReader(self, schema: StructType) -> DataSourceStreamReader:  # noqa: N802
        """The micro-batch reader, as ``reader``."""
        return StreamgateStreamReader(self._planner(), self._projection(schema))

    # Spark's method name
    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:  # noqa: N802
        """The micro-batch writer (the sink)."""
        return StreamgateStreamWriter(parse_sink_options(self.options), schema)

    def _planner(self) -> Planner:
        options = parse_options(self.options)
        # the schema versions are read here, at planning: an unknown one fails the query first
        return Planner(options, source_partitions(options), schema_reading(options))

    def _columns(self) -> dict[str, str]:
        return AT_VERSION_COLUMNS if self.options.get("schemaVersion") else COLUMNS

    def _projection(self, schema: StructType) -> tuple[str, ...] | None:
        return projection([(field.name, field.dataType.simpleString()) for field in schema.fields],
                          self._columns())


def register(spark: SparkSession) -> None:
    """Make ``format("streamgate")`` available in ``spark``."""
    spark.dataSource.register(StreamgateDataSource)


def reader_options(**options: Any) -> dict[str, str]:
    """Options as Spark wants them (strings): ``reader_options(topic="t",
    maxEntriesPerTrigger=1000)``."""
    return {name: str(value).lower() if isinstance(value, bool) else str(value)
            for name, value in options.items()}
