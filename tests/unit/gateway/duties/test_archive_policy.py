"""What an owner may move into the archive now: what every group consumed, and of it what memory
pressure or the hot retention says must go."""

from __future__ import annotations

import pytest

from gateway.duties.archive import archive_end, tighter


@pytest.mark.parametrize(("a", "b", "nearer"), [
    ("+", "5-0", "5-0"), ("5-0", "+", "5-0"), ("+", "+", "+"),
    ("5-1", "5-2", "5-1"), ("(7-0", "6-9", "6-9"), ("(5-0", "5-0", "(5-0"),
    ("5-0", "(5-0", "(5-0"), ("10-0", "9-99", "9-99")])
def test_the_nearer_end_wins(a: str, b: str, nearer: str) -> None:
    assert tighter(a, b) == nearer


def test_memory_pressure_moves_everything_whatever_the_groups_read() -> None:
    assert archive_end(None, True, None) == "+"
    assert archive_end("(40-0", True, 10) == "+"  # the group behind reads the archive


def test_without_pressure_only_entries_past_the_hot_retention_move() -> None:
    assert archive_end(None, False, 1000) == "(1000-0"
    assert archive_end("(500-3", False, 1000) == "(500-3"  # a group still needs the rest
    assert archive_end("2000-0", False, 1000) == "(1000-0"


def test_nothing_moves_without_pressure_or_hot_retention() -> None:
    assert archive_end(None, False, None) is None
