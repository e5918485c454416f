"""The streamgate source reading at a schema version (``schemaVersion``), against the real gateway:
values written under other versions converted by the registered migrations, batch and stream, from
the stream and from archive segments; a value that cannot be is a ``schema_error`` row."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson
import pytest
from pyspark.errors import PySparkException
from pyspark.sql import Row, SparkSession

from streamgate_client.admin import Admin
from streamgate_client.producer import Producer
from streamgate_spark.archive_files import ArchiveAccess
from streamgate_spark.errors import InvalidSourceOption
from streamgate_spark.options import parse_options
from tests.spark.test_archived_source import Archive

pytestmark = pytest.mark.spark

VERSION_HEADER = "sg-schema-version"
V1 = {"type": "object", "required": ["id", "qty"],
      "properties": {"id": {"type": "string"}, "qty": {"type": "integer"}}}
V2 = {"type": "object", "required": ["id", "quantity"],
      "properties": {"id": {"type": "string"}, "quantity": {"type": "integer"}}}
V3 = {"type": "object", "required": ["id", "quantity", "currency"],
      "properties": {"id": {"type": "string"}, "quantity": {"type": "integer"},
                     "currency": {"type": "string"}}}
RENAME_UP = [{"op": "rename", "from": "/qty", "to": "/quantity"}]
RENAME_DOWN = [{"op": "rename", "from": "/quantity", "to": "/qty"}]
CURRENCY_DEFAULT = [{"op": "default", "path": "/currency", "value": "EUR"}]

# what each version's producer wrote, in order
WRITTEN = {1: [{"id": "a1", "qty": 1}, {"id": "a2", "qty": 2}],
           2: [{"id": "b1", "quantity": 3}, {"id": "b2", "quantity": 4}],
           3: [{"id": "c1", "quantity": 5, "currency": "USD"}]}
# what a reader at each version gets for them (None: a schema_error row)
AT_1 = [{"id": "a1", "qty": 1}, {"id": "a2", "qty": 2}, {"id": "b1", "qty": 3},
        {"id": "b2", "qty": 4}, None]
AT_2 = [{"id": "a1", "quantity": 1}, {"id": "a2", "quantity": 2}, {"id": "b1", "quantity": 3},
        {"id": "b2", "quantity": 4}, None]
AT_3 = [{"id": "a1", "quantity": 1, "currency": "EUR"},
        {"id": "a2", "quantity": 2, "currency": "EUR"},
        {"id": "b1", "quantity": 3, "currency": "EUR"},
        {"id": "b2", "quantity": 4, "currency": "EUR"},
        {"id": "c1", "quantity": 5, "currency": "USD"}]


def build_versioned_topic(gateway: str, topic: str) -> None:
    """One partition; v1, v2 (both ways) and v3 (upgrade only) registered through the API, each
    followed by the messages of WRITTEN under it."""
    async def build() -> None:
        async with Admin(gateway) as admin:
            await admin.create_topic(topic, 1)
            for version, schema, migrations in (
                    (1, V1, None),
                    (2, V2, {"upgrade": RENAME_UP, "downgrade": RENAME_DOWN}),
                    (3, V3, {"upgrade": CURRENCY_DEFAULT})):
                registered = await admin.register_schema(topic, schema, compatibility="none",
                                                         migrations=migrations)
                assert registered.version == version
                async with Producer(gateway, topic, acks="all") as producer:
                    await producer.send_many([{"value": value} for value in WRITTEN[version]])
    asyncio.run(build())


@pytest.fixture
def versioned_topic(served_gateway: str) -> str:
    topic = f"sv-{uuid.uuid4().hex[:10]}"
    build_versioned_topic(served_gateway, topic)
    return topic


def source_options(topic: str, redis_nodes: str, gateway: str, **extra: str) -> dict[str, str]:
    return {"topic": topic, "redisNodes": redis_nodes, "gateway": gateway, **extra}


def in_offset_order(rows: list[Row]) -> list[Row]:
    return sorted(rows, key=lambda row: tuple(map(int, row.offset.split("-"))))


def read_at(spark: SparkSession, opts: dict[str, str]) -> list[Row]:
    return in_offset_order(spark.read.format("streamgate").options(**opts).load().collect())


def assert_rows_at(rows: list[Row], version: int,
                   expected: Sequence[Mapping[str, Any] | None]) -> None:
    assert len(rows) == len(expected)
    for row, (written, value) in zip(rows, zip(written_versions(), expected, strict=True),
                                     strict=True):
        if value is None:  # not converted: no value, its own version, why
            assert (row.value, row.value_str) == (None, None)
            assert row.headers[VERSION_HEADER] == str(written)
            assert "declares no downgrade" in row.schema_error
        else:
            assert orjson.loads(bytes(row.value)) == value
            assert orjson.loads(row.value_str) == value
            assert row.headers[VERSION_HEADER] == str(version)
            assert row.schema_error is None


def written_versions() -> list[int]:
    return [version for version, values in WRITTEN.items() for _ in values]


def test_a_batch_read_at_each_version_converts_every_value_it_can_and_flags_the_rest(
        spark: SparkSession, redis_nodes: str, served_gateway: str, versioned_topic: str) -> None:
    opts = source_options(versioned_topic, redis_nodes, served_gateway)
    for version, expected in ((1, AT_1), (2, AT_2), (3, AT_3)):
        assert_rows_at(read_at(spark, {**opts, "schemaVersion": str(version)}), version, expected)
    as_written = read_at(spark, opts)
    assert "schema_error" not in as_written[0].asDict()
    assert [orjson.loads(bytes(row.value)) for row in as_written] == [
        value for values in WRITTEN.values() for value in values]


def test_a_user_schema_may_pick_the_schema_error_column_when_reading_at_a_version(
        spark: SparkSession, redis_nodes: str, served_gateway: str, versioned_topic: str) -> None:
    opts = source_options(versioned_topic, redis_nodes, served_gateway, schemaVersion="2")
    rows = (spark.read.format("streamgate").schema("offset STRING, schema_error STRING")
            .options(**opts).load().collect())
    assert sum(row.schema_error is not None for row in rows) == 1
    with pytest.raises(PySparkException, match="no column schema_error"):
        (spark.read.format("streamgate").schema("offset STRING, schema_error STRING")
         .options(**{**opts, "schemaVersion": ""}).load().collect())


def test_an_unknown_version_fails_the_query_at_planning(
        spark: SparkSession, redis_nodes: str, served_gateway: str, versioned_topic: str) -> None:
    opts = source_options(versioned_topic, redis_nodes, served_gateway, schemaVersion="4")
    with pytest.raises(PySparkException, match="has no schema version 4 to read at"):
        spark.read.format("streamgate").options(**opts).load().collect()


def test_a_stream_read_at_a_version_converts_like_a_batch(
        spark: SparkSession, redis_nodes: str, served_gateway: str, versioned_topic: str,
        tmp_path: Path) -> None:
    name = f"sv_{uuid.uuid4().hex[:8]}"
    opts = source_options(versioned_topic, redis_nodes, served_gateway, schemaVersion="3")
    query = (spark.readStream.format("streamgate").options(**opts).load().writeStream
             .format("memory").queryName(name).trigger(availableNow=True)
             .option("checkpointLocation", str(tmp_path / "checkpoint")).start())
    try:
        assert query.awaitTermination(120)
        assert query.exception() is None
        assert_rows_at(in_offset_order(spark.table(name).collect()), 3, AT_3)
    finally:
        query.stop()
        spark.catalog.dropTempView(name)


def test_archived_values_are_converted_as_the_stream_s_are(
        spark: SparkSession, redis_nodes: str, redis_cluster: Any, served_gateway: str,
        versioned_topic: str, tmp_path: Path) -> None:
    access = ArchiveAccess(f"file://{tmp_path}/archive")
    opts = source_options(versioned_topic, redis_nodes, served_gateway, schemaVersion="2",
                          archiveUrl=access.url)
    moved = Archive(list(redis_cluster.startup_nodes), access).move(versioned_topic, 0)
    assert moved.count == len(written_versions())  # every value now in the segment
    assert_rows_at(read_at(spark, opts), 2, AT_2)


def test_reading_at_a_version_needs_the_gateway_holding_the_registry() -> None:
    with pytest.raises(InvalidSourceOption, match="schemaVersion"):
        parse_options({"topic": "t", "redisNodes": "h:1", "partitions": "0",
                       "schemaVersion": "2"})
    with pytest.raises(InvalidSourceOption, match="schemaVersion"):
        parse_options({"topic": "t", "redisNodes": "h:1", "gateway": "http://g",
                       "schemaVersion": "two"})
    assert parse_options({"topic": "t", "redisNodes": "h:1", "gateway": "http://g",
                          "schemaVersion": "2"}).schema_version == 2
