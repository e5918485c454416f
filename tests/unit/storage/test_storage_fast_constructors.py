"""The hot paths' slot-filling constructors build exactly what the frozen dataclasses' own __init__ builds."""

from __future__ import annotations

import dataclasses

import pytest

from storage.models import AppendResult, Delivery, Record, StoredEntry, ValueFormat, first_deliveries, new_record
from storage.scripts import parse_append_reply


def test_new_record_equals_the_dataclass_and_stays_frozen() -> None:
    fast = new_record(3, b"v", ValueFormat.JSON, b"k", {"h": "1"}, "idem")
    assert fast == Record(3, b"v", ValueFormat.JSON, b"k", {"h": "1"}, "idem")
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.partition = 4  # type: ignore[misc]


def test_first_deliveries_equal_the_dataclass_and_stay_frozen() -> None:
    entries = [StoredEntry(1, f"1-{i}", b"v", ValueFormat.BINARY, None, {}, 1) for i in range(3)]
    fast = first_deliveries(entries)
    assert fast == [Delivery(entry, 1) for entry in entries]
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast[0].delivery_count = 2  # type: ignore[misc]


def test_append_results_from_a_reply_equal_the_dataclass() -> None:
    assert parse_append_reply(2, [b"5-0", 0, "6-1", b"1"]) == [AppendResult(2, "5-0", False),
                                                                AppendResult(2, "6-1", True)]
