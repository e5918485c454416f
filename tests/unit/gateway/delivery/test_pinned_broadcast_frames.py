"""A pinned broadcast frames a page at once: each entry's message frame at the version, an error
frame in the place of each that cannot be converted, in order; the same as entry by entry."""

from __future__ import annotations

import orjson
from test_pinned_version import delivery, pinned


def test_a_page_is_framed_in_order_with_error_frames_in_place() -> None:
    page = [delivery(0, {"qty": 1}, "1").entry, delivery(1, b"{", "1").entry,
            delivery(2, {"quantity": 2}, "2").entry, delivery(3, {"qty": 3}, None).entry,
            delivery(4, {"quantity": 4}, None).entry]
    frames = [orjson.loads(frame) for frame in pinned(2).broadcast_frames("t", page)]
    assert [(f["type"], f["offset"]) for f in frames] == [
        ("message", "1-0"), ("error", "1-1"), ("message", "1-2"), ("error", "1-3"),
        ("message", "1-4")]
    assert [f["value"] for f in frames if f["type"] == "message"] == [
        {"quantity": 1}, {"quantity": 2}, {"quantity": 4}]
    assert {f["headers"]["sg-schema-version"] for f in frames if f["type"] == "message"} == {"2"}
    assert all(f["delivery_count"] == 1 for f in frames if f["type"] == "message")
    assert frames[1]["detail"] == "cannot convert to schema version 2: the value is not JSON"
    one_by_one = [pinned(2).broadcast_frame("t", entry) for entry in page]
    assert pinned(2).broadcast_frames("t", page) == one_by_one


def test_a_page_already_at_the_version_is_framed_as_stored_and_an_empty_one_is_nothing() -> None:
    page = [delivery(n, {"quantity": n}, "2").entry for n in range(3)]
    frames = pinned(2).broadcast_frames("t", page)
    assert [orjson.loads(frame)["value"] for frame in frames] == [{"quantity": n}
                                                                   for n in range(3)]
    assert pinned(2).broadcast_frames("t", []) == []
