"""One SparkSession (local[2], UI off, 2 shuffle partitions) for every spark test, plus publish
helpers.

Without pyspark the tests skip locally and fail when CI=true, like the server fixtures in
tests/conftest.py.
"""

from __future__ import annotations

import functools
import os
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import orjson
import pytest
from redis.cluster import ClusterNode, RedisCluster

from storage.codec import encode_fields
from storage.keys import log_key
from storage.models import Record, ValueFormat

try:
    from pyspark.errors import PySparkRuntimeError
    from pyspark.sql import SparkSession
except ImportError as exc:  # pragma: no cover - depends on the environment
    if os.environ.get("CI", "").lower() == "true":
        raise
    pytest.skip(f"pyspark is not installed: {exc}", allow_module_level=True)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test under tests/spark as `spark`."""
    here = os.path.dirname(__file__)
    for item in items:
        if str(item.path).startswith(here):
            item.add_marker(pytest.mark.spark)


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """The session's SparkSession with the streamgate source registered; stopped at session end."""
    from streamgate_spark import register

    os.environ["PYSPARK_PYTHON"] = sys.executable
    session = _started_session()
    register(session)
    try:
        yield session
    finally:
        session.stop()


def _started_session(attempts: int = 3) -> SparkSession:
    """A local SparkSession. Its JVM is forked from a process whose gRPC threads (etcd) may be busy,
    and has been seen to exit before it answered once in a while: the launch is retried, the test is
    not."""
    for attempt in range(1, attempts + 1):
        try:
            return (SparkSession.builder.master("local[2]").appName("streamgate-tests")
                    .config("spark.ui.enabled", "false")
                    .config("spark.sql.shuffle.partitions", "2")
                    .config("spark.sql.session.timeZone", "UTC")
                    .config("spark.driver.bindAddress", "127.0.0.1")
                    .getOrCreate())
        except PySparkRuntimeError as exc:
            if exc.getErrorClass() != "JAVA_GATEWAY_EXITED" or attempt == attempts:
                raise
            time.sleep(1.0)
    raise AssertionError("unreachable")


@pytest.fixture(scope="session")
def redis_nodes(redis_cluster: Any) -> str:
    """The cluster's startup nodes as the source's redisNodes option."""
    return ",".join(f"{host}:{port}" for host, port in redis_cluster.startup_nodes)


@pytest.fixture(scope="session")
def cluster(redis_cluster: Any) -> Iterator[RedisCluster]:
    """A sync cluster client for publishing and inspecting streams."""
    client = RedisCluster(startup_nodes=[ClusterNode(h, p)  # type: ignore[no-untyped-call]
                                         for h, p in redis_cluster.startup_nodes])
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def topic() -> str:
    """A topic name no other test uses."""
    return f"sp-{uuid.uuid4().hex[:10]}"


Publish = Callable[..., list[str]]


@pytest.fixture
def publish(cluster: RedisCluster) -> Publish:
    """``publish(topic, partition, count, first=0)``: XADD entries in the gateway's field format."""
    return functools.partial(_publish, cluster)


def _publish(client: RedisCluster, topic: str, partition: int, count: int, *,
             first: int = 0) -> list[str]:
    # Values are JSON text {"n": <i>}, keys k0..k2, odd entries carry headers.
    pipe = client.pipeline(transaction=False)  # type: ignore[no-untyped-call]
    for n in range(first, first + count):
        record = Record(partition, orjson.dumps({"n": n}), ValueFormat.JSON, f"k{n % 3}".encode(),
                        {"source": "test", "n": str(n)} if n % 2 else {})
        fields = encode_fields(record)
        pipe.xadd(log_key(topic, partition), dict(zip(fields[0::2], fields[1::2], strict=True)))
    return [entry_id.decode() for entry_id in pipe.execute()]
