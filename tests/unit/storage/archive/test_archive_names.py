"""Segment names: reversible topic escaping, and lexicographic order as offset order."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from storage.archive.names import escape_topic, parse_segment_name, segment_name, unescape_topic

SAFE = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-~%")


@given(st.text(min_size=1))
def test_any_topic_escapes_into_one_safe_path_segment_and_back(topic: str) -> None:
    escaped = escape_topic(topic)
    assert set(escaped) <= SAFE
    assert not escaped.startswith(".")
    assert unescape_topic(escaped) == topic


@given(st.text(min_size=1), st.integers(0, 10_000), st.integers(0, 2**64 - 1),
       st.integers(0, 2**64 - 1), st.integers(0, 2**63))
def test_segment_names_parse_back(topic: str, partition: int, ms: int, seq: int,
                                  epoch: int) -> None:
    name = segment_name(topic, partition, f"{ms}-{seq}", epoch)
    parsed = parse_segment_name(name)
    assert (parsed.topic, parsed.partition, parsed.epoch) == (topic, partition, epoch)
    assert parsed.first_offset == f"{ms}-{seq}"


def test_two_owners_name_one_range_apart() -> None:
    assert segment_name("t", 0, "5-0", 7) != segment_name("t", 0, "5-0", 8)


@given(st.lists(st.tuples(st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1)), min_size=2))
def test_names_sort_as_their_offsets(firsts: list[tuple[int, int]]) -> None:
    names = {segment_name("t", 0, f"{ms}-{seq}"): (ms, seq) for ms, seq in firsts}
    assert [names[name] for name in sorted(names)] == sorted(names.values())


def test_escaping_is_percent_encoding_with_a_leading_dot_escaped() -> None:
    assert escape_topic("orders.v1") == "orders.v1"
    assert escape_topic("a/b c%") == "a%2Fb%20c%25"
    assert escape_topic("..") == "%2E."
    assert escape_topic("\u00e9") == "%C3%A9"


@pytest.mark.parametrize("name", [
    "t/0/1-0-e0.parquet",  # not zero-padded: a second name for one segment
    "t/00/00000000000000000001-00000000000000000000-e00000000000000000000.parquet",
    "t/0/00000000000000000001-00000000000000000000-e00000000000000000000.parquet.tmp",
    "t/0/x/00000000000000000001-00000000000000000000-e00000000000000000000.parquet",
    "t/0/00000000000000000001-00000000000000000000.parquet",  # no epoch
    "a%2fb/0/00000000000000000001-00000000000000000000-e00000000000000000000.parquet",
])
def test_other_names_are_not_segment_names(name: str) -> None:
    with pytest.raises(ValueError, match="not a segment name"):
        parse_segment_name(name)
