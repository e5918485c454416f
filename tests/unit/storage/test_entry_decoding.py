"""The compiled entry decoder (storage._speedups._entries) against its Python reference, on anything
a reply may hold."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from types import ModuleType
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storage import _speedups, codec
from storage._speedups import ENTRY_LAYOUT
from storage._speedups.entries_py import decode_raw_entries as decode_raw_entries_python
from storage.codec import decode_raw_entries
from storage.models import StoredEntry, ValueFormat


@pytest.fixture(scope="module")
def compiled(compiled_part: Callable[[str], ModuleType]) -> ModuleType:
    return compiled_part("storage._speedups._entries")


def test_compiled_decoder_is_installed_unless_switched_off(compiled: ModuleType) -> None:
    chosen = _speedups.decode_raw_entries_or_none
    assert (chosen is compiled.decode_raw_entries) is not _speedups.OFF

IDS = st.one_of(st.builds(lambda ms, seq: b"%d-%d" % (ms, seq), st.integers(0, 2**64 - 1),
                          st.integers(0, 99)),
                st.sampled_from([b"-1", b"12", b"1-", b"01-2", b"99999999999999999999-0", b" 1-0",
                                 b"1_0-0"]),
                st.binary(max_size=24), st.text(max_size=8), st.none())
NAMES = st.sampled_from([b"v", b"f", b"k", b"h", b"x", b"vv", b"", "v", 1, None, bytearray(b"v"),
                         bytearray(b"h"), b"K", b"Kkey", b"K\x00v", "Kkey", bytearray(b"Kb"),
                         memoryview(b"Km")])
HEADERS = st.one_of(st.builds(lambda d: orjson.dumps(d),
                              st.dictionaries(st.text(max_size=5), st.text(max_size=5))),
                    st.sampled_from([b"", b"[1]", b"not json", b"{}", b"null"]))
VALUES = st.one_of(st.binary(max_size=30), st.sampled_from([b"j", b"b", b"?"]), HEADERS, st.none(),
                   st.integers())
FIELDS = st.one_of(st.lists(st.one_of(NAMES, VALUES), max_size=10), st.none(),
                   st.tuples(NAMES, VALUES))
ITEMS = st.lists(st.one_of(st.lists(st.one_of(IDS, FIELDS), min_size=0, max_size=3),
                           st.tuples(IDS, FIELDS), st.none()), max_size=8)


def _outcome(decode: Any, items: Any) -> Any:
    try:
        return decode(3, items)
    except Exception as exc:  # both must fail alike
        return type(exc)


@settings(max_examples=500)
@given(items=ITEMS)
def test_compiled_decoder_matches_reference_on_any_reply(items: list[Any]) -> None:
    assert _outcome(decode_raw_entries, items) == _outcome(decode_raw_entries_python, items)


WELL_FORMED = st.lists(st.one_of(
    st.builds(lambda ms, seq, fields: [b"%d-%d" % (ms, seq), fields], st.integers(0, 2**63),
              st.integers(0, 9),
              st.lists(st.sampled_from([b"v", b"k", b"f", b"h", b"vv", b"kk", b"x", b"", b"K",
                                        b"Kuser-1", b"K\xff"]).flatmap(
                  lambda name: st.tuples(st.just(name),
                                         HEADERS if name == b"h" else st.sampled_from(
                      [b"j", b"b", b"{}", b"\x00\xff"]))), max_size=5).map(
                  lambda pairs: [part for pair in pairs for part in pair])),
    st.just(None), st.builds(lambda seq: [b"1-%d" % seq, None], st.integers(0, 9))), max_size=20)


@given(items=WELL_FORMED)
def test_compiled_decoder_reads_replies_redis_sends(compiled: ModuleType, items: list[Any]) -> None:
    try:
        expected = decode_raw_entries_python(3, items)
    except orjson.JSONDecodeError:
        with pytest.raises(orjson.JSONDecodeError):
            compiled.decode_raw_entries(3, items, ENTRY_LAYOUT)
        return
    assert compiled.decode_raw_entries(3, items, ENTRY_LAYOUT) == expected


def test_decoded_entries_are_distinct_with_own_headers(compiled: ModuleType) -> None:
    items = [[b"5-0", [b"v", b"{}"]], [b"6-1", [b"v", b"[]", b"f", b"b", b"k", b"key"]]]
    first, second = compiled.decode_raw_entries(0, items, ENTRY_LAYOUT)
    assert first.headers == {}
    assert first.headers is not second.headers
    assert (second.offset, second.value_format, second.key,
            second.timestamp_ms) == ("6-1", ValueFormat.BINARY,
                                     b"key", 6)


def test_a_layout_that_is_not_the_codecs_is_refused(compiled: ModuleType) -> None:
    with pytest.raises(TypeError):
        compiled.decode_raw_entries(0, [], (1, 2, 3))


def test_field_name_only_equal_to_bytes_goes_to_reference(compiled: ModuleType) -> None:
    items = [[b"7-0", [bytearray(b"v"), b"[1]", memoryview(b"k"), b"key"]]]
    assert compiled.decode_raw_entries(0, items, ENTRY_LAYOUT) is None
    (entry,) = decode_raw_entries(0, items)
    assert (entry.value, entry.key) == (b"[1]", b"key")


@pytest.mark.parametrize("raw_id",
                         [b"-1", b"12", b"1-", b"01-2", b"99999999999999999999-0", b" 1-0",
                          b"1_0-0", b"\xff-0", "1-0", b"18446744073709551615-1"])
def test_odd_ids_get_the_references_outcome(raw_id: Any) -> None:
    items = [[b"1-0", [b"v", b"{}"]], [raw_id, [b"v", b"[]", b"k", b"a"]]]
    assert _outcome(decode_raw_entries, items) == _outcome(decode_raw_entries_python, items)


UNIQUE_FIELDS = st.lists(st.sampled_from([b"v", b"k", b"f", b"h", b"K", b"Kuser-1", b"K\xff",
                                          b"x"]), unique=True,
                         max_size=6).flatmap(lambda names: st.tuples(*[
                             st.tuples(st.just(name), HEADERS if name == b"h" else st.sampled_from(
                                 [b"j", b"b", b"{}", b"\x00\xff"])) for name in names]))


@given(pairs=UNIQUE_FIELDS)
def test_a_field_map_reads_as_the_same_entry_as_the_flat_reply(pairs: tuple[tuple[bytes, bytes],
                                                                            ...]) -> None:
    flat = [part for pair in pairs for part in pair]
    try:
        (expected,) = decode_raw_entries_python(3, [[b"5-1", flat]])
    except orjson.JSONDecodeError:
        return
    assert codec.decode_entry(3, b"5-1", dict(pairs)) == expected


def test_layout_gives_entry_fields_in_declaration_order() -> None:
    descriptors = ENTRY_LAYOUT[1]
    assert [d.__name__ for d in descriptors] == [f.name for f in dataclasses.fields(StoredEntry)]
