"""Entries built in C from an archived item table's column buffers
(storage._speedups._entries.entries_of_columns) against their Python reference, on any columns."""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

import orjson
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storage import _speedups
from storage._speedups import ENTRY_LAYOUT, entries_of_columns
from storage._speedups import entries_py as reference
from storage.models import ValueFormat

HEADERS = st.one_of(st.none(), st.builds(orjson.dumps, st.dictionaries(st.text(max_size=4),
                                                                       st.text(max_size=4))),
                    st.sampled_from([b"", b"{}", b"[1]", b"null"]))
# (ms, seq, key or None for a keyless row, value, format's text or None for JSON, raw headers)
ROWS = st.lists(st.tuples(st.integers(0, 2**63), st.integers(0, 99), st.none() | st.binary(
    max_size=6), st.binary(max_size=12), st.none() | st.sampled_from(["j", "b", "x", ""]),
    HEADERS), max_size=12)
ODD_IDS = st.sampled_from([None, b"-1", b"12", b"1-", b"99999999999999999999-0", b"\xff-0",
                           b"1-\xff", b"7-0"])
ODD_NAMES = st.sampled_from([None, b"", b"x", b"vv", b"f", b"h", b"k", b"v", b"Kk"])
ODD_HEADERS = st.one_of(HEADERS, st.just(b"not json"))
ODD_ROWS = st.lists(st.tuples(ODD_IDS, ODD_NAMES, st.none() | st.binary(max_size=4),
                              st.none() | st.sampled_from(["j", "b"]), ODD_HEADERS), max_size=8)


@pytest.fixture(scope="module")
def compiled(compiled_part: Callable[[str], ModuleType]) -> ModuleType:
    return compiled_part("storage._speedups._entries")


def _columns(ids: list[Any], names: list[Any], values: list[Any], formats: list[Any],
             headers: list[Any]) -> list[pa.Array]:
    return [pa.array(ids, pa.binary()), pa.array(names, pa.binary()),
            pa.array(values, pa.binary()),
            pa.array(formats, pa.string()).dictionary_encode(), pa.array(headers, pa.binary())]


def _item_columns(rows: list[tuple[Any, ...]]) -> list[pa.Array]:
    """Columns as the segment reader's item table holds them: IDs, ``K`` + key or ``v``..."""
    return _columns([b"%d-%d" % (ms, seq) for ms, seq, *_ in rows],
                    [b"v" if key is None else b"K" + key for _, _, key, *_ in rows],
                    [row[3] for row in rows], [row[4] for row in rows], [row[5] for row in rows])


def _sliced(columns: list[pa.Array], start: int, stop: int) -> list[pa.Array]:
    return [column.slice(start, max(0, stop - start)) for column in columns]


def _outcome(build: Callable[..., Any], columns: list[pa.Array]) -> Any:
    try:
        return build(3, *columns)
    except Exception as exc:  # both must fail alike
        return type(exc)


def _compiled_call(compiled: ModuleType, columns: list[pa.Array]) -> Any:
    buffers = _speedups._column_buffers(tuple(columns))
    assert buffers is not None
    return compiled.entries_of_columns(3, len(columns[0]), *buffers, ENTRY_LAYOUT)


def test_compiled_builder_is_installed_unless_switched_off(compiled: ModuleType) -> None:
    assert (entries_of_columns is not reference.entries_of_columns) is not _speedups.OFF


@settings(max_examples=300)
@given(rows=ROWS, start=st.integers(0, 12), stop=st.integers(0, 12))
def test_compiled_builder_builds_the_references_entries_from_sliced_columns(
        compiled: ModuleType, rows: list[tuple[Any, ...]], start: int, stop: int) -> None:
    columns = _sliced(_item_columns(rows), start, stop)
    assert _outcome(_compiled_builder(compiled), columns) == _outcome(
        reference.entries_of_columns, columns)


def _compiled_builder(compiled: ModuleType) -> Callable[..., Any]:
    """The compiled builder alone, called as the reference is (it must not decline here)."""
    def build(partition: int, *columns: pa.Array) -> Any:
        entries = _compiled_call(compiled, list(columns))
        assert entries is not None
        return entries
    return build


@settings(max_examples=300)
@given(rows=ODD_ROWS, start=st.integers(0, 8), stop=st.integers(0, 8))
def test_chosen_builder_matches_reference_on_odd_columns(rows: list[tuple[Any, ...]], start: int,
                                                         stop: int) -> None:
    columns = _sliced(_columns(*(list(column) for column in zip(*rows, strict=True)))
                      if rows else _columns([], [], [], [], []), start, stop)
    assert _outcome(entries_of_columns, columns) == _outcome(reference.entries_of_columns,
                                                             columns)


@pytest.mark.parametrize(("raw_id", "name", "value"), [
    (None, b"v", b"{}"), (b"1-0", None, b"{}"), (b"1-0", b"v", None), (b"1-0", b"x", b"{}"),
    (b"99999999999999999999-0", b"v", b"{}"), (b"-1", b"Kk", b"{}")])
def test_rows_the_compiled_builder_is_unsure_of_go_to_the_reference(
        compiled: ModuleType, raw_id: Any, name: Any, value: Any) -> None:
    columns = _columns([b"5-0", raw_id], [b"v", name], [b"[]", value], [None, None], [None, None])
    assert _compiled_call(compiled, columns) is None
    assert _outcome(entries_of_columns, columns) == _outcome(reference.entries_of_columns,
                                                             columns)


def test_keyed_rows_with_formats_and_headers_fill_every_slot(compiled: ModuleType) -> None:
    columns = _columns([b"6-1", b"7-0"], [b"Kuser-1", b"v"], [b"\x00", b"{}"], ["b", None],
                       [b'{"a": "b"}', None])
    first, second = _compiled_call(compiled, columns)
    assert (first.partition, first.offset, first.value, first.value_format, first.key,
            first.headers, first.timestamp_ms) == (3, "6-1", b"\x00", ValueFormat.BINARY,
                                                   b"user-1", {"a": "b"}, 6)
    assert (second.key, second.value_format, second.headers) == (None, ValueFormat.JSON, {})
    assert second.headers is not _compiled_call(compiled, columns)[1].headers


def test_a_null_dictionary_entry_reads_as_json(compiled: ModuleType) -> None:
    formats = pa.DictionaryArray.from_arrays(pa.array([0, 1, None], pa.int32()),
                                             pa.array(["b", None], pa.string()))
    columns = [*_columns([b"1-0", b"2-0", b"3-0"], [b"v"] * 3, [b"x"] * 3, [None] * 3,
                         [None] * 3)[:3], formats, pa.array([None] * 3, pa.binary())]
    assert [e.value_format for e in _compiled_call(compiled, columns)] == [
        ValueFormat.BINARY, ValueFormat.JSON, ValueFormat.JSON]
    assert entries_of_columns(3, *columns) == reference.entries_of_columns(3, *columns)


def test_columns_of_other_types_or_chunked_go_to_the_reference() -> None:
    columns = _columns([b"1-0"], [b"Kk"], [b"x"], ["b"], [b"{}"])
    wide = [pa.array([b"1-0"], pa.large_binary()), *columns[1:]]
    chunked = [pa.chunked_array([column]) for column in columns]
    expected = reference.entries_of_columns(3, *columns)
    assert entries_of_columns(3, *wide) == entries_of_columns(3, *chunked) == expected


def test_buffers_that_do_not_hold_their_rows_are_refused(compiled: ModuleType) -> None:
    offsets = pa.py_buffer(b"\x00\x00\x00\x00\x09\x00\x00\x00")  # one row of 9 bytes in 3
    bad = (None, offsets, pa.py_buffer(b"1-0"), 0)
    good = (None, offsets, pa.py_buffer(b"123456789"), 0)
    with pytest.raises(ValueError, match="outside"):
        compiled.entries_of_columns(0, 1, bad, good, good, None, None, ENTRY_LAYOUT)
    with pytest.raises(ValueError, match="shorter"):
        compiled.entries_of_columns(0, 2, good, good, good, None, None, ENTRY_LAYOUT)
    with pytest.raises(TypeError):
        compiled.entries_of_columns(0, 1, good, good, good, None, None, (1, 2))


def test_a_row_failing_twice_raises_the_references_first_error(compiled: ModuleType) -> None:
    columns = _columns([b"1-\xff"], [b"v"], [b"{}"], [None], [b"not json"])
    with pytest.raises(UnicodeDecodeError):
        _compiled_call(compiled, columns)
    with pytest.raises(UnicodeDecodeError):
        reference.entries_of_columns(3, *columns)
