"""The plain body scanner (``gateway._speedups.scan_plain_body``) answers only what the
general path would answer with the same ``PublishBatch``, and None otherwise: for any bytes,
whatever it returns equals what ``orjson.loads`` + ``parse_publish_body``'s checks + ``parse_plain``
give, and it answers the common bodies."""

from __future__ import annotations

import json
import tracemalloc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import ModuleType
from typing import Any, cast
from unittest import mock

import orjson
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from gateway import _speedups
from gateway._speedups.plain_py import scan_plain_body as scan_plain_body_python
from gateway.errors import Problem
from gateway.publish import validation
from gateway.publish.validation import PublishBatch, PublishLimits, parse_publish_body

LIMITS = PublishLimits(max_value_bytes=64, max_key_bytes=8, max_headers=4, max_header_bytes=64,
                       max_batch_messages=5, max_batch_bytes=1 << 16)
Columns = tuple[str, list[bytes | None], list[bytes], int]
Scanner = Callable[[bytes, int, int, int, Callable[[bytes], Any],
                    Callable[[Any], bytes]], Columns | None]


# ---- the oracle: the path before the scanner ----

def _no_scan(*args: Any) -> None:
    return None


def _current_path(body: bytes, limits: PublishLimits) -> PublishBatch | None:
    """``parse_publish_body`` without the scanner: its batch when plain (values and keys only), or
    None for any other batch or any error."""
    with mock.patch.object(validation, "scan_plain_body", _no_scan):
        try:
            batch = parse_publish_body(body, limits, None)
        except Exception:
            # a Problem, or dumps' own error (a value too deep for it): the request fails
            return None
    return (batch if batch == PublishBatch(batch.acks, batch.keys, batch.values, batch.value_bytes)
            else None)


def _scan(scan: Scanner, body: bytes, limits: PublishLimits = LIMITS) -> Columns | None:
    return scan(body, limits.max_batch_messages, limits.max_key_bytes, limits.max_value_bytes,
                orjson.loads, orjson.dumps)


def _assert_answers_like_the_current_path(scan: Scanner, body: bytes,
                                          limits: PublishLimits = LIMITS) -> None:
    scanned = _scan(scan, body, limits)
    if scanned is None:
        return
    acks, keys, values, value_bytes = scanned
    assert all(key is None or type(key) is bytes for key in keys)
    assert all(type(value) is bytes for value in values)
    assert type(acks) is str
    assert type(value_bytes) is int
    assert PublishBatch(acks, keys, values, value_bytes) == _current_path(body, limits), body


# ---- bodies: structures rendered with chosen whitespace, escapes, field order and raw tokens ----

class _Missing:
    """A field left out."""


MISSING = _Missing()


@dataclass(frozen=True)
class Raw:
    """JSON text written as it is (numbers and strings the encoder would not write this way)."""

    text: str


@dataclass(frozen=True)
class Obj:
    """An object as its members in order, duplicates allowed."""

    members: tuple[tuple[str | Raw, Any], ...]


@dataclass(frozen=True)
class Style:
    """How a body is written: the text around commas, colons and inside brackets; non-ASCII as
    escapes or not."""

    comma: str
    colon: str
    pad: str
    ascii_only: bool


def _render(value: Any, style: Style) -> str:
    if isinstance(value, Raw):
        return value.text
    if isinstance(value, Obj):
        members = style.comma.join(f"{_render(name, style)}{style.colon}{_render(item, style)}"
                                   for name, item in value.members)
        return f"{{{style.pad}{members}{style.pad}}}"
    if isinstance(value, dict):
        return _render(Obj(tuple(value.items())), style)
    if isinstance(value, list):
        return f"[{style.pad}{style.comma.join(_render(item, style) for item in value)}{style.pad}]"
    return json.dumps(value, ensure_ascii=style.ascii_only)


# Half compact, as orjson writes (the scanner copies such values raw), half with whitespace
# somewhere.
_styles = (st.builds(Style, st.just(","), st.just(":"), st.just(""), st.booleans())
           | st.builds(Style, st.sampled_from([",", ", ", " ,\n  ", ",\t", "\r\n,"]),
                       st.sampled_from([":", ": ", " : ", ":\n"]),
                       st.sampled_from(["", " ", "\n  "]), st.booleans()))
# JSON never holds surrogates
_text = st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=12)
_plain_text = st.text(alphabet=st.characters(exclude_categories=["Cs", "Cc"],
                                             exclude_characters='"\\'), max_size=12)
_raw_numbers = st.sampled_from(["-0", "0", "-1", "1e2", "1E+2", "0.5e-3", "-0.0", "1.0",
                                "999999999999999", "-999999999999999", "1000000000000000",
                                "12345678901234567890123", "1e400", "18446744073709551616",
                                "-9223372036854775809"]).map(Raw)
_raw_strings = st.sampled_from(['"a\\/b"', '"\\u00e9"', '"\\ud83d\\ude00"', '"\\ud800"',
                                '"\\udc00"', '"\\u0000"', '"tab\\there"', '"\\""']).map(Raw)
_floats = st.floats(allow_nan=False, allow_infinity=False)


@st.composite
def _decimals(draw: st.DrawFn) -> Raw:
    """A decimal written ``-?I.F``, sometimes with an exponent: around the edges of the raw float
    rule (significant digits, trailing zeros, leading zeros of the fraction, digits of the integer
    part)."""
    integer = draw(st.just("0") | st.from_regex(r"[1-9][0-9]{0,17}", fullmatch=True))
    fraction = "0" * draw(st.integers(0, 6)) + draw(st.from_regex(r"[0-9]{0,17}", fullmatch=True))
    tail = draw(st.sampled_from(["", "", "", "", "0", "e5", "E-3", "e+0"]))
    return Raw(f"{draw(st.sampled_from(['', '-']))}{integer}.{fraction or '0'}{tail}")


# Floats as orjson writes them (shortest digits: raw up to 15, reencoded past), as Python writes
# them, and decimals.
_float_texts = _floats.map(lambda x: Raw(orjson.dumps(x).decode())) | _floats | _decimals()
_scalars = (st.none() | st.booleans() | st.integers(-(2**70), 2**70) | _float_texts | _float_texts
            | _text | _raw_numbers | _raw_strings)
_json = st.recursive(_scalars,
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner,
                                                                                 max_size=3)
                     | st.lists(st.tuples(st.sampled_from(["a", "b"]), inner), max_size=3).map(
                         lambda members: Obj(tuple(members))), max_leaves=8)
_plain_keys = st.just(MISSING) | st.none() | _plain_text
_odd_keys = (_text | st.integers(-2, 2) | st.booleans()
             | st.sampled_from(["k" * 8, "k" * 9, "é" * 4, "é" * 5])
             | _raw_strings)
_odd_values = st.just(MISSING) | st.sampled_from(["v" * 62, "v" * 63, "é" * 31, "é" * 32, [1] * 40,
                                                  {f"{i}": i for i in range(32)},
                                                  {f"{i}": i for i in range(33)}])
_odd_members = st.sampled_from([("value", 1), ("key", "k"), ("headers", {}), ("Value", 1),
                                (Raw('"k\\u0065y"'), "k"), (Raw('"va\\u006cue"'), 1)])


def _mostly(draw: st.DrawFn, usual: st.SearchStrategy[Any], odd: st.SearchStrategy[Any]) -> Any:
    """``usual`` 9 times in 10 (what shrinks), else ``odd``: most bodies plain, many with one
    defect."""
    return draw(usual if draw(st.integers(0, 9)) < 9 else odd)


@st.composite
def _messages(draw: st.DrawFn) -> Any:
    key, value = _mostly(draw, _plain_keys, _odd_keys), _mostly(draw, _json, _odd_values)
    members: list[tuple[str | Raw, Any]] = [(name, item)
                                            for name, item in (("key", key), ("value", value))
                                            if item is not MISSING]
    members += _mostly(draw, st.just([]), st.lists(_odd_members, min_size=1, max_size=1))
    message = Obj(tuple(draw(st.permutations(members))))
    return _mostly(draw, st.just(message), st.sampled_from([[1], "m", None, {}]))


@st.composite
def _body_docs(draw: st.DrawFn) -> Obj:
    acks = _mostly(draw, st.sampled_from([MISSING, "1", "all", 1]),
                   st.sampled_from(["0", 0, True, None, "2", Raw("1.0"), Raw("-0"), Raw("0.0"),
                                    Raw('"\\u0031"'), "ALL"]))
    messages = _mostly(draw, st.lists(_messages(), min_size=1, max_size=4),
                       st.lists(_messages(), max_size=9) | st.sampled_from([MISSING, {}, "x"]))
    members = [(name, item) for name, item in (("acks", acks), ("messages", messages))
               if item is not MISSING]
    members += _mostly(draw, st.just([]),
                       st.lists(st.sampled_from([("acks", "1"), ("messages", []), ("other", 1)]),
                                min_size=1, max_size=1))
    return Obj(tuple(draw(st.permutations(members))))


@st.composite
def _bodies(draw: st.DrawFn) -> bytes:
    style = draw(_styles)
    lead, trail = (draw(st.sampled_from(["", " ", "\n", "\t\r\n "])),
                   draw(st.sampled_from(["", " ", "\n"])))
    return (lead + _render(draw(_body_docs()), style) + trail).encode()


@st.composite
def _mutated_bodies(draw: st.DrawFn) -> bytes:
    body = bytearray(draw(_bodies()))
    for _ in range(draw(st.integers(1, 3))):
        at = draw(st.integers(0, len(body)))
        action = draw(st.sampled_from(["cut", "replace", "insert", "delete"]))
        byte = draw(st.integers(0, 255) | st.sampled_from(list(b'"\\{}[],: \x00\x80\xc3\xed\xf4')))
        if action == "cut":
            del body[at:]
        elif action == "insert":
            body.insert(at, byte)
        elif at < len(body):
            if action == "replace":
                body[at] = byte
            else:
                del body[at]
    return bytes(body)


@st.composite
def _limits(draw: st.DrawFn) -> PublishLimits:
    """Mostly roomy limits; tight ones (at the edges of the generated sizes) one time in ten
    each."""
    return PublishLimits(max_value_bytes=_mostly(draw, st.just(1 << 10), st.integers(0, 80)),
                         max_key_bytes=_mostly(draw, st.just(64), st.integers(0, 12)),
                         max_headers=4, max_header_bytes=64,
                         max_batch_messages=_mostly(draw, st.just(9), st.integers(0, 5)),
                         max_batch_bytes=1 << 16)


_anything = (_bodies() | _mutated_bodies() | st.binary(max_size=40)
             | st.binary(max_size=40).map(lambda tail: b'{"messages":[{"value":' + tail))


# ---- the contract, over generated bodies ----

@pytest.fixture(scope="module")
def compiled(compiled_part: Callable[[str], ModuleType]) -> ModuleType:
    """The compiled scanner's module itself, also when the extensions are switched off."""
    return compiled_part("gateway._speedups._plain")


@pytest.fixture(scope="module", params=["compiled", "python-reference"])
def scan(request: pytest.FixtureRequest) -> Scanner:
    if request.param == "python-reference":
        return scan_plain_body_python
    return cast(Scanner, request.getfixturevalue("compiled").scan_plain_body)


def test_the_compiled_scanner_is_chosen_unless_switched_off(compiled: ModuleType) -> None:
    chosen = scan_plain_body_python if _speedups.OFF else compiled.scan_plain_body
    assert _speedups.scan_plain_body is chosen


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(body=_anything, limits=_limits())
def test_scanner_answers_any_bytes_like_the_current_path_or_not_at_all(
    scan: Scanner, body: bytes, limits: PublishLimits
) -> None:
    _assert_answers_like_the_current_path(scan, body, limits)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(body=_bodies(), limits=_limits())
def test_compiled_scanner_agrees_with_the_reference_wherever_it_answers(
    compiled: ModuleType,
    body: bytes, limits: PublishLimits
) -> None:
    scanned = _scan(compiled.scan_plain_body, body, limits)
    if scanned is not None:
        assert scanned == _scan(scan_plain_body_python, body, limits)


@st.composite
def _plain_messages(draw: st.DrawFn) -> Obj:
    key, value = draw(_plain_keys), draw(_json)
    members = [(name, item) for name, item in (("key", key), ("value", value))
               if item is not MISSING]
    return Obj(tuple(draw(st.permutations(members))))


@st.composite
def _common_bodies(draw: st.DrawFn) -> bytes:
    """Plain bodies whose keys and field names need no escapes (any values): the ones the scanner
    must answer."""
    acks = draw(st.sampled_from([MISSING, "1", "all", 1]))
    members = [(name, item) for name, item in (("acks", acks),
                                               ("messages", draw(st.lists(_plain_messages(),
                                                                          min_size=1, max_size=5))))
               if item is not MISSING]
    style = draw(_styles)
    return _render(Obj(tuple(draw(st.permutations(members)))),
                   Style(style.comma, style.colon, style.pad, ascii_only=False)).encode()


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(body=_common_bodies())
def test_compiled_scanner_answers_every_plain_body_whose_keys_need_no_escapes(
    compiled: ModuleType, body: bytes
) -> None:
    limits = PublishLimits(1 << 20, 64, 4, 64, 5, 1 << 20)
    current = _current_path(body, limits)
    # e.g. a lone surrogate escape in a value: the general path rejects the body
    assume(current is not None)
    scanned = _scan(compiled.scan_plain_body, body, limits)
    assert scanned is not None, body
    assert PublishBatch(*scanned) == current


def _refusing_loads(span: bytes) -> Any:
    """A ``loads`` for the compiled scanner that fails (so the scanner answers None) if a value is
    reencoded."""
    raise AssertionError(f"reencoded: {span!r}")


# What orjson writes of typical documents: names and strings without escapes, integers of up to 15
# digits, prices.
_compact_names = st.text(alphabet=st.characters(exclude_categories=["Cs", "Cc"],
                                                exclude_characters='"\\'),
                         max_size=8)
_compact_scalars = (st.none() | st.booleans() | st.integers(-(10**15) + 1, 10**15 - 1)
                    | _compact_names | st.floats(-(10**12), 10**12).map(lambda x: round(x, 2)))
_compact_documents = st.recursive(_compact_scalars, lambda inner: st.lists(inner, max_size=4)
                                  | st.dictionaries(_compact_names, inner, max_size=5),
                                  max_leaves=12)


@settings(max_examples=300, deadline=None)
@given(documents=st.lists(_compact_documents, min_size=1, max_size=5))
def test_compiled_scanner_copies_what_orjson_writes_of_typical_documents_raw(
    compiled: ModuleType,
    documents: list[Any],
) -> None:
    values = [orjson.dumps(document) for document in documents]
    body = b'{"messages":[' + b",".join(b'{"value":' + value + b"}" for value in values) + b"]}"
    scanned = compiled.scan_plain_body(body, 5, 8, 1 << 16, _refusing_loads, orjson.dumps)
    assert scanned == ("1", [None] * len(values), values, sum(map(len, values)))


# ---- explicit cases ----

BENCH_BODY = orjson.dumps({"acks": "1",
                           "messages": [{"key": f"k{i}", "value": "x" * 198} for i in range(100)]})
BENCH_LIMITS = PublishLimits(1 << 20, 4096, 64, 8192, 10_000, 1 << 24)


def _body(*messages: str, acks: str | None = None) -> bytes:
    head = "" if acks is None else f'"acks":{acks},'
    return f'{{{head}"messages":[{",".join(messages)}]}}'.encode()


def _expect(scan: Scanner, body: bytes, expected: Columns | None,
            limits: PublishLimits = LIMITS) -> None:
    assert _scan(scan, body, limits) == expected
    _assert_answers_like_the_current_path(scan, body, limits)


@pytest.mark.parametrize("body", [BENCH_BODY, json.dumps(orjson.loads(BENCH_BODY)).encode(),
                                  json.dumps(orjson.loads(BENCH_BODY), indent=2).encode()],
                         ids=["compact", "default-separators", "indented"])
def test_compiled_scanner_answers_the_benchmark_body_as_the_current_path_does(
    compiled: ModuleType, body: bytes
) -> None:
    scanned = _scan(compiled.scan_plain_body, body, BENCH_LIMITS)
    assert scanned is not None
    assert PublishBatch(*scanned) == _current_path(body, BENCH_LIMITS)
    assert scanned[1] == [f"k{i}".encode() for i in range(100)]
    assert scanned[3] == 100 * 200


def test_every_truncation_of_a_plain_body_is_refused_or_equal(scan: Scanner) -> None:
    body = (b' {"acks": "all", "messages": [{"key": "k\xc3\xa9", "value": {"a": [1, 2.5, '
            b'"\\u00e9"]}}, '
            b'{"value": "x\xf0\x9f\x98\x80y", "key": null}, {"value": -12}, {"value": true}, '
            b'{"value":{"a":[1,-0.25,{"b":{}}],"c":"\xc3\xa9"}}]} \n')
    assert _scan(scan, body) is not None
    for end in range(len(body)):
        _assert_answers_like_the_current_path(scan, body[:end])
    assert _scan(scan, body.rstrip()) is not None


@pytest.mark.parametrize("sequence",
                         [b"\x80", b"\xbf", b"\xc0\x80", b"\xc1\xbf", b"\xe0\x80\x80",
                          b"\xed\xa0\x80", b"\xed\xbf\xbf", b"\xf0\x80\x80\x80",
                          b"\xf4\x90\x80\x80", b"\xf5\x80\x80\x80", b"\xff", b"\xc3", b"\xe2\x82",
                          b"\xf0\x9f\x98", b"\xc3\x28"])
@pytest.mark.parametrize("where", ["value", "key", "field", "tail"])
def test_invalid_utf8_anywhere_is_refused(scan: Scanner, sequence: bytes, where: str) -> None:
    body = {"value": b'{"messages":[{"value":"a' + sequence + b'"}]}',
            "key": b'{"messages":[{"key":"a' + sequence + b'","value":1}]}',
            "field": b'{"messages":[{"value":1,"' + sequence + b'":1}]}',
            "tail": b'{"messages":[{"value":"a' + sequence}[where]
    assert _scan(scan, body) is None
    assert _current_path(body, LIMITS) is None


@pytest.mark.parametrize("text", ["é", "€", "😀", "\U0010ffff", "\ufffe", "\u2028", "\x7f",
                                  "\ud7ff", "\ue000"])
def test_valid_utf8_strings_are_copied_as_they_are(scan: Scanner, text: str) -> None:
    raw = text.encode()
    _expect(scan, _body(f'{{"key":"{text}","value":"{text}"}}'),
            ("1", [raw], [b'"' + raw + b'"'], len(raw) + 2))


@pytest.mark.parametrize("byte", [b"\x00", b"\x1f", b"\n", b"\x7f", b'"', b"\\", b"\\n",
                                  b"\xc3\xa9", b"\xc3", b"\x80", b"\xf0\x9f\x98\x80"])
@pytest.mark.parametrize("field", ["key", "value"])
def test_every_byte_kind_is_judged_at_every_offset_of_a_long_string(scan: Scanner, byte: bytes,
                                                                    field: str) -> None:
    for at in range(24):
        text = b"a" * at + byte + b"b" * (23 - at)
        message = b'{"' + field.encode() + b'":"' + text + b'"' + (b',"value":1}' if field == "key"
                                                                   else b"}")
        _assert_answers_like_the_current_path(scan, b'{"messages":[' + message + b"]}",
                                              PublishLimits(64, 64, 4, 64, 5, 1 << 16))


@pytest.mark.parametrize("value", ['"\\ud800"', '"\\udc00"', '"a\\ud83dz"', '"\x01"', '"\t"', "'a'",
                                   "01", "1.", ".5", "+1", "-", "1e", "tru", "nul", "NaN",
                                   "Infinity", "[1,]", '{"a":1,}', "[1 2]", '{"a" 1}', "1e400"])
def test_values_the_general_path_rejects_are_refused(scan: Scanner, value: str) -> None:
    _expect(scan, _body(f'{{"value":{value}}}'), None)


@pytest.mark.parametrize(("value", "stored"),
                         [("-0", b"0"), ("1e2", b"100.0"), ("-0.0", b"-0.0"), ("1.50", b"1.5"),
                          ("999999999999999", b"999999999999999"),
                          ("12345678901234567890", b"12345678901234567890"),
                          ("18446744073709551615", b"18446744073709551615"),
                          ("18446744073709551616", b"1.8446744073709552e+19"),
                          ("-9223372036854775808", b"-9223372036854775808"),
                          ("-9223372036854775809", b"-9.223372036854776e+18"),
                          ("99999999999999999999", b"1e+20"),
                          ('"\\u00e9\\/"', '"é/"'.encode()), ('"a\\"b"', b'"a\\"b"'),
                          ('{ "b" : [ 1 , {} ] , "b" : null }', b'{"b":null}'),
                          ("[ ]", b"[]"), ("true", b"true"), ("null", b"null")])
def test_values_are_stored_as_orjson_writes_them(scan: Scanner, value: str, stored: bytes) -> None:
    scanned = _scan(scan, _body(f'{{"value":{value}}}'),
                    PublishLimits(1 << 10, 8, 4, 64, 5, 1 << 16))
    assert scanned is not None
    assert scanned[2] == [orjson.dumps(orjson.loads(value))] == [stored]


REALISTIC = ('{"order":100001,"customer":"cust-0042","currency":"EUR","total":1234.56,'
             '"items":[{"sku":"sku-1","qty":2}],"note":"a b c","ts":1795418703164}')
ROOMY = PublishLimits(1 << 16, 8, 4, 64, 5, 1 << 16)


def _members(count: int) -> str:
    return "{" + ",".join(f'"m{i}":{i}' for i in range(count)) + "}"


# Written as orjson writes them: the compiled scanner copies them without loads.
RAW_VALUES = [REALISTIC, "{}", "[]", "[[],{}]",
              '{"a":{"b":[1,2.5,"x",null,true,false]},"b":{"a":{}}}',
              '{"é😀\u2028":"\u2028","":"","\x7f":[]}', '{"a":1,"A":2,"a ":3,"ab":4,"b":5}',
              '{"x":[{"x":1},{"x":2}],"y":{"x":{"x":3}}}', _members(32),
              "[0.0,-0.0,1.0,-1.5,0.5,0.00001,-0.00001234,0.000012345678901,"
              "1000000000000000.0,-9999999999999990.0]",
              "[123456789012345.0,-0.123456789012345,12345678.9012345,0.0000123456789012345,100.25]",
              "[" * 254 + "]" * 254, '{"a":' * 254 + "1" + "}" * 254]

# Written otherwise than orjson writes them: reencoded.
REWRITTEN_VALUES = ['{"a": 1}', '{ "a":1}', '{"a":1 }', '{"a" :1}', '{"a":1, "b":2}', '[1, 2]',
                    '[ 1]', '[1 ]', "[\n]", "{\t}", '{"a":[1,{"b":2 }]}', '[[[[ ]]]]',
                    '{"\\u0061":1}', '{"a":"\\u00e9"}', '{"a":1,"a":2}', '{"a":1,"b":2,"a":3}',
                    '{"x":{"a":1,"a":1}}', '[{"a":{"b":[{"c":1,"c":[]}]}}]', '{"a":[-0]}',
                    '{"a":[1e2]}', "1.50", "1.00", "0.00", "-0.00", "0.000001", "0.0000099",
                    "-0.000009", "10000000000000000.0", "9999999999999999.0", "1e5", "1.5e2", "1E2",
                    "1.0e0", "-0.0e0", "1e-5", "9007199254740993.0", "1234567890123456.7",
                    "99999999999999.99", "0.1234567890123456789", "1.7976931348623157e308"]

# Written as orjson writes them but past the raw rule (more than 15 significant digits, more than 32
# members, escapes): reencoded, which gives the same bytes.
PAST_THE_RULE_VALUES = ['{"a\\"b":1}', '{"a":"\\n"}', "1234567890123456.0", "0.1234567890123456",
                        "123456789012345.6", "-100000000000000.5", "0.30000000000000004",
                        _members(33), '{"a":[' + _members(33) + "]}"]


@pytest.mark.parametrize("value", RAW_VALUES)
def test_values_written_as_orjson_writes_them_are_copied_raw(compiled: ModuleType,
                                                              value: str) -> None:
    span = value.encode()
    assert orjson.dumps(orjson.loads(span)) == span
    body = _body(f'{{"value":{value}}}', f'{{"key":"k","value":{value}}}')
    assert compiled.scan_plain_body(body, 5, 8, 1 << 16, _refusing_loads, orjson.dumps) == (
        "1", [None, b"k"], [span] * 2, 2 * len(span))
    _expect(scan_plain_body_python, body, ("1", [None, b"k"], [span] * 2, 2 * len(span)), ROOMY)


def test_a_realistic_body_is_read_without_loads(compiled: ModuleType) -> None:
    values = [orjson.dumps({"order": 100001 + i, "customer": f"cust-{i:04}", "currency": "EUR",
                            "total": round(1234.56 + i * 7.31, 2),
                            "items": [{"sku": f"sku-{i}", "qty": i % 5 + 1}], "note": "a b c",
                            "ts": 1795418703164 + i}) for i in range(100)]
    body = b'{"acks":"all","messages":[' + b",".join(b'{"key":"k","value":' + value + b"}"
                                                     for value in values) + b"]}"
    scanned = compiled.scan_plain_body(body, 100, 8, 1024, _refusing_loads, orjson.dumps)
    assert scanned == ("all", [b"k"] * 100, values, sum(map(len, values)))


@pytest.mark.parametrize("value", REWRITTEN_VALUES + PAST_THE_RULE_VALUES)
def test_values_not_copied_raw_are_stored_as_orjson_writes_them(compiled: ModuleType,
                                                                value: str) -> None:
    span = value.encode()
    assert (orjson.dumps(orjson.loads(span)) == span) == (value in PAST_THE_RULE_VALUES)
    body = _body(f'{{"value":{value}}}')
    # it reencodes
    assert compiled.scan_plain_body(body, 5, 8, 1 << 16, _refusing_loads, orjson.dumps) is None
    for scan in (compiled.scan_plain_body, scan_plain_body_python):
        stored = orjson.dumps(orjson.loads(span))
        _expect(scan, body, ("1", [None], [stored], len(stored)), ROOMY)


@pytest.mark.parametrize("value", [REALISTIC, "[1.5,-0.0]", _members(32)])
def test_a_raw_value_at_the_limit_is_plain_and_one_byte_over_is_refused(
    compiled: ModuleType, value: str
) -> None:
    span = value.encode()
    for scan in (compiled.scan_plain_body, scan_plain_body_python):
        _expect(scan, _body(f'{{"value":{value}}}'), ("1", [None], [span], len(span)),
                PublishLimits(len(span), 8, 4, 64, 5, 1 << 16))
        _expect(scan, _body(f'{{"value":{value}}}'), None,
                PublishLimits(len(span) - 1, 8, 4, 64, 5, 1 << 16))


@pytest.mark.parametrize("message",
                         ['{"key":5,"value":1}', '{"key":true,"value":1}',
                          '{"key":["k"],"value":1}', '{"key":"k"}', "{}",
                          '{"value":1,"headers":{}}', '{"value":1,"partition":0}', '[1]', '"m"',
                          "null", '{"value":1,}', '{,"value":1}'])
def test_messages_that_are_not_plain_are_refused(scan: Scanner, message: str) -> None:
    _expect(scan, _body(message), None)


@pytest.mark.parametrize("body", [_body('{"key":"k\\u00e9","value":1}'), _body('{"va\\u006cue":1}'),
                                  b'{"m\\u0065ssages":[{"value":1}]}'])
def test_escapes_in_keys_and_field_names_are_refused_or_decoded(scan: Scanner, body: bytes) -> None:
    _assert_answers_like_the_current_path(scan, body)
    assert _current_path(body, LIMITS) is not None


@pytest.mark.parametrize(("acks", "expected"),
                         [(None, "1"), ('"1"', "1"), ("1", "1"), ('"all"', "all"),
                          ("0", "0"), ('"0"', "0"), ("true", None), ("false", None),
                          ("null", None), ("1.0", None), ("10", None), ('"ALL"', None),
                          ("[1]", None), ("0.0", None), ("00", None), ("01", None),
                          ('"00"', None), ("2", None)])
def test_acks_zero_one_or_all_is_plain_and_anything_else_is_refused(scan: Scanner, acks: str | None,
                                                              expected: str | None) -> None:
    scanned = _scan(scan, _body('{"value":1}', acks=acks))
    assert (scanned[0] if scanned else None) == expected
    _assert_answers_like_the_current_path(scan, _body('{"value":1}', acks=acks))


@pytest.mark.parametrize("body", [b'{"messages":[]}', b'{"acks":"1"}', b"{}", b'{"messages":{}}',
                                  b"[]", b"", b" ", b'{"messages":[{"value":1}],"other":1}',
                                  b'{"messages":[{"value":1}]} x', b'{"messages":[{"value":1}]}{}',
                                  b'\xef\xbb\xbf{"messages":[{"value":1}]}',
                                  b'{"messages":[{"value":1}]}\x0c', b'{"messages":[{"value":1}]',
                                  b'{"messages":[{"value":1},]}', b'{"messages":[,{"value":1}]}',
                                  b'{"messages":[{"value":1}],}', b'{,"messages":[{"value":1}]}',
                                  b'{"messages":[{"value":1} {"value":2}]}',
                                  b'{"messages" [{"value":1}]}'])
def test_bodies_that_are_not_plain_are_refused(scan: Scanner, body: bytes) -> None:
    _expect(scan, body, None)


@pytest.mark.parametrize("body", [_body('{"value":1,"value":2}'),
                                  _body('{"key":"a","key":"a","value":1}'),
                                  _body('{"value":1}', acks='"\\u0031"'),
                                  _body('{"value":1}', acks='"\\u0030"'),
                                  _body('{"value":1}', acks="-0"),
                                  b'{"messages":[{"value":1}],"messages":[{"value":1}]}',
                                  b'{"acks":"1","acks":"1","messages":[{"value":1}]}'])
def test_compiled_scanner_refuses_duplicate_fields_and_acks_not_written_plainly(
    compiled: ModuleType,
    body: bytes,
) -> None:
    """The general path answers these (the last duplicate wins); the reference, built on loads, does
    too."""
    assert _scan(compiled.scan_plain_body, body) is None
    _assert_answers_like_the_current_path(scan_plain_body_python, body)
    assert _scan(scan_plain_body_python, body) is not None


def test_batch_over_the_message_limit_is_refused(scan: Scanner) -> None:
    at_limit = [f'{{"value":{i}}}' for i in range(LIMITS.max_batch_messages)]
    assert _scan(scan, _body(*at_limit)) == ("1", [None] * 5, [b"0", b"1", b"2", b"3", b"4"], 5)
    _expect(scan, _body(*at_limit, '{"value":5}'), None)


@pytest.mark.parametrize("value", ['"' + "v" * 62 + '"', '"' + "é" * 31 + '"',
                                   "[" + ",".join("1" * 31) + "]", "1" * 15])
def test_value_at_the_limit_is_plain_and_one_byte_over_is_refused(scan: Scanner,
                                                                  value: str) -> None:
    stored = orjson.dumps(orjson.loads(value))
    at_limit = PublishLimits(len(stored), 8, 4, 64, 5, 1 << 16)
    over = PublishLimits(len(stored) - 1, 8, 4, 64, 5, 1 << 16)
    _expect(scan, _body(f'{{"value":{value}}}'), ("1", [None], [stored], len(stored)), at_limit)
    _expect(scan, _body(f'{{"value":{value}}}'), None, over)


@pytest.mark.parametrize("key", ["k" * 8, "é" * 4])
def test_key_at_the_limit_is_plain_and_one_byte_over_is_refused(scan: Scanner, key: str) -> None:
    _expect(scan, _body(f'{{"key":"{key}","value":1}}'), ("1", [key.encode()], [b"1"], 1))
    _expect(scan, _body(f'{{"key":"{key}x","value":1}}'), None)


@pytest.mark.parametrize(("depth", "answered"),
                         [(254, True), (255, False), (2000, False), (1_000_000, False)])
@pytest.mark.parametrize(("opening", "inner", "closing"),
                         [("[", "", "]"), ("[ ", "", "]"), ('{"a":', "1", "}"),
                                                        ('{"a" :', "1", "}")],
                         ids=["array", "spaced-array", "object", "spaced-object"])
def test_values_nested_past_what_dumps_writes_are_refused(scan: Scanner, depth: int, answered: bool,
                                                          opening: str, inner: str,
                                                          closing: str) -> None:
    body = _body('{"value":' + opening * depth + inner + closing * depth + "}")
    limits = PublishLimits(1 << 16, 8, 4, 64, 5, 1 << 16)
    assert (_scan(scan, body, limits) is not None) == answered
    _assert_answers_like_the_current_path(scan, body, limits)


@pytest.mark.parametrize("failing", ["loads", "dumps"])
def test_a_failing_loads_or_dumps_means_no_answer(scan: Scanner, failing: str) -> None:
    def fail(value: Any) -> Any:
        raise ValueError("no")

    loads, dumps = (fail, orjson.dumps) if failing == "loads" else (orjson.loads, fail)
    assert scan(_body('{"value":[1, 2]}'), 5, 8, 64, loads, dumps) is None


def test_an_interrupt_in_loads_propagates_from_the_compiled_scanner(compiled: ModuleType) -> None:
    def interrupted(value: Any) -> Any:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        compiled.scan_plain_body(_body('{"value":1}', '{"value":[1, 2]}'), 5, 8, 64,
                                 interrupted, orjson.dumps)


def test_compiled_scanner_rejects_a_body_that_is_not_bytes(compiled: ModuleType) -> None:
    with pytest.raises(TypeError):
        compiled.scan_plain_body(bytearray(_body('{"value":1}')),
                                 5, 8, 64, orjson.loads, orjson.dumps)


@contextmanager
def _traced() -> Iterator[Callable[[], int]]:
    tracemalloc.start()
    try:
        yield lambda: tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()


def test_compiled_scanner_keeps_nothing_from_refused_or_answered_bodies(
    compiled: ModuleType,
) -> None:
    bodies = [BENCH_BODY[:n] for n in range(0, len(BENCH_BODY), 97)] + [
        _body('{"value":1}', '{"value":[1, 2]}', '{"value":1e400}'),
        _body('{"value":"a"}', '{"key":1,"value":1}'), _body('{"value":1,"key":"k","key":"k"}'),
        _body('{"key":"k","value":[1],"value":2}'),
        _body(f'{{"value":{REALISTIC}}}', '{"value":{"a":1,"a":2}}', '{"value":{"a":[1,2.5]}}'),
        BENCH_BODY]
    for body in bodies:  # warm up: interned and cached objects are made once
        _scan(compiled.scan_plain_body, body, BENCH_LIMITS)
    with _traced() as traced:
        before = traced()
        for _ in range(50):
            for body in bodies:
                _scan(compiled.scan_plain_body, body, BENCH_LIMITS)
        assert traced() - before < 4096


# ---- parse_publish_body takes the scanner's answer ----

def test_publish_body_takes_the_scanners_columns() -> None:
    with mock.patch.object(validation, "parse_plain",
                           side_effect=AssertionError("the scanner answers first")):
        batch = parse_publish_body(_body('{"key":"a","value":{"x":1}}', '{"value":"v"}',
                                         acks='"all"'), LIMITS, None)
    assert batch == PublishBatch("all", [b"a", None], [b'{"x":1}', b'"v"'], 10)


def test_oversized_plain_body_is_still_a_413() -> None:
    body = _body('{"value":1}')
    with pytest.raises(Problem) as caught:
        parse_publish_body(body, PublishLimits(64, 8, 4, 64, 5, len(body) - 1), None)
    assert caught.value.status == 413
