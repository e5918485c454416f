"""The streamgate source against a real Redis Cluster: exactly-once output, bounded batches,
offsets, progress."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession
from redis.cluster import RedisCluster

from storage.archive.manifest import archive_readers_key
from storage.keys import log_key
from streamgate_spark.jobs import to_parquet

pytestmark = pytest.mark.spark


def options(topic: str, redis_nodes: str, **extra: Any) -> dict[str, str]:
    base = {"topic": topic, "redisNodes": redis_nodes, "partitions": "0,1"}
    return {**base, **{name: str(value) for name, value in extra.items()}}


def run_to_parquet(spark: SparkSession, opts: dict[str, str],
                   tmp_path: Path) -> list[dict[str, Any]]:
    """One availableNow run of the Parquet job; returns its progress reports."""
    query = to_parquet.start(spark, opts, str(tmp_path / "out"), str(tmp_path / "checkpoint"))
    query.awaitTermination(120)
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))
    return [dict(p) for p in query.recentProgress]


def landed(spark: SparkSession, tmp_path: Path) -> list[tuple[int, str]]:
    rows = spark.read.parquet(str(tmp_path / "out")).select("partition", "offset").collect()
    return sorted((row.partition, row.offset) for row in rows)


def test_restart_from_checkpoint_lands_exactly_once(
    spark: SparkSession, redis_nodes: str, topic: str, publish: Any, tmp_path: Path
) -> None:
    published = [(0, o) for o in publish(topic, 0, 25)] + [(1, o) for o in publish(topic, 1, 15)]
    run_to_parquet(spark, options(topic, redis_nodes), tmp_path)
    assert landed(spark, tmp_path) == sorted(published)
    published += ([(0, o) for o in publish(topic, 0, 10, first=25)]
                  + [(1, o) for o in publish(topic, 1, 5, first=15)])
    run_to_parquet(spark, options(topic, redis_nodes), tmp_path)
    assert landed(spark, tmp_path) == sorted(published)


def test_rows_carry_key_value_headers_and_timestamp(
    spark: SparkSession, redis_nodes: str, topic: str, publish: Any
) -> None:
    offsets = publish(topic, 1, 2)
    rows = (spark.read.format("streamgate").options(**options(topic, redis_nodes)).load()
            .orderBy("offset").collect())
    assert [row.offset for row in rows] == offsets
    first, second = rows
    assert (first.topic, first.partition, bytes(first.key), first.value_str) == (
        topic, 1, b"k0", '{"n":0}')
    assert bytes(first.value) == b'{"n":0}'
    assert first.headers is None
    assert second.headers == {"source": "test", "n": "1"}
    assert int(first.timestamp.timestamp() * 1000) == int(offsets[0].split("-")[0])


def test_entries_of_earlier_versions_read_as_the_same_rows(
    spark: SparkSession, redis_nodes: str, topic: str, cluster: RedisCluster, publish: Any
) -> None:
    (today,) = publish(topic, 0, 1)  # {"n": 0} under K + "k0"
    earlier = [cluster.xadd(log_key(topic, 0), fields).decode() for fields in (
        {"v": b'{"n":0}', "f": b"j", "k": b"k0"},  # the key as a value, f j on JSON
        {"v": b'{"n":0}', "k": b"k0"},  # the key as a value
    )]
    rows = (spark.read.format("streamgate")
            .options(**options(topic, redis_nodes, partitions="0")).load()
            .orderBy("offset").collect())
    assert [row.offset for row in rows] == [today, *earlier]
    assert {(bytes(row.key), bytes(row.value), row.value_str)
            for row in rows} == {(b"k0", b'{"n":0}', '{"n":0}')}


def checkpointed_offsets(tmp_path: Path) -> dict[str, str]:
    """The source offsets of the newest batch in Spark's offset log (its last line)."""
    logs = sorted((tmp_path / "checkpoint" / "offsets").glob("[0-9]*"), key=lambda p: int(p.name))
    result: dict[str, str] = json.loads(logs[-1].read_text().splitlines()[-1])
    return result


def test_checkpoint_holds_stream_ids_the_group_shows(
    spark: SparkSession, cluster: RedisCluster, redis_nodes: str, topic: str, publish: Any,
    tmp_path: Path
) -> None:
    last0, last1 = publish(topic, 0, 5)[-1], publish(topic, 1, 3)[-1]
    run_to_parquet(spark, options(topic, redis_nodes), tmp_path)
    assert checkpointed_offsets(tmp_path) == {"0": last0, "1": last1}
    for partition, last in ((0, last0), (1, last1)):
        (group,) = cluster.xinfo_groups(log_key(topic, partition))
        assert (group["name"].decode(), group["last-delivered-id"].decode()) == (
            f"spark-{topic}", last)
        assert group["lag"] == 0
        # it reads archived ranges from the segments itself: the archive mover need not wait
        assert cluster.smembers(archive_readers_key(topic, partition)) == {
            f"spark-{topic}".encode()}


def test_max_entries_per_trigger_bounds_every_batch(
    spark: SparkSession, redis_nodes: str, topic: str, publish: Any, tmp_path: Path
) -> None:
    publish(topic, 0, 30)
    publish(topic, 1, 4)
    progress = run_to_parquet(spark, options(topic, redis_nodes, maxEntriesPerTrigger=8), tmp_path)
    sizes = [p["numInputRows"] for p in progress if p["numInputRows"]]
    assert max(sizes) <= 8
    assert sum(sizes) == 34
    assert len(landed(spark, tmp_path)) == 34


def test_stopped_query_and_lost_commit_land_exactly_once(
    spark: SparkSession, redis_nodes: str, topic: str, publish: Any, tmp_path: Path
) -> None:
    published = [(0, o) for o in publish(topic, 0, 40)] + [(1, o) for o in publish(topic, 1, 20)]
    opts = options(topic, redis_nodes, maxEntriesPerTrigger=10)
    query = to_parquet.start(spark, opts, str(tmp_path / "out"), str(tmp_path / "checkpoint"))
    commit_dir = tmp_path / "checkpoint" / "commits"
    deadline = time.monotonic() + 60
    while not list(commit_dir.glob("[0-9]*")):
        assert query.isActive, f"the query ended early: {query.exception()}"
        assert time.monotonic() < deadline, "no batch was committed within 60 s"
        query.awaitTermination(0.2)
    query.stop()
    # stop() may return before it is gone
    while any(active.id == query.id for active in spark.streams.active):
        assert time.monotonic() < deadline + 60, "the stopped query never left spark.streams.active"
        time.sleep(0.1)
    spark.streams.resetTerminated()
    # The last planned batch loses its commit, as if the driver died after writing the batch's files
    # (if stop() interrupted that batch, it is uncommitted already). Its checksum file goes too: a
    # crash before the commit leaves none, and a stale .crc makes Spark's rename of the rewritten
    # commit fail ("multiple streaming queries are concurrently using .../commits").
    last_batch = max(int(p.name) for p in (tmp_path / "checkpoint" / "offsets").glob("[0-9]*"))
    for lost in (commit_dir / str(last_batch), commit_dir / f".{last_batch}.crc"):
        lost.unlink(missing_ok=True)
    run_to_parquet(spark, opts, tmp_path)
    assert landed(spark, tmp_path) == sorted(published)


def test_trimmed_checkpoint_raises_data_loss_unless_disabled(
    spark: SparkSession, cluster: RedisCluster, redis_nodes: str, topic: str, publish: Any,
    tmp_path: Path
) -> None:
    publish(topic, 0, 10)
    opts = options(topic, redis_nodes, partitions="0")
    run_to_parquet(spark, opts, tmp_path)
    kept = publish(topic, 0, 10, first=10)[-4:]
    # 6 entries after the checkpoint are gone unread
    cluster.xtrim(log_key(topic, 0), maxlen=4, approximate=False)
    with pytest.raises(StreamingQueryException,
                       match=r"(?s)StreamgateDataLoss.*6 entries after the checkpoint"):
        run_to_parquet(spark, opts, tmp_path)
    run_to_parquet(spark, {**opts, "failOnDataLoss": "false"}, tmp_path)
    assert [offset for _, offset in landed(spark, tmp_path)][-4:] == kept
    assert len(landed(spark, tmp_path)) == 14
