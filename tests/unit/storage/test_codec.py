"""Entry codec and key layout."""

from __future__ import annotations

import pytest
from redis.crc import key_slot

from storage.codec import (
    decode_entry,
    decode_raw_entries,
    encode_fields,
    timestamp_ms,
    validate_offset,
    validate_offsets,
)
from storage.errors import InvalidOffset
from storage.keys import dedup_key, delayed_key, log_key, partition_keys_pattern, slot_of
from storage.models import Record, StoredEntry, ValueFormat


def _round_trip(record: Record, offset: str = "1700000000123-4") -> tuple[list[bytes], StoredEntry]:
    fields = encode_fields(record)
    as_map = dict(zip(fields[0::2], fields[1::2], strict=True))
    return fields, decode_entry(record.partition, offset.encode(), as_map)


def test_bare_binary_value_stores_only_value_and_format() -> None:
    fields, entry = _round_trip(Record(partition=3, value=b"\x00\xff"))
    assert fields == [b"v", b"\x00\xff", b"f", b"b"]
    assert entry.value == b"\x00\xff"
    assert entry.key is None
    assert entry.headers == {}
    assert entry.value_format is ValueFormat.BINARY


def test_json_value_key_and_headers_round_trip() -> None:
    record = Record(partition=1, value=b'{"a":1}', value_format=ValueFormat.JSON, key=b"user-1",
                    headers={"h": "ü"})
    fields, entry = _round_trip(record)
    assert fields[:2] == [b"Kuser-1", b'{"a":1}'], "the value under K + the key"
    assert b"h" in fields
    assert entry.partition == 1
    assert entry.offset == "1700000000123-4"
    assert entry.value_format is ValueFormat.JSON
    assert entry.key == b"user-1"
    assert dict(entry.headers) == {"h": "ü"}
    assert entry.timestamp_ms == 1700000000123


@pytest.mark.parametrize("key", [b"", b"K", b"v", b"k", b"\x00\xff", "ü".encode() * 40])
def test_any_key_round_trips_in_field_name_both_decoders(key: bytes) -> None:
    record = Record(partition=2, value=b"\x01", key=key, headers={"a": "b"})
    fields, entry = _round_trip(record)
    assert fields[0] == b"K" + key
    assert (entry.key, entry.value, dict(entry.headers)) == (key, b"\x01", {"a": "b"})
    (raw,) = decode_raw_entries(2, [[b"1700000000123-4", fields]])
    assert raw == entry


def test_entries_with_key_as_value_read_the_same() -> None:
    earlier = [b"v", b'{"a":1}', b"k", b"user-1", b"h", b'{"h":"1"}']
    (raw,) = decode_raw_entries(0, [[b"5-0", earlier]])
    as_map = decode_entry(0, b"5-0", dict(zip(earlier[0::2], earlier[1::2], strict=True)))
    assert raw == as_map
    assert (raw.value, raw.key, dict(raw.headers)) == (b'{"a":1}', b"user-1", {"h": "1"})
    now = Record(0, b'{"a":1}', ValueFormat.JSON, key=b"user-1", headers={"h": "1"})
    assert raw == decode_raw_entries(0, [[b"5-0", encode_fields(now)]])[0], (
        "as the same record written today")


def test_json_value_is_stored_without_a_format_field() -> None:
    fields, entry = _round_trip(Record(partition=0, value=b"[1]", value_format=ValueFormat.JSON,
                                       key=b"k"))
    assert fields == [b"Kk", b"[1]"]
    assert entry.value_format is ValueFormat.JSON


@pytest.mark.parametrize(("fields", "expected"), [
    ({b"v": b"1"}, ValueFormat.JSON),  # written since 2026-11-25
    ({b"v": b"1", b"f": b"j"}, ValueFormat.JSON),  # written before
    ({b"v": b"1", b"f": b"b"}, ValueFormat.BINARY),
    ({b"v": b"1", b"f": b"?"}, ValueFormat.BINARY),  # unknown: base64 renders any bytes
])
def test_entries_of_every_layout_read_with_their_format(fields: dict[bytes, bytes],
                                                        expected: ValueFormat) -> None:
    assert decode_entry(0, b"1-0", fields).value_format is expected
    flat = [item for pair in fields.items() for item in pair]
    assert [e.value_format for e in decode_raw_entries(0, [[b"1-0", flat]])] == [expected]


def test_empty_key_is_kept_distinct_from_no_key() -> None:
    _, entry = _round_trip(Record(partition=0, value=b"", key=b""))
    assert entry.key == b""


@pytest.mark.parametrize("offset", ["0-0", "1-2", "1700000000123-18446744073709551615"])
def test_valid_offsets_pass(offset: str) -> None:
    assert validate_offset(offset) == offset
    assert timestamp_ms(offset) == int(offset.split("-")[0])


@pytest.mark.parametrize("offset", ["", "1", "1-", "-1", "a-1", "1-2-3", "+", "-", "(1-2", "1-2\n",
                                    # digits of other scripts: Redis refuses them
                                    "١٢-٣", "¹-1", "1-²"])
def test_invalid_offsets_raise(offset: str) -> None:
    with pytest.raises(InvalidOffset):
        validate_offset(offset)


@pytest.mark.parametrize("offset",
                         ["", "1", "1-", "-1", "a-1", "1-2-3", "+", "-", "(1-2", "1-2\n",
                          "1-2\n3-4", "\n1-2", "١٢-٣", "¹-1", "1-²"])
def test_offset_list_with_an_invalid_one_raises_naming_it(offset: str) -> None:
    for offsets in ([offset], ["1-0", offset], ["1-0", offset, "2-0"], [offset, "3-0"]):
        with pytest.raises(InvalidOffset) as raised:
            validate_offsets(offsets)
        assert raised.value.offset == offset


def test_a_list_of_valid_offsets_comes_back_as_a_list() -> None:
    offsets = ("0-0", "1-2", "1700000000123-18446744073709551615", "5-10")
    assert validate_offsets(offsets) == list(offsets)
    assert validate_offsets([]) == []


def test_partition_keys_share_one_slot() -> None:
    keys = [log_key("orders", 7), dedup_key("orders", 7, "abc"), delayed_key("orders", 7)]
    assert keys[0] == "sg:{orders/7}:log"
    assert keys[1] == "sg:{orders/7}:dedup:abc"
    assert keys[2] == "sg:{orders/7}:delayed"
    assert len({key_slot(k.encode()) for k in keys}) == 1
    assert slot_of("orders", 7) == key_slot(keys[0].encode())


def test_partitions_of_a_topic_spread_over_slots() -> None:
    assert len({slot_of("orders", p) for p in range(16)}) > 8


def test_scan_pattern_escapes_glob_characters() -> None:
    assert partition_keys_pattern("a*b", 0) == "sg:{a\\*b/0}:*"
