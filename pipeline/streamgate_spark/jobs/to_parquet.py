"""Land a topic in Parquet partitioned by date, exactly once.

Exactly-once comes from two logs: Spark's checkpoint (which stream IDs each batch covers) and the
file sink's ``_spark_metadata`` log (which files each batch committed). A batch replayed after a
crash reads the same (start, end] ranges and its files replace the uncommitted ones; readers of the
output see only committed files. Read the output with Spark (``spark.read.parquet``), which honours
``_spark_metadata``.

    python -m streamgate_spark.jobs.to_parquet --topic orders --redis-nodes 127.0.0.1:7000 \\
        --partitions 0,1,2,3 \\
        --output /data/orders --checkpoint /data/orders-checkpoint --available-now
"""

from __future__ import annotations

from collections.abc import Mapping

from pyspark.sql import SparkSession, functions
from pyspark.sql.streaming.query import StreamingQuery

from streamgate_spark.jobs.common import (
    job_parser,
    read_topic,
    run_job,
    source_options,
    with_trigger,
)


def start(spark: SparkSession, options: Mapping[str, str], output: str, checkpoint: str, *,
          available_now: bool = True, interval: str = "10 seconds") -> StreamingQuery:
    """Start the query writing ``options``' topic to ``output`` (Parquet, partitioned by
    ``date``). The value lands once, as binary: ``value_str`` is ``CAST(value AS STRING)``."""
    rows = (read_topic(spark, options).drop("value_str")
            .withColumn("date", functions.to_date("timestamp")))
    writer = (rows.writeStream.format("parquet").partitionBy("date")
              .option("path", output).option("checkpointLocation", checkpoint))
    return with_trigger(writer, available_now, interval).start()


def main(argv: list[str] | None = None) -> None:
    """CLI entry point."""
    parser = job_parser(__doc__)
    parser.add_argument("--output", required=True, help="Parquet output directory")
    args = parser.parse_args(argv)
    run_job("streamgate-to-parquet", args.master, lambda spark: start(
        spark, source_options(args), args.output, args.checkpoint,
        available_now=args.available_now, interval=args.trigger_interval))


if __name__ == "__main__":
    main()
