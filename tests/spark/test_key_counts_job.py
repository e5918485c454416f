"""The key-count job: counts per key per minute, the latest batch's row wins, a restart continues
the counts."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from streamgate_spark.jobs import key_counts

pytestmark = pytest.mark.spark


def expected_counts(published: list[tuple[str, str]]) -> dict[tuple[datetime, str], int]:
    """(minute, key) -> count from (stream ID, key) pairs: the ID's ms part is the event time."""
    counts: Counter[tuple[datetime, str]] = Counter()
    for offset, key in published:
        ms = int(offset.split("-")[0])
        minute = datetime.fromtimestamp(ms // 60_000 * 60, tz=UTC).replace(tzinfo=None)
        counts[(minute, key)] += 1
    return dict(counts)


def current_counts(spark: SparkSession, output: Path) -> dict[tuple[datetime, str], int]:
    """The row of the highest batch_id per (window, key): the job's current answer."""
    latest: dict[tuple[datetime, str], tuple[int, int]] = {}
    for row in spark.read.parquet(str(output)).collect():
        slot = (row.window_start, row.key)
        if slot not in latest or row.batch_id > latest[slot][0]:
            latest[slot] = (row.batch_id, row["count"])
    return {slot: count for slot, (_, count) in latest.items()}


def run_once(spark: SparkSession, opts: dict[str, str], tmp_path: Path) -> None:
    query = key_counts.start(spark, opts, str(tmp_path / "counts"), str(tmp_path / "checkpoint"),
                             watermark="10 minutes")
    query.awaitTermination(120)
    assert query.exception() is None, str(query.exception())


def test_key_minute_counts_survive_bounded_batches_and_restart(
        spark: SparkSession, redis_nodes: str, topic: str, publish: Any, tmp_path: Path) -> None:
    opts = {"topic": topic, "redisNodes": redis_nodes, "partitions": "0,1",
            "maxEntriesPerTrigger": "7"}
    published = [(o, f"k{n % 3}") for n, o in enumerate(publish(topic, 0, 20))]
    published += [(o, f"k{n % 3}") for n, o in enumerate(publish(topic, 1, 10))]
    run_once(spark, opts, tmp_path)
    assert current_counts(spark, tmp_path / "counts") == expected_counts(published)
    published += [(o, f"k{n % 3}") for n, o in enumerate(publish(topic, 0, 8, first=20), start=20)]
    run_once(spark, opts, tmp_path)
    assert current_counts(spark, tmp_path / "counts") == expected_counts(published)
