"""The retained-bytes arithmetic: minute buckets, the cut (retention or log start), what a
subject's buckets still count, and which can never count again."""

from __future__ import annotations

from gateway.quotas.buckets import (
    BUCKET_MS,
    TopicSpan,
    bucket_end_ms,
    field_of,
    log_start_ms,
    parse_field,
    tally,
)
from storage.models import ArchivedRange, PartitionInfo

HOUR_MS = 3_600_000
NOW_MS = 100 * HOUR_MS + 12_345


def test_a_charge_goes_to_the_bucket_ending_on_the_next_minute() -> None:
    assert bucket_end_ms(NOW_MS) == 100 * HOUR_MS + BUCKET_MS
    assert bucket_end_ms(100 * HOUR_MS) == 100 * HOUR_MS


def test_a_field_names_topic_incarnation_and_bucket_even_with_odd_topic_names() -> None:
    assert parse_field(field_of("a.b-c_d", 17, 120_000)) == ("a.b-c_d", 17, 120_000)
    assert parse_field("garbage") is None


def test_a_bucket_counts_while_it_ends_after_the_retention_cut() -> None:
    span = TopicSpan(created_at_ms=5, retention_ms=HOUR_MS, log_start_ms=0)
    inside = field_of("t", 5, NOW_MS - HOUR_MS + BUCKET_MS)
    gone = field_of("t", 5, NOW_MS - HOUR_MS - 1)
    counted = tally({inside: 300, gone: 200}, {"t": span}, NOW_MS)
    assert counted.used == 300
    assert counted.dead == {gone: 200}
    assert counted.leaves_at_ms == NOW_MS + BUCKET_MS


def test_a_log_start_after_the_retention_cut_moves_the_cut() -> None:
    span = TopicSpan(5, retention_ms=HOUR_MS, log_start_ms=NOW_MS - BUCKET_MS)
    trimmed, kept = field_of("t", 5, NOW_MS - 2 * BUCKET_MS), field_of("t", 5, NOW_MS)
    counted = tally({trimmed: 100, kept: 50}, {"t": span}, NOW_MS)
    assert (counted.used, counted.dead) == (50, {trimmed: 100})


def test_an_empty_deleted_or_recreated_topic_counts_nothing() -> None:
    end = bucket_end_ms(NOW_MS)
    spans = {"empty": TopicSpan(5, HOUR_MS, None), "again": TopicSpan(9, HOUR_MS, 0)}
    buckets = {field_of("empty", 5, end): 1, field_of("gone", 5, end): 2,
               field_of("again", 5, end): 4}
    counted = tally(buckets, spans, NOW_MS)
    assert (counted.used, counted.leaves_at_ms) == (0, None)
    assert counted.dead == buckets


def test_a_bucket_of_a_topic_newer_than_what_is_known_still_counts() -> None:
    end = bucket_end_ms(NOW_MS)
    counted = tally({field_of("t", 9, end): 8}, {"t": TopicSpan(5, HOUR_MS, 0)}, NOW_MS)
    assert (counted.used, counted.dead) == (8, {})


def test_the_log_starts_at_the_oldest_offset_of_any_partition_archive_first() -> None:
    archived = ArchivedRange("1000-0", "1999-3", 10, 1, 100)
    infos = [PartitionInfo(0, 3, "5000-0", "6000-0"),
             PartitionInfo(1, 2, "3000-1", "3001-0", archived),
             PartitionInfo(2, 0, None, None)]
    assert log_start_ms(infos) == 1000
    assert log_start_ms([PartitionInfo(0, 0, None, None)]) is None
