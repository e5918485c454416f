"""What every sample job shares: the source's CLI flags, the session, the trigger."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Mapping

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming.query import StreamingQuery
from pyspark.sql.streaming.readwriter import DataStreamWriter

from streamgate_spark.source import FORMAT, register


def add_source_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags mapped one to one onto the source options (see docs/pipeline.md)."""
    parser.add_argument("--topic", required=True)
    parser.add_argument("--redis-nodes", required=True,
                        help="host:port[,host:port...] of the Redis Cluster")
    parser.add_argument("--redis-tls", action="store_true",
                        help="connect to the Redis Cluster over TLS")
    parser.add_argument("--redis-tls-ca-path", help="PEM CA of the Redis nodes' certificates")
    parser.add_argument("--redis-tls-cert-path",
                        help="client certificate for mutual TLS (with --redis-tls-key-path)")
    parser.add_argument("--redis-tls-key-path", help="the client certificate's key")
    parser.add_argument("--archive-url",
                        help="the archive tier's segments: file:///path or s3://bucket/prefix")
    parser.add_argument("--archive-s3-endpoint", help="host:port of an S3-compatible store")
    parser.add_argument("--archive-s3-region")
    parser.add_argument("--archive-s3-scheme", help="http or https (default)")
    parser.add_argument("--archive-s3-credentials-chain", action="store_true",
                        help="the AWS SDK finds the store's credentials (e.g. AWS_* variables)")
    parser.add_argument("--gateway", help="gateway base URL, to learn the topic's partition count")
    parser.add_argument("--partitions", help="comma-separated partitions (instead of --gateway)")
    parser.add_argument("--starting-offsets", default="earliest", help="earliest | latest | JSON")
    parser.add_argument("--max-entries-per-trigger", type=int)
    parser.add_argument("--checkpoint", required=True,
                        help="checkpoint directory (the source of truth)")
    parser.add_argument("--master",
                        help="Spark master (default: spark-submit's --master, else local[2])")
    parser.add_argument("--available-now", action="store_true",
                        help="process what is there, then stop")
    parser.add_argument("--trigger-interval", default="10 seconds")


def source_options(args: argparse.Namespace) -> dict[str, str]:
    """The source options for the parsed flags (unset flags omitted)."""
    options = {
        "topic": args.topic,
        "redisNodes": args.redis_nodes,
        "gateway": args.gateway,
        "partitions": args.partitions,
        "startingOffsets": args.starting_offsets,
        "maxEntriesPerTrigger": args.max_entries_per_trigger,
        "redisTls": "true" if args.redis_tls else None,
        "redisTlsCaPath": args.redis_tls_ca_path,
        "redisTlsCertPath": args.redis_tls_cert_path,
        "redisTlsKeyPath": args.redis_tls_key_path,
        "archiveUrl": args.archive_url,
        "archiveS3Endpoint": args.archive_s3_endpoint,
        "archiveS3Region": args.archive_s3_region,
        "archiveS3Scheme": args.archive_s3_scheme,
        "archiveS3CredentialsChain": "true" if args.archive_s3_credentials_chain else None,
    }
    return {name: str(value) for name, value in options.items() if value is not None}


def session(app_name: str, master: str | None = None) -> SparkSession:
    """A session with the source registered; workers run this interpreter (so they can import
    pipeline). ``master`` None: spark-submit's ``--master``, or local[2] under plain python."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name)
    # A builder option wins over spark-submit's --master: set one only when asked to, or when no
    # spark-submit started this process (it hands Python its JVM in PYSPARK_GATEWAY_PORT).
    if master is not None or "PYSPARK_GATEWAY_PORT" not in os.environ:
        builder = builder.master(master or "local[2]")
    spark = builder.getOrCreate()
    register(spark)
    return spark


def read_topic(spark: SparkSession, options: Mapping[str, str]) -> DataFrame:
    """The streaming DataFrame of the topic."""
    return spark.readStream.format(FORMAT).options(**options).load()


def with_trigger(writer: DataStreamWriter, available_now: bool, interval: str) -> DataStreamWriter:
    """availableNow (bounded by maxEntriesPerTrigger per batch) or a processing-time trigger."""
    return (writer.trigger(availableNow=True) if available_now
            else writer.trigger(processingTime=interval))


def job_parser(description: str | None) -> argparse.ArgumentParser:
    """A sample job's command line: its description and the source's flags."""
    parser = argparse.ArgumentParser(description=description,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_source_arguments(parser)
    return parser


def run_job(app_name: str, master: str | None,
            start: Callable[[SparkSession], StreamingQuery]) -> None:
    """Open a session, run the query ``start`` makes until it ends, stop the session."""
    spark = session(app_name, master)
    try:
        start(spark).awaitTermination()
    finally:
        spark.stop()
