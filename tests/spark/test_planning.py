"""Pure planning decisions of the source: budget split, data-loss counting, option parsing."""

from __future__ import annotations

import pytest

from streamgate_spark.budget import allocate
from streamgate_spark.data_loss import GroupPosition, Loss, find_loss
from streamgate_spark.errors import InvalidSourceOption
from streamgate_spark.options import parse_options
from streamgate_spark.streams import StreamState

pytestmark = pytest.mark.spark


def test_budget_goes_to_partitions_with_entries_within_cap() -> None:
    assert allocate(10, {0: 100, 1: 2, 2: 0}) == {0: 8, 1: 2, 2: 0}
    assert allocate(10, {0: 3, 1: 3}) == {0: 3, 1: 3}
    assert sum(allocate(7, {0: 50, 1: 50, 2: 50}).values()) == 7


def test_loss_is_counted_from_read_counter_at_checkpoint() -> None:
    state = StreamState(length=4, entries_added=20, last_generated_id="9-19", first_id="9-16",
                        max_deleted_id="0-0")
    assert find_loss("9-9", state, GroupPosition("9-9", 10)) == Loss("9-9", "9-16", 6)
    assert find_loss("9-9", state, None) == Loss("9-9", "9-16", None)
    assert find_loss("9-15", state, None) is None
    assert find_loss("0-0", state, None) == Loss("0-0", "9-16", 16)


def test_options_are_case_insensitive_strings_and_validated() -> None:
    parsed = parse_options({"topic": "t", "redisNodes": "h:1,h:2", "partitions": "1,0",
                            "startingOffsets": '{"0": "5-1"}', "maxEntriesPerTrigger": "10"})
    assert (parsed.redis_nodes, parsed.partitions, parsed.start_for(0), parsed.start_for(1)) == (
        (("h", 1), ("h", 2)), (0, 1), "5-1", "earliest")
    assert parsed.consumer_name == "spark-t"
    with pytest.raises(InvalidSourceOption, match="partitions"):
        parse_options({"topic": "t", "redisNodes": "h:1"})


def test_archive_options_give_the_segment_store_and_need_archive_url() -> None:
    base = {"topic": "t", "redisNodes": "h:1", "partitions": "0"}
    assert parse_options(base).archive is None
    local = parse_options({**base, "archiveUrl": "file:///data/archive/"}).archive
    assert local is not None
    assert (local.root(), local.s3) == ("/data/archive", None)
    s3 = parse_options({**base, "archiveUrl": "s3://bucket/tier", "archiveS3Endpoint": "h:9000",
                        "archiveS3Scheme": "http", "archiveS3AccessKey": "a",
                        "archiveS3SecretKey": "s"}).archive
    assert s3 is not None
    assert s3.s3 is not None
    assert (s3.root(), s3.s3.endpoint_override, s3.s3.scheme, s3.s3.access_key) == (
        "bucket/tier", "h:9000", "http", "a")
    with pytest.raises(InvalidSourceOption, match=r"archiveS3Endpoint.*needs archiveUrl"):
        parse_options({**base, "archiveS3Endpoint": "h:9000"})
    with pytest.raises(InvalidSourceOption, match="archiveUrl"):
        parse_options({**base, "archiveUrl": "/data/archive"})
    with pytest.raises(InvalidSourceOption, match="archiveS3Scheme"):
        parse_options({**base, "archiveUrl": "s3://b", "archiveS3Scheme": "ftp"})
