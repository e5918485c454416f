"""The values that cross the storage boundary: record columns and what an append wrote."""

from __future__ import annotations

import dataclasses

import pytest

from storage.models import (
    Appended,
    AppendResult,
    Delivery,
    Record,
    Records,
    StoredEntry,
    ValueFormat,
    first_deliveries,
)
from tests.unit.storage.append_calls import append_results

ROWS = [Record(0, b"a", ValueFormat.JSON, b"k"),
        Record(1, b"b", ValueFormat.BINARY, None, {"h": "1"}),
        Record(0, b"c", ValueFormat.JSON, None, {}, "idem")]


def test_records_as_columns_give_back_the_same_rows() -> None:
    records = Records.of(ROWS)
    assert records.rows() == ROWS
    assert records.idempotency_keys == [None, None, "idem"]
    assert records.taken([2, 0]).rows() == [ROWS[2], ROWS[0]]


def test_columns_no_record_has_are_none_and_rows_fill_them_empty() -> None:
    records = Records.of([Record(0, b"a", ValueFormat.JSON),
                          Record(1, b"b", ValueFormat.JSON, b"k")])
    assert (records.headers, records.idempotency_keys) == (None, None)
    assert Records([0, 1], [b"a", b"b"], [None, b"k"]).rows() == records.rows()


def test_joined_batches_keep_their_order_and_every_column() -> None:
    plain = Records([2, 2], [b"x", b"y"], [None, None])
    joined = Records.joined([plain, Records.of(ROWS)])
    assert joined.rows() == [Record(2, b"x", ValueFormat.JSON), Record(2, b"y", ValueFormat.JSON),
                             *ROWS]
    assert Records.joined([plain]) is plain


def test_appended_reads_as_one_result_per_record() -> None:
    appended = Appended([1, 0], ["5-0", "6-0"], None)
    assert appended == [AppendResult(1, "5-0"), AppendResult(0, "6-0")]
    assert appended[1:] == [AppendResult(0, "6-0")]
    assert Appended([1], ["5-0"], [True])[0] == AppendResult(1, "5-0", True)


def test_first_deliveries_equal_the_dataclass_and_stay_frozen() -> None:
    entries = [StoredEntry(1, f"1-{i}", b"v", ValueFormat.BINARY, None, {}, 1) for i in range(3)]
    fast = first_deliveries(entries)
    assert fast == [Delivery(entry, 1) for entry in entries]
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast[0].delivery_count = 2  # type: ignore[misc]


def test_script_reply_reads_as_results_with_duplicate_flags() -> None:
    assert append_results(2, [b"5-0", 0, "6-1", b"1"]) == [AppendResult(2, "5-0", False),
                                                            AppendResult(2, "6-1", True)]
