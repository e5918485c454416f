"""Stream-ID arithmetic behind inclusive ``from`` and exclusive ``next_offset``."""

from __future__ import annotations

import pytest

from gateway.errors import Problem
from gateway.offsets import MAX_SEQ, parse_offset, predecessor, successor


def test_successor_increments_sequence_then_carries_into_ms() -> None:
    assert successor("5-0") == "5-1"
    assert successor(f"5-{MAX_SEQ}") == "6-0"


def test_predecessor_steps_back_and_stops_at_zero() -> None:
    assert predecessor("5-3") == "5-2"
    assert predecessor("5-0") == f"4-{MAX_SEQ}"
    assert predecessor("0-0") is None


@pytest.mark.parametrize(
    "text", ["", "1", "1-", "-1", "a-b", "1-2-3", " 1-2", "1-99999999999999999999999"]
)
def test_parse_offset_rejects_non_stream_ids(text: str) -> None:
    with pytest.raises(Problem) as caught:
        parse_offset(text, "/from")
    assert caught.value.status == 422
