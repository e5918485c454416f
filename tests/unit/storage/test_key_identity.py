"""Key identities in key spaces: the empty space keeps keys as they were stored, every other space
gets a range of the registry of its own, never overlapping another's (prefixes of each other
included), and snapshot cursors name keys of the reader's space only."""

from __future__ import annotations

import pytest

from storage.compaction import cursor_index, snapshot_cursor
from storage.keys import key_identity, key_index_key, key_space_range

TOPIC = "orders"
SPACES = [b"tenant=a", b"tenant=ab", b"tenant=a\x1fregion=x", b"tenant=b", b"t"]
KEYS = [b"", b"k", b"\x00", b"\x00\x00", b"\xff", b"\xff\xff\xff", "é".encode(), b"z" * 300]


def in_range(member: bytes, low: bytes, high: bytes) -> bool:
    """Whether ZRANGEBYLEX ``low`` ``high`` holds ``member`` (Redis compares bytes as memcmp)."""
    above = {b"-": True, b"+": False}.get(low)
    if above is None:
        above = member >= low[1:] if low[:1] == b"[" else member > low[1:]
    below = {b"+": True, b"-": False}.get(high)
    if below is None:
        below = member <= high[1:] if high[:1] == b"[" else member < high[1:]
    return above and below


def test_the_empty_space_keeps_each_key_as_it_was_stored() -> None:
    for key in KEYS:
        assert key_identity(b"", key) == key
    assert key_space_range(TOPIC, 0, b"") == (b"-", b"+")


def test_a_spaced_identity_is_the_marker_the_space_and_the_separator_before_the_key() -> None:
    assert key_identity(b"tenant=a", b"k") == b"\xfftenant=a\x00k"
    assert key_identity(b"tenant=a", b"k") != key_identity(b"tenant=b", b"k")


def test_a_space_holding_the_separator_byte_is_refused() -> None:
    with pytest.raises(ValueError, match="separator"):
        key_identity(b"tenant=a\x00", b"k")


def test_no_published_key_of_the_empty_space_passes_for_a_spaced_one() -> None:
    # published keys are UTF-8, which never holds the marker byte
    spaced = key_identity(b"tenant=a", b"k")
    assert all(spaced != text.encode() for text in ("\xfftenant=a\x00k", "ÿtenant=a\x00k"))


def test_each_space_pages_exactly_its_own_keys() -> None:
    for space in SPACES:
        low, high = key_space_range(TOPIC, 3, space)
        for other in SPACES:
            for key in KEYS:
                index = key_index_key(TOPIC, 3, key_identity(other, key))
                assert in_range(index, low, high) == (other == space), (space, other, key)


def test_a_space_never_pages_the_empty_spaces_keys() -> None:
    for space in SPACES:
        low, high = key_space_range(TOPIC, 0, space)
        for key in KEYS:
            assert not in_range(key_index_key(TOPIC, 0, key), low, high)


def test_a_cursor_names_the_key_without_its_space_and_reads_back_in_the_readers() -> None:
    index = key_index_key(TOPIC, 0, key_identity(b"tenant=a", b"secret-key"))
    cursor = snapshot_cursor(TOPIC, 0, index, b"tenant=a")
    assert cursor_index(TOPIC, 0, cursor, b"tenant=a") == index
    elsewhere = cursor_index(TOPIC, 0, cursor, b"tenant=b")
    assert elsewhere == key_index_key(TOPIC, 0, key_identity(b"tenant=b", b"secret-key"))
    assert in_range(elsewhere, *key_space_range(TOPIC, 0, b"tenant=b"))


def test_any_cursor_a_spaced_reader_forges_stays_in_its_space() -> None:
    low, high = key_space_range(TOPIC, 0, b"tenant=b")
    for forged in ("", "_w==", "_3RlbmFudD1hAGs=", "AAAA", "____"):
        assert in_range(cursor_index(TOPIC, 0, forged, b"tenant=b"), low, high), forged


def test_the_empty_spaces_cursor_pages_every_space_as_before() -> None:
    index = key_index_key(TOPIC, 0, key_identity(b"tenant=a", b"k"))
    cursor = snapshot_cursor(TOPIC, 0, index)
    assert cursor_index(TOPIC, 0, cursor) == index
    assert cursor_index(TOPIC, 0, snapshot_cursor(TOPIC, 0, b"sg:{orders/0}:key:k")) == (
        b"sg:{orders/0}:key:k")
