"""Republish a topic into another through Spark, exactly once: the streamgate source in, the
streamgate sink out.

Each micro-batch's rows are published through the gateway with idempotency keys made of the query
id, the batch id, the task and the request number; a batch replayed after a crash sends the same
requests again and the gateway answers them as duplicates. Values, keys and headers are copied as
they are (``--value-format json`` for topics of JSON values, else ``binary``).

    python -m streamgate_spark.jobs.to_topic --topic orders --redis-nodes 127.0.0.1:7000 \\
        --gateway http://127.0.0.1:8080 --output-topic orders-copy \\
        --checkpoint /data/orders-copy-checkpoint --available-now
"""

from __future__ import annotations

from collections.abc import Mapping

from pyspark.sql import SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from streamgate_spark.jobs.common import (
    job_parser,
    read_topic,
    run_job,
    source_options,
    with_trigger,
)
from streamgate_spark.source import FORMAT


def start(spark: SparkSession, options: Mapping[str, str], sink: Mapping[str, str],
          checkpoint: str, *, available_now: bool = True,
          interval: str = "10 seconds") -> StreamingQuery:
    """Start the query publishing ``options``' topic with the sink options ``sink``."""
    rows = read_topic(spark, options).select("key", "value", "headers")
    writer = (rows.writeStream.format(FORMAT).options(**sink)
              .option("checkpointLocation", checkpoint))
    return with_trigger(writer, available_now, interval).start()


def main(argv: list[str] | None = None) -> None:
    """CLI entry point."""
    parser = job_parser(__doc__)
    parser.add_argument("--output-topic", required=True)
    parser.add_argument("--value-format", choices=("binary", "json"), default="binary")
    parser.add_argument("--batch-size", type=int, default=1000, help="rows per publish request")
    args = parser.parse_args(argv)
    if not args.gateway:
        parser.error("--gateway is required: the sink publishes through it")
    sink = {"topic": args.output_topic, "gateway": args.gateway,
            "valueFormat": args.value_format, "batchSize": str(args.batch_size)}
    run_job("streamgate-to-topic", args.master, lambda spark: start(
        spark, source_options(args), sink, args.checkpoint,
        available_now=args.available_now, interval=args.trigger_interval))


if __name__ == "__main__":
    main()
