"""Spark source and sink throughput, each against an anchor of the same run.

Starts its own Redis Cluster and etcd (devstack) and a gateway, writes entries of 200 bytes over 4
partitions in the gateway's field format, then measures:
  - bare:    sync redis-py (hiredis) paged XRANGE of every partition, one after the other;
  - source:  streamgate_spark.jobs.to_parquet with availableNow in local[2], a new query each
             time, its start and end included;
  - publish: the project's Python client (Producer.send_many) publishing rows, acks=all;
  - sink:    streamgate_spark.jobs.to_topic republishing as many rows through the gateway, acks=all.
The JVM is warmed up first by both queries on a smaller topic; bare and source then alternate
``--rounds`` times. Prints rows/s for each, and the ratios source/bare (medians) and sink/publish.
Nothing here is a test assertion.

    python bench/pipeline.py --entries 1000000 --sink-entries 200000
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, cast

# Run as a script, this file's directory comes first on sys.path and its name would shadow the
# pipeline package: the project is imported first, the bench modules after it.
BENCH = Path(__file__).resolve().parent
sys.path[:] = [entry for entry in sys.path if Path(entry or ".").resolve() != BENCH]

from redis.cluster import ClusterNode, RedisCluster  # noqa: E402

from storage.codec import encode_fields  # noqa: E402
from storage.keys import log_key  # noqa: E402
from storage.models import Record, ValueFormat  # noqa: E402
from streamgate_client import Admin, Producer  # noqa: E402
from streamgate_devstack import DevStack, DevStackConfig  # noqa: E402
from streamgate_spark.jobs import common, to_parquet, to_topic  # noqa: E402

sys.path.append(str(BENCH))
from publish import wait_ready  # noqa: E402
from services import GatewayProcess  # noqa: E402

PARTITIONS = 4
VALUE = b"x" * 200
PAGE = 1000
FILL_BATCH = 5000
WARMUP_ENTRIES = 200_000  # enough rows for the JVM to compile the hot paths


def fill(client: RedisCluster, topic: str, entries: int) -> None:
    """XADD ``entries`` keyed binary entries (keys k0..k99) over the partitions."""
    for partition in range(PARTITIONS):
        key, count = log_key(topic, partition), entries // PARTITIONS
        for first in range(0, count, FILL_BATCH):
            pipe = client.pipeline(transaction=False)  # type: ignore[no-untyped-call]
            for n in range(first, min(first + FILL_BATCH, count)):
                fields = encode_fields(Record(partition, VALUE, ValueFormat.BINARY,
                                              b"k%d" % (n % 100), {}))
                pipe.xadd(key, dict(zip(fields[0::2], fields[1::2], strict=True)))
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


def source_options(nodes: str, topic: str) -> dict[str, str]:
    return {"topic": topic, "redisNodes": nodes,
            "partitions": ",".join(map(str, range(PARTITIONS)))}


def timed_query(start: Any) -> tuple[int, float]:
    """(rows the query read, seconds from its start to its end)."""
    started = time.perf_counter()
    query = start()
    query.awaitTermination()
    elapsed = time.perf_counter() - started
    return sum(int(p["numInputRows"]) for p in query.recentProgress), elapsed


def spark_to_parquet(spark: Any, nodes: str, topic: str, out: Path) -> tuple[int, float]:
    return timed_query(lambda: to_parquet.start(spark, source_options(nodes, topic),
                                                str(out / "data"), str(out / "checkpoint")))


def spark_to_topic(spark: Any, nodes: str, topic: str, gateway: str, target: str,
                   out: Path) -> tuple[int, float]:
    sink = {"topic": target, "gateway": gateway, "valueFormat": "binary"}
    return timed_query(lambda: to_topic.start(spark, source_options(nodes, topic), sink,
                                              str(out / "checkpoint")))


async def create_topics(gateway: str, *names: str) -> None:
    async with Admin(gateway) as admin:
        for name in names:
            await admin.create_topic(name, PARTITIONS)


async def http_publish(gateway: str, topic: str, entries: int) -> float:
    """Seconds the Python client takes to publish ``entries`` keyed rows, acks=all."""
    messages = [{"value": VALUE, "key": f"k{n % 100}"} for n in range(entries)]
    async with Producer(gateway, topic, acks="all") as producer:
        started = time.perf_counter()
        for first in range(0, entries, 100_000):
            await producer.send_many(messages[first:first + 100_000])
        return time.perf_counter() - started


def line(label: str, rows: int, seconds: float) -> str:
    return f"{label:<34} {rows:>9} rows {seconds:7.2f} s {rows / seconds:>11,.0f} rows/s"


def alternated(client: RedisCluster, spark: Any, nodes: str, rounds: int,
               out: Path) -> tuple[list[tuple[int, float]], list[tuple[int, float]]]:
    """(bare, source) runs, alternating, each (rows, seconds)."""
    bare, source = [], []
    for number in range(rounds):
        started = time.perf_counter()
        rows = bare_read(client, "bench")
        bare.append((rows, time.perf_counter() - started))
        source.append(spark_to_parquet(spark, nodes, "bench", out / f"parquet-{number}"))
    return bare, source


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--entries", type=int, default=1_000_000)
    parser.add_argument("--sink-entries", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    with tempfile.TemporaryDirectory(prefix="sg-bench-") as tmp, \
            DevStack(DevStackConfig(data_dir=Path(tmp) / "stack")) as stack, \
            GatewayProcess(stack) as gateway:
        asyncio.run(wait_ready(gateway.base))
        asyncio.run(create_topics(gateway.base, "sink-out", "publish-out", "warmup-out"))
        client = RedisCluster(startup_nodes=[ClusterNode(h, p)  # type: ignore[no-untyped-call]
                                             for h, p in stack.redis_startup_nodes])
        nodes = ",".join(f"{h}:{p}" for h, p in stack.redis_startup_nodes)
        fill(client, "bench", args.entries)
        fill(client, "sink-in", args.sink_entries)
        fill(client, "warmup", WARMUP_ENTRIES)

        spark = common.session("bench-pipeline", "local[2]")
        spark_to_parquet(spark, nodes, "warmup", Path(tmp) / "warmup-parquet")
        spark_to_topic(spark, nodes, "warmup", gateway.base, "warmup-out", Path(tmp) / "warmup")
        bare, source = alternated(client, spark, nodes, args.rounds, Path(tmp))
        publish_s = asyncio.run(http_publish(gateway.base, "publish-out", args.sink_entries))
        sink_rows, sink_s = spark_to_topic(spark, nodes, "sink-in", gateway.base, "sink-out",
                                           Path(tmp) / "sink")
        spark.stop()
        client.close()
    print(f"# {args.entries} entries of {len(VALUE)} B over {PARTITIONS} partitions, local[2]; "
          f"{args.sink_entries} published")
    for number, ((bare_rows, bare_s), (rows, seconds)) in enumerate(zip(bare, source, strict=True)):
        print(line(f"bare XRANGE (hiredis), round {number + 1}", bare_rows, bare_s))
        print(line(f"spark source -> parquet, round {number + 1}", rows, seconds))
    print(line("python client publish, acks=all", args.sink_entries, publish_s))
    print(line("spark source -> sink, acks=all", sink_rows, sink_s))
    bare_rate = statistics.median(rows / seconds for rows, seconds in bare)
    source_rate = statistics.median(rows / seconds for rows, seconds in source)
    print(f"{'ratio source/bare (medians)':<34} {source_rate / bare_rate:>11.2f}")
    print(f"{'ratio sink/publish':<34} "
          f"{(sink_rows / sink_s) / (args.sink_entries / publish_s):>11.2f}")


if __name__ == "__main__":
    main()
