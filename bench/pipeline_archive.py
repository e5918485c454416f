"""The Spark source over archived ranges against the same entries hot in Redis, in one run.

Starts its own Redis Cluster (devstack, no replicas), writes the same entries of 200 bytes over 4
partitions into two topics in the gateway's field format, moves every entry of one of them into
segment files on a local path (the archive tier's own move), then alternates ``--rounds`` times:
  - bare:     sync redis-py (hiredis) paged XRANGE of the hot topic, partition after partition;
  - hot:      a batch read of the hot topic by the source into Spark's ``noop`` sink;
  - archived: the same read of the archived topic (``archiveUrl``), from its segment files;
  - one copy: the same with a schema of every column but ``value_str`` (each value crosses into
              the JVM once);
  - ceiling:  as many rows of the same shape, built once in memory by each task and handed to Spark
              as they are: what Spark's Python data source path costs by itself (its per-query
              and per-task overhead, the Arrow transfer, the JVM's rows), the archived read's limit;
  - parquet job, hot / archived: streamgate_spark.jobs.to_parquet (availableNow, a new query and
              output each time) over the hot topic, then over the archived one.
The JVM is warmed up first by every read. Prints rows/s of each and the ratios archived/hot,
archived/bare, one copy/bare, ceiling/bare, archived/ceiling and of the two Parquet jobs
(medians), with each series' spread. Nothing here is a test assertion.

    python bench/pipeline_archive.py --entries 1000000
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# Run as a script, this file's directory comes first on sys.path and its name would shadow the
# pipeline package: the project is imported first, the bench modules after it.
BENCH = Path(__file__).resolve().parent
sys.path[:] = [entry for entry in sys.path if Path(entry or ".").resolve() != BENCH]

import pyarrow as pa  # noqa: E402
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition  # noqa: E402
from redis.cluster import ClusterNode, RedisCluster  # noqa: E402

from storage.archive.object_store import open_archive  # noqa: E402
from storage.redis_store import RedisStreamStore  # noqa: E402
from storage.settings import RedisStoreSettings  # noqa: E402
from streamgate_devstack import DevStack, DevStackConfig  # noqa: E402
from streamgate_spark.jobs import common, to_parquet  # noqa: E402
from streamgate_spark.rows import COLUMNS, SCHEMA_DDL, segment_batch  # noqa: E402

sys.path.append(str(BENCH))


def _bench_pipeline() -> Any:
    """bench/pipeline.py (its fill, bare read and report line), under a name that is not the
    project's pipeline package."""
    spec = importlib.util.spec_from_file_location("bench_pipeline", BENCH / "pipeline.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SPARK_BENCH = _bench_pipeline()
PARTITIONS: int = SPARK_BENCH.PARTITIONS
VALUE: bytes = SPARK_BENCH.VALUE

Run = tuple[int, float]  # rows, seconds
CEILING_BATCH = 1 << 14  # rows per batch, about a segment's row group here
FIRST_MS = 1_765_000_000_000  # offsets and timestamps as long as today's


def ceiling_batch(partition: int, rows: int) -> pa.RecordBatch:
    """``rows`` entries shaped as the archived read yields them (200-byte values, keys k0..k99,
    no headers), converted by the same code."""
    stored = pa.record_batch({
        "offset_ms": pa.array(range(FIRST_MS, FIRST_MS + rows), pa.uint64()),
        "offset_seq": pa.array([0] * rows, pa.uint64()),
        "timestamp": pa.array(range(FIRST_MS, FIRST_MS + rows), pa.timestamp("ms", tz="UTC")),
        "key": pa.array([b"k%d" % (n % 100) for n in range(rows)], pa.binary()),
        "value": pa.array([VALUE] * rows, pa.binary()),
        "headers": pa.nulls(rows, pa.binary()),
    })
    return segment_batch("cold", partition, stored)


class CeilingReader(DataSourceReader):
    """One task per partition, each yielding its share of ``rows`` from one batch built once."""

    def __init__(self, rows: int) -> None:
        self.rows = rows

    def partitions(self) -> list[InputPartition]:
        return [InputPartition(partition) for partition in range(PARTITIONS)]

    def read(self, partition: InputPartition) -> Any:
        batch, left = ceiling_batch(partition.value, CEILING_BATCH), self.rows // PARTITIONS
        while left > 0:
            yield batch.slice(0, min(left, CEILING_BATCH))
            left -= CEILING_BATCH


class CeilingSource(DataSource):
    """``format("streamgate-ceiling")``: the source's schema, rows from memory."""

    @classmethod
    def name(cls) -> str:
        return "streamgate-ceiling"

    def schema(self) -> str:
        return SCHEMA_DDL

    def reader(self, schema: Any) -> DataSourceReader:
        return CeilingReader(int(self.options["rows"]))


async def archive_all(nodes: list[tuple[str, int]], url: str, topic: str) -> int:
    """Move every entry of ``topic`` into segments; returns how many segments."""
    segments = 0
    async with open_archive(url) as files, \
            RedisStreamStore(RedisStoreSettings(startup_nodes=nodes), archive=files) as store:
        assert store.archive is not None
        for partition in range(PARTITIONS):
            while await store.archive.move_oldest(topic, partition, epoch=1, until=None):
                segments += 1
    return segments


# the source's columns but value_str: each value crosses into the JVM once
ONE_COPY = ", ".join(f"{name} {kind}" for name, kind in COLUMNS.items() if name != "value_str")


def noop_read(spark: Any, options: dict[str, str], rows: int,
              source: str = "streamgate", schema: str | None = None) -> Run:
    """(rows, seconds) of one batch read of the topic's ``rows`` into the ``noop`` sink."""
    started = time.perf_counter()
    reader = spark.read.format(source)
    frame = (reader if schema is None else reader.schema(schema)).options(**options).load()
    frame.write.format("noop").mode("overwrite").save()
    return rows, time.perf_counter() - started


def parquet_job(spark: Any, options: dict[str, str], out: Path) -> Run:
    """(rows, seconds) of the to_parquet job landing the topic in ``out``."""
    run: Run = SPARK_BENCH.timed_query(lambda: to_parquet.start(
        spark, options, str(out / "data"), str(out / "checkpoint")))
    return run


def rounds(client: RedisCluster, spark: Any, hot: dict[str, str], cold: dict[str, str],
           rows: int, count: int, out: Path) -> dict[str, list[Run]]:
    """(rows, seconds) of each read, alternating."""
    runs: dict[str, list[Run]] = {"bare": [], "hot": [], "archived": [], "one copy": [],
                                  "ceiling": [], "parquet job, hot": [],
                                  "parquet job, archived": []}
    for number in range(count):
        started = time.perf_counter()
        read = SPARK_BENCH.bare_read(client, "hot")
        runs["bare"].append((read, time.perf_counter() - started))
        runs["hot"].append(noop_read(spark, hot, rows))
        runs["archived"].append(noop_read(spark, cold, rows))
        runs["one copy"].append(noop_read(spark, cold, rows, schema=ONE_COPY))
        runs["ceiling"].append(noop_read(spark, {"rows": str(rows)}, rows, CeilingSource.name()))
        runs["parquet job, hot"].append(parquet_job(spark, hot, out / f"hot-{number}"))
        runs["parquet job, archived"].append(parquet_job(spark, cold, out / f"cold-{number}"))
    return runs


def spread(runs: list[Run]) -> str:
    rates = [rows / seconds for rows, seconds in runs]
    return f"median {statistics.median(rates):>11,.0f} rows/s, min {min(rates):,.0f}, " \
           f"max {max(rates):,.0f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--entries", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    with tempfile.TemporaryDirectory(prefix="sg-bench-") as tmp, \
            DevStack(DevStackConfig(data_dir=Path(tmp) / "stack", redis_replicas=0)) as stack:
        startup = list(stack.redis_startup_nodes)
        client = RedisCluster(startup_nodes=[ClusterNode(h, p)  # type: ignore[no-untyped-call]
                                             for h, p in startup])
        nodes = ",".join(f"{h}:{p}" for h, p in startup)
        for topic in ("hot", "cold"):
            SPARK_BENCH.fill(client, topic, args.entries)
        url = f"file://{tmp}/archive"
        segments = asyncio.run(archive_all(startup, url, "cold"))
        rows = args.entries // PARTITIONS * PARTITIONS
        hot = SPARK_BENCH.source_options(nodes, "hot")
        cold = {**SPARK_BENCH.source_options(nodes, "cold"), "archiveUrl": url}
        spark = common.session("bench-pipeline-archive", "local[2]")
        spark.dataSource.register(CeilingSource)
        noop_read(spark, hot, rows)
        noop_read(spark, cold, rows)
        noop_read(spark, {"rows": str(rows)}, rows, CeilingSource.name())
        parquet_job(spark, cold, Path(tmp) / "warm-up")
        runs = rounds(client, spark, hot, cold, rows, args.rounds, Path(tmp) / "jobs")
        spark.stop()
        client.close()
    print(f"# {rows} entries of 200 B over {PARTITIONS} partitions, {segments} segments, "
          "local[2], noop sink")
    for name, series in runs.items():
        for number, (count, seconds) in enumerate(series):
            print(SPARK_BENCH.line(f"{name}, round {number + 1}", count, seconds))
        print(f"{name:<34} {spread(series)}")
    medians = {name: statistics.median(r / s for r, s in series) for name, series in runs.items()}
    print(f"{'ratio archived/hot (medians)':<34} {medians['archived'] / medians['hot']:>11.2f}")
    for top, bottom in (("archived", "bare"), ("one copy", "bare"), ("ceiling", "bare"),
                        ("archived", "ceiling"), ("parquet job, archived", "parquet job, hot")):
        print(f"{f'ratio {top}/{bottom} (medians)':<34} {medians[top] / medians[bottom]:>11.2f}")


if __name__ == "__main__":
    main()
