"""Pure helpers of the group store: start positions, idle clamping, error classification, reply
parsing."""

from __future__ import annotations

import dataclasses

import pytest

from storage.codec import decode_entry
from storage.errors import InvalidOffset
from storage.group_replies import (
    MAX_IDLE_MS,
    clamp_idle_ms,
    find_group,
    info_row,
    is_missing_group,
    parse_pending,
    parse_read_reply,
    present,
    start_id,
    state_from,
)
from storage.models import GroupPartitionState, PendingEntry, ValueFormat
from storage.wire import errors


@pytest.mark.parametrize(("start", "expected"),
                         [("earliest", "0"), ("latest", "$"), ("12-3", "12-3")])
def test_start_positions_map_to_xgroup_ids(start: str, expected: str) -> None:
    assert start_id(start) == expected


@pytest.mark.parametrize("bad", ["", "0", "$", "EARLIEST", "1-", "a-1", "1-2-3"])
def test_start_rejects_anything_but_earliest_latest_or_an_offset(bad: str) -> None:
    with pytest.raises(InvalidOffset):
        start_id(bad)


def test_idle_is_clamped_below_the_epoch() -> None:
    assert clamp_idle_ms(0) == 0
    assert clamp_idle_ms(30_000) == 30_000
    assert clamp_idle_ms(2**62) == MAX_IDLE_MS
    assert MAX_IDLE_MS < 1_000_000_000_000  # well below any server's epoch ms


def test_negative_idle_is_rejected() -> None:
    with pytest.raises(ValueError, match="idle_ms"):
        clamp_idle_ms(-1)


@pytest.mark.parametrize(
    "message",
    [
        "NOGROUP No such key 'k' or consumer group 'g' in XREADGROUP with GROUP option",
        "The XGROUP subcommand requires the key to exist. Note that for CREATE you may want to use "
        "MKSTREAM",
        "no such key",
    ],
)
def test_missing_group_replies_are_recognised(message: str) -> None:
    assert is_missing_group(errors.ResponseError(message))


def test_other_errors_are_not_missing_groups() -> None:
    assert not is_missing_group(errors.ResponseError("WRONGTYPE Operation against a key"))
    assert not is_missing_group(errors.ConnectionLost("NOGROUP"))


def test_pending_rows_become_pending_entries() -> None:
    rows = [[b"5-1", b"c", 70, 2]]  # XPENDING's extended form: id, consumer, idle ms, deliveries
    assert parse_pending(4, rows) == [PendingEntry(4, "5-1", "c", 70, 2)]


def test_an_xinfo_entry_becomes_a_map_by_name() -> None:
    assert info_row([b"name", b"g", b"pending", 2, b"lag", None]) == {"name": b"g", "pending": 2,
                                                                      "lag": None}


def test_read_reply_decodes_entries_with_their_partition() -> None:
    reply = [[b"sg:{t/2}:log", [[b"7-0", [b"v", b"x", b"f", b"b"]]]]]
    (entry,) = parse_read_reply(2, reply)
    assert (entry.partition, entry.offset, entry.value, entry.timestamp_ms) == (2, "7-0", b"x", 7)


def test_raw_read_reply_decodes_like_field_map_and_skips_deleted() -> None:
    fields = [b"v", b'{"a":1}', b"f", b"j", b"k", b"user-1", b"h", b'{"tenant":"a"}']
    reply = [[b"sg:{t/1}:log", [[b"1700000000123-4", fields], [b"1700000000124-0", None], None]]]
    (entry,) = parse_read_reply(1, reply)
    assert parse_read_reply(1, {b"sg:{t/1}:log": reply[0][1]}) == [entry]  # RESP3: a map of streams
    assert entry == decode_entry(1, b"1700000000123-4",
                                 dict(zip(fields[::2], fields[1::2], strict=True)))
    assert (entry.value_format, entry.key, dict(entry.headers)) == (ValueFormat.JSON, b"user-1",
                                                                    {"tenant": "a"})
    with pytest.raises(dataclasses.FrozenInstanceError):
        entry.value = b"changed"  # type: ignore[misc]


def test_empty_read_reply_after_a_block_timeout_is_no_entries() -> None:
    assert parse_read_reply(0, []) == []
    assert parse_read_reply(0, None) == []


def test_deleted_entries_in_a_reply_are_dropped() -> None:
    assert present([(None, None), (b"1-0", None), (b"2-0", {b"v": b""})]) == [(b"2-0", {b"v": b""})]


def test_state_of_a_missing_group_is_not_guessed() -> None:
    assert state_from(1, None, None) == GroupPartitionState(1, False, None, 0, None, None)


def test_state_keeps_a_nil_lag_as_none() -> None:
    info = {"name": b"g", "pending": 2, "last-delivered-id": b"9-0", "lag": None}
    assert state_from(0, info, "3-0") == GroupPartitionState(0, True, "9-0", 2, "3-0", None)
    assert state_from(0, {**info, "lag": 0}, "3-0").lag == 0


def test_find_group_matches_by_name() -> None:
    infos = [{"name": b"a"}, {"name": b"b"}]
    assert find_group(infos, "b") == {"name": b"b"}
    assert find_group(infos, "c") is None
