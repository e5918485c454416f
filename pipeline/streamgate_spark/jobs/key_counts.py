"""Counts per key per minute with a watermark, written by foreachBatch idempotently on batch_id.

Each micro-batch emits the updated (window, key, count) rows (update mode) and writes them with
``mode("overwrite")`` to ``<output>/batch_id=<n>``: a batch replayed after a crash overwrites its
own directory, never duplicates it. The current count of a (window, key) is the row of the highest
batch_id. Windows older than the watermark (event time minus ``--watermark``) are final and dropped
from state.

    python -m streamgate_spark.jobs.key_counts --topic orders --redis-nodes 127.0.0.1:7000 \\
        --partitions 0,1 \\
        --output /data/order-counts --checkpoint /data/order-counts-checkpoint
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from pyspark.sql import DataFrame, SparkSession, functions
from pyspark.sql.streaming.query import StreamingQuery

from streamgate_spark.jobs.common import (
    job_parser,
    read_topic,
    run_job,
    source_options,
    with_trigger,
)


def counts_per_key_per_minute(rows: DataFrame, watermark: str) -> DataFrame:
    """(window_start, window_end, key, count) over one-minute event-time windows."""
    windowed = (rows.withWatermark("timestamp", watermark)
                .groupBy(functions.window("timestamp", "1 minute"), functions.col("key"))
                .count())
    return windowed.select(functions.col("window.start").alias("window_start"),
                           functions.col("window.end").alias("window_end"),
                           functions.col("key").cast("string").alias("key"), "count")


def batch_writer(output: str) -> Callable[[DataFrame, int], None]:
    """A foreachBatch function that (over)writes ``<output>/batch_id=<n>``: replays are
    idempotent."""
    def write(batch: DataFrame, batch_id: int) -> None:
        batch.write.mode("overwrite").parquet(f"{output}/batch_id={batch_id}")

    return write


def start(spark: SparkSession, options: Mapping[str, str], output: str, checkpoint: str, *,
          watermark: str = "1 minute", available_now: bool = True,
          interval: str = "10 seconds") -> StreamingQuery:
    """Start the aggregation of ``options``' topic into ``output``."""
    counts = counts_per_key_per_minute(read_topic(spark, options), watermark)
    writer = (counts.writeStream.outputMode("update").foreachBatch(batch_writer(output))
              .option("checkpointLocation", checkpoint))
    return with_trigger(writer, available_now, interval).start()


def main(argv: list[str] | None = None) -> None:
    """CLI entry point."""
    parser = job_parser(__doc__)
    parser.add_argument("--output", required=True,
                        help="output directory (one sub-directory per batch)")
    parser.add_argument("--watermark", default="1 minute",
                        help="how late an entry may be and still count")
    args = parser.parse_args(argv)
    run_job("streamgate-key-counts", args.master, lambda spark: start(
        spark, source_options(args), args.output, args.checkpoint, watermark=args.watermark,
        available_now=args.available_now, interval=args.trigger_interval))


if __name__ == "__main__":
    main()
