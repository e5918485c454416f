"""The streamgate source over a tiered log, on the real cluster with segments on a local path (and
on moto's S3 server): archived entries are read from their segment files, then the stream's, once
each and in order, across restarts, caps and moves committed while the query runs."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import orjson
import pyarrow.fs as pafs
import pytest
from moto_server import MotoServer
from pyspark.sql import DataFrame, Row, SparkSession

from storage.archive.object_store import S3Settings, open_archive
from storage.archive.segments import SegmentInfo
from storage.archive.tier import ArchiveSettings
from storage.codec import offset_key
from storage.redis_store import RedisStreamStore
from storage.settings import RedisStoreSettings
from streamgate_spark.archive_files import ArchiveAccess
from streamgate_spark.errors import ArchiveNotConfigured
from streamgate_spark.ranges import StreamRange, read_range
from tests.spark.test_streaming_source import options, run_to_parquet

pytestmark = pytest.mark.spark

SEGMENT_ENTRIES = 40


class Archive:
    """Moves a partition's oldest entries into segments (as the partition owner's duty does)."""

    def __init__(self, startup_nodes: list[tuple[str, int]], access: ArchiveAccess) -> None:
        self.settings = RedisStoreSettings(startup_nodes=startup_nodes)
        self.access = access

    def move(self, topic: str, partition: int) -> SegmentInfo:
        """One segment of at most SEGMENT_ENTRIES of the partition's oldest entries."""
        moved = asyncio.run(self._move(topic, partition))
        assert moved is not None
        return moved

    async def _move(self, topic: str, partition: int) -> SegmentInfo | None:
        async with open_archive(self.access.url, self.access.s3) as files, RedisStreamStore(
                self.settings, archive=files,
                archive_settings=ArchiveSettings(segment_max_entries=SEGMENT_ENTRIES)) as store:
            assert store.archive is not None
            return await store.archive.move_oldest(topic, partition, epoch=1, until=None)


@pytest.fixture
def archive(redis_cluster: Any, tmp_path: Path) -> Archive:
    """An archive on a local path."""
    return Archive(list(redis_cluster.startup_nodes),
                   ArchiveAccess(f"file://{tmp_path}/archive"))


def tiered(topic: str, redis_nodes: str, archive: Archive, **extra: Any) -> dict[str, str]:
    """Source options reading ``archive``'s segments."""
    s3 = archive.access.s3
    given = {} if s3 is None else {
        "archiveS3Endpoint": s3.endpoint_override, "archiveS3Region": s3.region,
        "archiveS3AccessKey": s3.access_key, "archiveS3SecretKey": s3.secret_key,
        "archiveS3Scheme": s3.scheme}
    return options(topic, redis_nodes, archiveUrl=archive.access.url, **given, **extra)


def expected_row(partition: int, offset: str, n: int) -> tuple[Any, ...]:
    """What the conftest's ``publish`` wrote as the n-th entry."""
    return (partition, offset, b"k%d" % (n % 3), orjson.dumps({"n": n}),
            orjson.dumps({"n": n}).decode(),
            {"source": "test", "n": str(n)} if n % 2 else None, int(offset.split("-")[0]))


def as_tuple(row: Row) -> tuple[Any, ...]:
    return (row.partition, row.offset, bytes(row.key), bytes(row.value), row.value_str,
            row.headers, round(row.timestamp.timestamp() * 1000))


def read_all(frame: DataFrame) -> dict[int, list[tuple[Any, ...]]]:
    """The rows per partition in the order the source returned them."""
    by_partition: dict[int, list[tuple[Any, ...]]] = {}
    for row in frame.collect():
        by_partition.setdefault(row.partition, []).append(as_tuple(row))
    return by_partition


def published_rows(published: dict[int, list[str]]) -> dict[int, list[tuple[Any, ...]]]:
    return {partition: [expected_row(partition, offset, n) for n, offset in enumerate(offsets)]
            for partition, offsets in published.items()}


def landed(spark: SparkSession, tmp_path: Path) -> list[tuple[int, str]]:
    rows = spark.read.parquet(str(tmp_path / "out")).select("partition", "offset").collect()
    return sorted((row.partition, row.offset) for row in rows)


def flat(published: dict[int, list[str]]) -> list[tuple[int, str]]:
    return sorted((partition, offset) for partition, offsets in published.items()
                  for offset in offsets)


@pytest.fixture(params=["file", "s3"])
def any_archive(request: pytest.FixtureRequest, archive: Archive) -> Archive:
    """The local archive, or one in a bucket of moto's S3 server under a prefix of its own."""
    if request.param == "file":
        return archive
    server: MotoServer = request.getfixturevalue("moto_s3")
    s3 = S3Settings(endpoint_override=server.endpoint, region=server.region,
                    access_key=server.access_key, secret_key=server.secret_key, scheme="http")
    pafs.S3FileSystem(access_key=s3.access_key, secret_key=s3.secret_key, region=s3.region,
                      scheme="http", endpoint_override=s3.endpoint_override,
                      allow_bucket_creation=True).create_dir("spark-archive")
    return Archive(list(archive.settings.startup_nodes),
                   ArchiveAccess(f"s3://spark-archive/{uuid.uuid4().hex}", s3))


def test_batch_read_crosses_the_tiers_in_order_with_every_column(
        spark: SparkSession, redis_nodes: str, topic: str, publish: Any,
        any_archive: Archive) -> None:
    published = {0: publish(topic, 0, 100), 1: publish(topic, 1, 50)}
    for partition in (0, 0, 1):
        any_archive.move(topic, partition)
    frame = spark.read.format("streamgate").options(
        **tiered(topic, redis_nodes, any_archive)).load()
    assert read_all(frame) == published_rows(published)


def test_available_now_lands_archived_and_hot_entries_once_within_the_cap(
        spark: SparkSession, redis_nodes: str, topic: str, publish: Any, archive: Archive,
        tmp_path: Path) -> None:
    published = {0: publish(topic, 0, 100), 1: publish(topic, 1, 50)}
    for partition in (0, 0, 1):
        archive.move(topic, partition)
    progress = run_to_parquet(
        spark, tiered(topic, redis_nodes, archive, maxEntriesPerTrigger=25), tmp_path)
    sizes = [p["numInputRows"] for p in progress if p["numInputRows"]]
    assert max(sizes) <= 25
    assert sum(sizes) == 150
    assert landed(spark, tmp_path) == flat(published)


def test_restart_from_a_checkpoint_inside_the_archive_continues_without_gap(
        spark: SparkSession, redis_nodes: str, topic: str, publish: Any, archive: Archive,
        tmp_path: Path) -> None:
    published = {0: publish(topic, 0, 60)}
    opts = tiered(topic, redis_nodes, archive, partitions="0")
    run_to_parquet(spark, opts, tmp_path)
    published[0] += publish(topic, 0, 60, first=60)
    archive.move(topic, 0)
    second = archive.move(topic, 0)
    # the checkpoint (the 60th entry) now lies inside the second segment
    assert (offset_key(second.first_offset) < offset_key(published[0][59])
            < offset_key(second.last_offset))
    run_to_parquet(spark, opts, tmp_path)
    assert landed(spark, tmp_path) == flat(published)


def test_moves_committed_between_micro_batches_lose_nothing(
        spark: SparkSession, redis_nodes: str, topic: str, publish: Any, archive: Archive,
        tmp_path: Path) -> None:
    published = {0: publish(topic, 0, 160)}
    seen: list[list[str]] = []

    def each_batch(frame: DataFrame, batch_id: int) -> None:
        seen.append([row.offset for row in frame.collect()])  # one partition: in order
        if len(seen) <= 3:  # entries planned as hot move before the next batch reads them
            archive.move(topic, 0)

    query = (spark.readStream.format("streamgate")
             .options(**tiered(topic, redis_nodes, archive, partitions="0",
                               maxEntriesPerTrigger=30)).load()
             .writeStream.foreachBatch(each_batch).trigger(availableNow=True)
             .option("checkpointLocation", str(tmp_path / "checkpoint")).start())
    query.awaitTermination(120)
    assert query.exception() is None
    assert [offset for batch in seen for offset in batch] == published[0]
    assert max(len(batch) for batch in seen) <= 30


def test_a_move_while_a_range_is_read_leaves_no_gap_or_duplicate(
        redis_cluster: Any, topic: str, publish: Any, archive: Archive) -> None:
    offsets = publish(topic, 0, 100)
    archive.move(topic, 0)
    planned = StreamRange(topic=topic, partition=0, start="0-0", end=offsets[-1],
                          first_id=offsets[0], redis_nodes=tuple(redis_cluster.startup_nodes),
                          page_size=10, fail_on_data_loss=True, archive=archive.access)
    batches = read_range(planned)
    read = next(batches)["offset"].to_pylist()  # the first segment
    read += next(batches)["offset"].to_pylist()  # the stream's first page
    archive.move(topic, 0)  # the page just read and every entry after it leave the stream
    archive.move(topic, 0)
    read += [offset for batch in batches for offset in batch["offset"].to_pylist()]
    assert read == offsets


def test_a_range_in_the_archive_fails_clearly_without_archive_url(
        spark: SparkSession, redis_cluster: Any, redis_nodes: str, topic: str, publish: Any,
        archive: Archive) -> None:
    offsets = publish(topic, 0, 50)
    archive.move(topic, 0)
    frame = spark.read.format("streamgate").options(**options(topic, redis_nodes,
                                                              partitions="0")).load()
    with pytest.raises(Exception, match=r"(?s)ArchiveNotConfigured.*archiveUrl"):
        frame.collect()
    # a range planned hot whose entries moved before a task read them fails the same way
    hot = StreamRange(topic=topic, partition=0, start=offsets[39], end=offsets[-1],
                      first_id=offsets[40], redis_nodes=tuple(redis_cluster.startup_nodes),
                      page_size=5, fail_on_data_loss=True)
    archive.move(topic, 0)
    with pytest.raises(ArchiveNotConfigured, match="archiveUrl"):
        list(read_range(hot))


def test_a_schema_of_some_columns_reads_only_those(
        spark: SparkSession, redis_nodes: str, topic: str, publish: Any,
        archive: Archive) -> None:
    published = {0: publish(topic, 0, 60)}
    archive.move(topic, 0)
    frame = (spark.read.format("streamgate").schema("partition INT, offset STRING, value BINARY")
             .options(**tiered(topic, redis_nodes, archive)).load())
    assert frame.columns == ["partition", "offset", "value"]
    assert [(row.partition, row.offset, bytes(row.value)) for row in frame.collect()] == [
        (0, offset, orjson.dumps({"n": n})) for n, offset in enumerate(published[0])]
    odd = spark.read.format("streamgate").schema("offset STRING, value STRING")
    with pytest.raises(Exception, match="no column value string"):
        odd.options(**tiered(topic, redis_nodes, archive)).load().collect()
