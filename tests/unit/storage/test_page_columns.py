"""The compiled XRANGE page decoder and ID texts (storage._speedups._pages) against their Python
references, and the record batches built on its buffers against storage.codec's reading of the
same entries."""

from __future__ import annotations

import random
from array import array
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from types import ModuleType
from typing import Any

import orjson
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storage import _speedups
from storage._speedups import id_texts, id_texts_python, page_columns
from storage._speedups.pages_py import page_columns as page_columns_python
from storage.codec import decode_entry
from storage.pages import PageColumns
from streamgate_spark.rows import record_batch

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
LAST_MS = 253_402_300_799_999  # the end of year 9999, the last a datetime holds


@pytest.fixture(scope="module")
def compiled(compiled_part: Callable[[str], ModuleType]) -> ModuleType:
    return compiled_part("storage._speedups._pages")


def test_compiled_page_decoder_is_chosen_unless_switched_off(compiled: ModuleType) -> None:
    assert (page_columns is page_columns_python) is _speedups.OFF
    reply = b"*1\r\n*2\r\n$3\r\n1-0\r\n*2\r\n$1\r\nv\r\n$2\r\n{}\r\n"
    raw = compiled.page_columns(reply)
    assert (PageColumns(*raw[1:]), raw[0]) == page_columns_python(reply)


def bulk(data: bytes) -> bytes:
    return b"$%d\r\n%s\r\n" % (len(data), data)


def xrange_reply(items: list[tuple[bytes, list[bytes]]]) -> bytes:
    out = [b"*%d\r\n" % len(items)]
    for entry_id, fields in items:
        out.append(b"*2\r\n" + bulk(entry_id) + b"*%d\r\n" % len(fields))
        out.extend(bulk(field) for field in fields)
    return b"".join(out)


IDS = st.builds(lambda ms, seq: b"%d-%d" % (ms, seq), st.integers(0, LAST_MS),
                st.integers(0, 2**64 - 1))
NAMES = st.one_of(st.sampled_from([b"v", b"k", b"f", b"h", b"K", b"x", b"vv", b""]),
                  st.binary(max_size=6).map(lambda key: b"K" + key))
HEADERS = st.one_of(st.dictionaries(st.text(max_size=5), st.text(max_size=5)).map(orjson.dumps),
                    st.sampled_from([b"", b"[1]", b"null", b"{}", b'{"a":1}']))
VALUES = st.one_of(st.binary(max_size=40), st.text(max_size=20).map(str.encode), HEADERS,
                   st.sampled_from([b"\xed\xa0\x80", b"\xc0\xaf", b"\xf4\x90\x80\x80",
                                    b"\xe0\x80\x80", b"ok\xff", b"\xf0\x9f\x98\x80" * 3]))
FIELDS = st.lists(st.tuples(NAMES, VALUES), max_size=6).map(
    lambda pairs: [part for pair in pairs for part in pair])
ITEMS = st.lists(st.tuples(IDS, FIELDS), max_size=12)


@settings(max_examples=200)
@given(items=ITEMS)
def test_compiled_columns_are_the_references_for_any_entries(
        items: list[tuple[bytes, list[bytes]]]) -> None:
    reply = xrange_reply(items)
    assert page_columns(reply) == page_columns_python(reply)
    assert page_columns(bytearray(reply)) == page_columns(memoryview(reply))


@settings(max_examples=100)
@given(items=ITEMS.filter(bool))
def test_every_cut_reply_is_incomplete_for_both(items: list[tuple[bytes, list[bytes]]]) -> None:
    reply = xrange_reply(items)
    for end in range(len(reply)):
        assert page_columns(reply[:end]) is None
        assert page_columns_python(reply[:end]) is None


@settings(max_examples=100)
@given(items=ITEMS, before=st.binary(max_size=8), after=st.binary(max_size=8))
def test_a_reply_among_other_bytes_is_read_from_its_offset_to_its_end(
        items: list[tuple[bytes, list[bytes]]], before: bytes, after: bytes) -> None:
    reply = xrange_reply(items)
    data = before + reply + after
    for decode in (page_columns, page_columns_python):
        read = decode(data, len(before))
        assert isinstance(read, tuple)
        assert read == (_outcome(decode, reply), len(before) + len(reply))


def test_sequences_and_formats_are_columns_of_their_own() -> None:
    reply = xrange_reply([(b"5-18446744073709551615", [b"Kk", b"\x00", b"f", b"binary"]),
                          (b"6-0", [b"v", b"{}"])])
    for decode in (page_columns, page_columns_python):
        page = _outcome(decode, reply)
        assert isinstance(page, PageColumns)
        assert list(array("Q", page.sequences)) == [2**64 - 1, 0]
        assert list(array("q", page.timestamps_us)) == [5000, 6000]
        assert (page.format_data, page.format_nulls, page.format_validity) == (b"binary", 1,
                                                                                b"\x01")
        assert page.value_bytes() == len(b"k" + b"\x00" + b"{}")


def _outcome(decode: Any, reply: bytes) -> Any:
    """What a reader of whole replies gets: the columns, an error's text, or ValueError (bytes
    after the reply included)."""
    try:
        read = decode(reply)
    except ValueError:
        return ValueError
    if isinstance(read, tuple):
        columns, end = read
        return columns if end == len(reply) else ValueError
    return read


@settings(max_examples=400)
@given(items=ITEMS.filter(bool), seed=st.integers(0, 2**32))
def test_damaged_reply_is_read_alike_or_refused_when_compiled(
        items: list[tuple[bytes, list[bytes]]], seed: int) -> None:
    damaged, rng = bytearray(xrange_reply(items)), random.Random(seed)
    for _ in range(rng.randint(1, 3)):
        damaged[rng.randrange(len(damaged))] = rng.choice(b"*$:+-_%#\r\n0123456789-xK")
    compiled, reference = (_outcome(page_columns, bytes(damaged)),
                           _outcome(page_columns_python, bytes(damaged)))
    # hiredis skips the two bytes after a bulk string unread and waits past a lone CR for a CRLF;
    # the compiled reader checks both and refuses: stricter, never more lenient
    assert compiled == reference or compiled is ValueError


@pytest.mark.parametrize("reply", [b"*-1\r\n", b"*1\r\n*3\r\n$3\r\n1-0\r\n*0\r\n*0\r\n",
                                   b"*1\r\n*2\r\n$-1\r\n*0\r\n",
                                   b"*1\r\n*2\r\n$3\r\n1-0\r\n*1\r\n$1\r\nv\r\n",
                                   b"*1\r\n*2\r\n$3\r\n1-0\r\n*2\r\n$1\r\nv\r\n$-1\r\n",
                                   b"*1\r\n*2\r\n$3\r\nabc\r\n*0\r\n", b":1\r\n",
                                   b"*0\r\nextra", b"*1\r\n*2\r\n$3\r\n1-0\r\n*0\r\n*0\r\n",
                                   b"*1\r\n*2\r\n$3\r\n1-0\r\n-0\r\n",
                                   b"*1\r\n*2\r\n$3\r\n1-0\r\n:5\r\n",
                                   b"*8\r\n*2\r\n$3\r\n1-0\r\n*2\r\n$1\r\nx\r\n90\r\n",
                                   b"*1\r\n*2\r\n$3\r\n1-0\r\n*2\r\n$1\r\nv\r\n$05\r\nhello\r\n"])
def test_what_is_not_an_xrange_reply_is_refused_by_both(reply: bytes) -> None:
    assert _outcome(page_columns, reply) is ValueError
    assert _outcome(page_columns_python, reply) is ValueError


def test_an_error_reply_is_its_text() -> None:
    for decode in (page_columns, page_columns_python):
        assert decode(b"-MOVED 3999 127.0.0.1:7001\r\n") == "MOVED 3999 127.0.0.1:7001"
        assert decode(b"-MOVED 3999") is None


def test_an_empty_reply_is_an_empty_page() -> None:
    page = _outcome(page_columns, b"*0\r\n")
    assert isinstance(page, PageColumns)
    assert page.rows == 0
    assert record_batch("t", 0, page).num_rows == 0


@settings(max_examples=200)
@given(items=ITEMS)
def test_rows_hold_what_storage_reads_from_the_same_entries(
        items: list[tuple[bytes, list[bytes]]]) -> None:
    page = _outcome(page_columns, xrange_reply(items))
    assert isinstance(page, PageColumns)
    chosen = [_last(list(zip(fields[0::2], fields[1::2], strict=True))) for _, fields in items]
    try:
        headers = [_headers(fields.get(b"h")) for fields in chosen]
    except orjson.JSONDecodeError:  # as storage does, a header field that is not JSON fails
        with pytest.raises(orjson.JSONDecodeError):
            record_batch("orders", 5, page)
        return
    rows = record_batch("orders", 5, page).to_pylist()
    assert len(rows) == len(items)
    for row, (entry_id, _), fields, header in zip(rows, items, chosen, headers, strict=True):
        stored = decode_entry(5, entry_id, fields)
        assert (row["topic"], row["partition"], row["offset"]) == ("orders", 5, stored.offset)
        assert (row["key"], row["value"]) == (stored.key, stored.value)
        assert row["value_str"] == _text(stored.value)
        assert (row["timestamp"] - EPOCH) // timedelta(milliseconds=1) == stored.timestamp_ms
        assert row["headers"] == header


def _last(pairs: list[tuple[bytes, bytes]]) -> dict[bytes, bytes]:
    # In an entry's order the last field of a name wins; a dict keeps the first one's position.
    chosen: dict[bytes, bytes] = {}
    for name, data in pairs:
        chosen.pop(name, None)
        chosen[name] = data
    return chosen


def _text(value: bytes) -> str | None:
    try:
        return value.decode()
    except UnicodeDecodeError:
        return None


def _headers(raw: bytes | None) -> list[tuple[str, str]] | None:
    doc = orjson.loads(raw) if raw else None
    if not isinstance(doc, dict):
        return None
    return [(str(name), str(value)) for name, value in doc.items()]


UINT64 = st.integers(min_value=0, max_value=2**64 - 1)


@settings(max_examples=200, deadline=None)
@given(pairs=st.lists(st.tuples(UINT64, UINT64), max_size=50), cut=st.integers(0, 5),
       shift=st.integers(0, 5))
def test_id_texts_are_the_references_for_any_numbers_and_slices(
        compiled: ModuleType, pairs: list[tuple[int, int]], cut: int, shift: int) -> None:
    ms = pa.array([a for a, _ in pairs] + [7] * shift, pa.uint64())
    seq = pa.array([0] * shift + [b for _, b in pairs], pa.uint64())
    # slices of the two columns starting at different indices into their buffers
    ms, seq = ms.slice(0, len(pairs))[cut:], seq.slice(shift, len(pairs))[cut:]
    assert id_texts(ms, seq).to_pylist() == [f"{a}-{b}" for a, b in pairs[cut:]]
    assert id_texts(ms, seq).equals(id_texts_python(ms, seq))


def test_id_texts_refuse_a_missing_part() -> None:
    with pytest.raises(ValueError, match="both its parts"):
        id_texts(pa.array([1, 2], pa.uint64()), pa.array([1], pa.uint64()))
    with pytest.raises(ValueError, match="both its parts"):
        id_texts(pa.array([1, None], pa.uint64()), pa.array([1, 2], pa.uint64()))
