"""The streamgate sink: a topic republished through Spark into another, every message once with its
key and headers, also when the driver is SIGKILLed mid-batch and the query restarts from its
checkpoint."""

from __future__ import annotations

import asyncio
import sys
import time
from collections import Counter
from pathlib import Path
from typing import cast

import pytest
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession
from redis.cluster import RedisCluster
from spark_processes import ProcessGroup, newest, spark_env

from storage.codec import decode_entry
from storage.keys import log_key
from streamgate_client.admin import Admin
from streamgate_client.producer import Producer
from streamgate_spark.errors import InvalidSinkOption

pytestmark = pytest.mark.spark

PARTITIONS = 2
Message = tuple[str | None, bytes, tuple[tuple[str, str], ...]]


def make_topics(gateway: str, *names: str) -> None:
    async def create() -> None:
        async with Admin(gateway) as admin:
            for name in names:
                await admin.create_topic(name, PARTITIONS)
    asyncio.run(create())


def publish(gateway: str, topic: str, count: int) -> None:
    """``count`` JSON messages, keys k0..k4, every third with headers."""
    messages = [{"value": {"n": n, "text": "é" * (n % 4)}, "key": f"k{n % 5}",
                 "headers": {"n": str(n), "source": "spark-test"} if n % 3 == 0 else None}
                for n in range(count)]

    async def send() -> None:
        async with Producer(gateway, topic, acks="all") as producer:
            await producer.send_many(messages)
    asyncio.run(send())


def topic_messages(cluster: RedisCluster, topic: str) -> list[Message]:
    """Every message in the topic's partitions, as stored."""
    found = []
    for partition in range(PARTITIONS):
        entries = cast(list[tuple[bytes, dict[bytes, bytes]]],
                       cluster.xrange(log_key(topic, partition), "-", "+"))
        for entry_id, fields in entries:
            entry = decode_entry(partition, entry_id, fields)
            found.append((entry.key.decode() if entry.key is not None else None, entry.value,
                          tuple(sorted(entry.headers.items()))))
    return found


def per_key_order(messages: list[Message]) -> dict[str | None, list[bytes]]:
    order: dict[str | None, list[bytes]] = {}
    for key, value, _ in messages:
        order.setdefault(key, []).append(value)
    return order


def source_options(topic: str, redis_nodes: str, **extra: str) -> dict[str, str]:
    return {"topic": topic, "redisNodes": redis_nodes,
            "partitions": ",".join(map(str, range(PARTITIONS))), **extra}


@pytest.mark.timeout(180)
def test_republished_topic_holds_each_message_once_with_headers(
    spark: SparkSession, served_gateway: str, redis_nodes: str, cluster: RedisCluster,
    topic: str, tmp_path: Path
) -> None:
    copy = f"{topic}-copy"
    make_topics(served_gateway, topic, copy)
    publish(served_gateway, topic, 1500)
    query = (spark.readStream.format("streamgate")
             .options(**source_options(topic, redis_nodes, maxEntriesPerTrigger="700")).load()
             .select("key", "value", "headers")
             .writeStream.format("streamgate")
             .options(topic=copy, gateway=served_gateway, valueFormat="json", batchSize="200")
             .option("checkpointLocation", str(tmp_path / "checkpoint"))
             .trigger(availableNow=True).start())
    query.awaitTermination(120)
    assert query.exception() is None
    assert len(query.recentProgress) >= 3  # 1500 entries at most 700 a batch

    copied, original = topic_messages(cluster, copy), topic_messages(cluster, topic)
    assert len(original) == 1500
    assert Counter(copied) == Counter(original)
    # each key's messages sit in one partition of each topic: their order survives the copy
    assert per_key_order(copied) == per_key_order(original)


def run_sink(frame: DataFrame, options: dict[str, str], checkpoint: Path) -> None:
    query = (frame.writeStream.format("streamgate").options(topic="t", **options)
             .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    query.awaitTermination(60)
    raise AssertionError(f"the query ran: {query.exception()}")


@pytest.mark.timeout(120)
def test_sink_without_value_column_fails_query_at_start(
    spark: SparkSession, redis_nodes: str, topic: str, tmp_path: Path
) -> None:
    rows = spark.readStream.format("streamgate").options(
        **source_options(topic, redis_nodes)).load()
    with pytest.raises(PySparkException) as raised:
        run_sink(rows.select("key"), {"gateway": "http://127.0.0.1:1"}, tmp_path / "checkpoint")
    assert InvalidSinkOption.__name__ in str(raised.value)
    assert "option 'value'" in str(raised.value)


ENTRIES = 6000
PER_TRIGGER = 2000  # 3 batches
REQUEST_ROWS = 50  # rows per publish request: a batch takes many requests


def job_argv(topic: str, copy: str, redis_nodes: str, gateway: str, tmp_path: Path) -> list[str]:
    return [sys.executable, "-m", "streamgate_spark.jobs.to_topic", "--master", "local[2]",
            "--topic", topic, "--redis-nodes", redis_nodes, "--gateway", gateway,
            "--output-topic", copy, "--value-format", "json", "--batch-size", str(REQUEST_ROWS),
            "--max-entries-per-trigger", str(PER_TRIGGER),
            "--checkpoint", str(tmp_path / "checkpoint"), "--available-now"]


def copied_count(cluster: RedisCluster, topic: str) -> int:
    return sum(int(cluster.xlen(log_key(topic, p))) for p in range(PARTITIONS))


def kill_mid_batch(driver: ProcessGroup, cluster: RedisCluster, copy: str, checkpoint: Path,
                   timeout_s: float) -> tuple[int, int, int]:
    """SIGKILL the driver while a batch is planned and part of it published: (planned batch,
    committed batch, messages in the copy) at the kill."""
    deadline = time.monotonic() + timeout_s
    while True:
        assert driver.running(), f"the job ended before the kill point\n{driver.log_tail()}"
        assert time.monotonic() < deadline, f"no kill point in {timeout_s} s"
        planned, committed = newest(checkpoint / "offsets"), newest(checkpoint / "commits")
        count = copied_count(cluster, copy)
        if planned > committed and count > (committed + 1) * PER_TRIGGER and \
                count < (planned + 1) * PER_TRIGGER - REQUEST_ROWS:
            break
        time.sleep(0.005)
    driver.kill()
    return planned, committed, copied_count(cluster, copy)


@pytest.mark.timeout(300)
def test_driver_killed_mid_batch_republishes_exactly_once(
    served_gateway: str, redis_nodes: str, cluster: RedisCluster, topic: str, tmp_path: Path
) -> None:
    copy = f"{topic}-copy"
    make_topics(served_gateway, topic, copy)
    publish(served_gateway, topic, ENTRIES)
    env = spark_env(tmp_path, PYSPARK_SUBMIT_ARGS=" ".join([
        "--conf spark.ui.enabled=false --conf spark.ui.showConsoleProgress=false",
        "--driver-java-options -XX:TieredStopAtLevel=1", "pyspark-shell"]))
    argv = job_argv(topic, copy, redis_nodes, served_gateway, tmp_path)

    with ProcessGroup(argv, env, tmp_path / "logs" / "killed-driver.log") as driver:
        planned, committed, at_kill = kill_mid_batch(driver, cluster, copy,
                                                     tmp_path / "checkpoint", timeout_s=120)
    print(f"killed with offsets/{planned} planned, commits/{committed}, {at_kill} copied")
    assert committed < planned

    with ProcessGroup(argv, env, tmp_path / "logs" / "restarted-driver.log") as restarted:
        assert restarted.wait(150) == 0, restarted.log_tail()
    copied, original = topic_messages(cluster, copy), topic_messages(cluster, topic)
    assert len(copied) == len(original) == ENTRIES, f"{len(copied)} copied of {len(original)}"
    assert Counter(copied) == Counter(original)
    assert per_key_order(copied) == per_key_order(original)
