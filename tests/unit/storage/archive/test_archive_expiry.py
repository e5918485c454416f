"""Which archived segments retention drops: whole ones, oldest first, by time and by the whole
log's length."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from storage.archive.manifest import SegmentRef, expired_prefix

# three segments of 40, 30 and 20 entries: offsets 1-0..1-39, 2-0..2-29, 3-0..3-19
REFS = [SegmentRef(f"s{n}", f"{n}-0", f"{n}-{count - 1}", count, count * 100)
        for n, count in ((1, 40), (2, 30), (3, 20))]


def test_a_segment_goes_by_time_only_once_its_last_entry_is_older_than_the_cut() -> None:
    assert expired_prefix(REFS, 100, "2-29", None) == REFS[:1]  # the second straddles the cut
    assert expired_prefix(REFS, 100, "2-30", None) == REFS[:2]
    assert expired_prefix(REFS, 100, "1-0", None) == []


def test_by_length_the_log_keeps_at_least_max_length_entries() -> None:
    # 90 archived + 10 hot: dropping the first leaves 60, the second too would leave 30
    assert expired_prefix(REFS, 100, None, 50) == REFS[:1]
    assert expired_prefix(REFS, 100, None, 30) == REFS[:2]
    assert expired_prefix(REFS, 100, None, 0) == REFS
    assert expired_prefix(REFS, 100, None, 100) == []


def test_time_and_length_each_take_their_longer_prefix() -> None:
    assert expired_prefix(REFS, 100, "2-30", 100) == REFS[:2]
    assert expired_prefix(REFS, 100, "1-0", 30) == REFS[:2]


@given(st.integers(0, 200), st.integers(0, 200))
def test_length_retention_stops_before_the_segment_that_would_cut_too_deep(
        hot: int, max_length: int) -> None:
    total = sum(ref.count for ref in REFS) + hot
    dropped = expired_prefix(REFS, total, None, max_length)
    assert dropped == REFS[:len(dropped)]
    left = total - sum(ref.count for ref in dropped)
    assert left >= min(max_length, total)
    if len(dropped) < len(REFS):  # the next one would have cut below max_length
        assert left - REFS[len(dropped)].count < max_length
