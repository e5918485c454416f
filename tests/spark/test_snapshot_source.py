"""The source on a compacted topic: a query starts from each partition's snapshot, then reads
what follows it, with no gap and no duplicate, in batch and streaming reads."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from storage.models import AppendOptions, Records
from storage.redis_store import RedisStreamStore
from storage.settings import RedisStoreSettings
from streamgate_spark.jobs import to_parquet

pytestmark = pytest.mark.spark

COMPACTED = AppendOptions(key_index=True, compact=True)


def write(redis_cluster: Any, topic: str, partition: int, pairs: list[tuple[str, Any]]) -> None:
    """Append keyed JSON values (None: a tombstone) as a compacted topic's gateway does."""
    async def append() -> None:
        settings = RedisStoreSettings(startup_nodes=list(redis_cluster.startup_nodes))
        async with RedisStreamStore(settings) as store:
            values = [b"null" if value is None else str(value).encode() for _, value in pairs]
            await store.append(topic, Records([partition] * len(pairs), values,
                                              [key.encode() for key, _ in pairs]), COMPACTED)

    asyncio.run(append())


def options(topic: str, redis_nodes: str) -> dict[str, str]:
    return {"topic": topic, "redisNodes": redis_nodes, "partitions": "0,1",
            "startingOffsets": "snapshot", "snapshotLagMs": "600000"}


def test_a_query_starts_from_the_snapshots_then_follows_once(
        spark: SparkSession, redis_cluster: Any, redis_nodes: str, topic: str,
        tmp_path: Path) -> None:
    for partition in (0, 1):
        write(redis_cluster, topic, partition,
              [(f"p{partition}-k{n % 5}", n) for n in range(20)] + [(f"p{partition}-k4", None)])
    out, checkpoint = str(tmp_path / "out"), str(tmp_path / "checkpoint")
    query = to_parquet.start(spark, options(topic, redis_nodes), out, checkpoint)
    query.awaitTermination(120)
    assert query.exception() is None, query.exception()
    first = sorted((row.key.decode(), int(row.value))
                   for row in spark.read.parquet(out).collect())
    assert first == sorted((f"p{p}-k{k}", 15 + k) for p in (0, 1) for k in range(4))
    write(redis_cluster, topic, 1, [("p1-k0", 100), ("p1-k9", 101)])
    query = to_parquet.start(spark, options(topic, redis_nodes), out, checkpoint)
    query.awaitTermination(120)
    assert query.exception() is None, query.exception()
    rows = sorted((row.key.decode(), int(row.value))
                  for row in spark.read.parquet(out).collect())
    assert rows == sorted([*first, ("p1-k0", 100), ("p1-k9", 101)])


def test_batch_read_from_snapshots_holds_newest_per_key(
        spark: SparkSession, redis_cluster: Any, redis_nodes: str, topic: str) -> None:
    write(redis_cluster, topic, 0, [(f"k{n % 3}", n) for n in range(9)])
    rows = spark.read.format("streamgate").options(**options(topic, redis_nodes)).load().collect()
    assert sorted((row.key.decode(), row.value_str) for row in rows) == [
        ("k0", "6"), ("k1", "7"), ("k2", "8")]
