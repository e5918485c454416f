"""Spark source throughput: the streamgate source into Parquet vs a bare XRANGE read of the same
data.

Starts its own Redis Cluster (and etcd) with devstack, writes N entries of 200 bytes over 4
partitions in the gateway's field format, then measures in one run:
  - bare:    sync redis-py (hiredis) paged XRANGE of every partition, one after the other;
  - spark:   pipeline.jobs.to_parquet with availableNow in local[2] (session warmed up first).
Prints rows/s for each. Nothing here is a test assertion.

    python bench/pipeline.py --entries 1000000
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, cast

# Run as a script, this file's directory comes first on sys.path and its name would shadow the
# pipeline package.
sys.path[:] = [entry for entry in sys.path
               if Path(entry or ".").resolve() != Path(__file__).resolve().parent]

from redis.cluster import ClusterNode, RedisCluster  # noqa: E402

from devstack import DevStack, DevStackConfig  # noqa: E402
from storage.keys import log_key  # noqa: E402

PARTITIONS = 4
VALUE = b"x" * 200
PAGE = 1000


def fill(client: RedisCluster, topic: str, entries: int) -> None:
    for partition in range(PARTITIONS):
        key = log_key(topic, partition)
        for first in range(0, entries // PARTITIONS, 5000):
            pipe = client.pipeline(transaction=False)  # type: ignore[no-untyped-call]
            for n in range(first, min(first + 5000, entries // PARTITIONS)):
                pipe.xadd(key, {"v": VALUE, "f": b"b", "k": b"k%d" % (n % 100)})
            pipe.execute()


def bare_read(client: RedisCluster, topic: str) -> int:
    rows = 0
    for partition in range(PARTITIONS):
        key, cursor = log_key(topic, partition), "-"
        while True:
            page = cast(list[Any], client.xrange(key, cursor, "+", count=PAGE))
            rows += len(page)
            if len(page) < PAGE:
                break
            cursor = "(" + page[-1][0].decode()
    return rows


def spark_read(nodes: str, topic: str, out: Path, label: str) -> tuple[int, float]:
    from pipeline.jobs import common, to_parquet

    spark = common.session("bench-pipeline", "local[2]")
    options = {"topic": topic, "redisNodes": nodes,
               "partitions": ",".join(map(str, range(PARTITIONS)))}
    started = time.perf_counter()
    query = to_parquet.start(spark, options, str(out / label / "data"),
                             str(out / label / "checkpoint"))
    query.awaitTermination()
    elapsed = time.perf_counter() - started
    return sum(int(p["numInputRows"]) for p in query.recentProgress), elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--entries", type=int, default=1_000_000)
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    with tempfile.TemporaryDirectory(prefix="sg-bench-") as tmp, \
            DevStack(DevStackConfig(data_dir=Path(tmp) / "stack")) as stack:
        client = RedisCluster(startup_nodes=[ClusterNode(h, p)  # type: ignore[no-untyped-call]
                                             for h, p in stack.redis_startup_nodes])
        nodes = ",".join(f"{h}:{p}" for h, p in stack.redis_startup_nodes)
        fill(client, "bench", args.entries)
        fill(client, "warmup", 4000)
        spark_read(nodes, "warmup", Path(tmp), "warmup")
        started = time.perf_counter()
        bare_rows = bare_read(client, "bench")
        bare_s = time.perf_counter() - started
        spark_rows, spark_s = spark_read(nodes, "bench", Path(tmp), "bench")
        client.close()
        print(f"# {args.entries} entries of {len(VALUE)} B over {PARTITIONS} partitions, local[2]")
        print(f"{'bare XRANGE (hiredis)':<28} {bare_rows:>9} rows {bare_s:7.2f} s "
              f"{bare_rows / bare_s:>11,.0f} rows/s")
        print(f"{'spark -> parquet':<28} {spark_rows:>9} rows {spark_s:7.2f} s "
              f"{spark_rows / spark_s:>11,.0f} rows/s")
        print(f"{'ratio spark/bare':<28} {(spark_rows / spark_s) / (bare_rows / bare_s):>11.2f}")


if __name__ == "__main__":
    main()
