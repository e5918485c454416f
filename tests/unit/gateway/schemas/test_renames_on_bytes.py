"""A proven chain of top-level renames rewrites a value's keys on its bytes: the result parses to
what the parsed way makes, and whatever could differ is declined (None) and converted that way."""

from __future__ import annotations

import functools
import gc
import json
import sys
import tracemalloc
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gateway._speedups
from gateway.schemas import migrate
from gateway.schemas.errors import ConversionFailed
from gateway.schemas.migrate import ValueConverter, compile_operations
from gateway.schemas.renames import Renames, top_level_renames
from partitioner.schemas import SchemaRecord


def rename(source: str, target: str, op: str = "rename") -> dict[str, str]:
    return {"op": op, "from": f"/{source}", "to": f"/{target}"}


CHAINS: dict[str, tuple[list[dict[str, str]], ...]] = {
    "one rename": ([rename("note", "remark")],),
    "a rename then its target renamed": ([rename("note", "remark")], [rename("remark", "n")]),
    "a rename onto a name another frees": ([rename("note", "remark")],
                                           [rename("no", "note", "move")]),
    "a rename onto itself": ([rename("note", "note")],),
}
NAMES = ["note", "remark", "n", "no", "notes", "nöte", "a"]


@pytest.fixture(scope="module")
def compiled(compiled_part: Callable[[str], ModuleType]) -> ModuleType:
    module = compiled_part("gateway._speedups._rename")
    if gateway._speedups.renamed_or_none is not module.renamed:
        pytest.skip("the compiled parts are switched off")
    return module


def renames_of(chain: tuple[Sequence[Any], ...]) -> Renames:
    renames = top_level_renames(chain, migrate._tokens)
    assert renames is not None
    return renames


def parsed_way(value: bytes, chain: tuple[Sequence[Any], ...]) -> Any:
    """What parsing and migrating make of the value; the exception when they fail."""
    try:
        instance = orjson.loads(value)
        for operations in chain:
            compile_operations(operations)(instance)
    except (orjson.JSONDecodeError, ConversionFailed) as exc:
        return exc
    return instance


def agrees(renamed: Callable[..., bytes | None], value: bytes,
           chain: tuple[Sequence[Any], ...]) -> bytes | None:
    """The bytes way's result, checked against the parsed way's (declining always agrees)."""
    result = renamed(value, renames_of(chain))
    if result is not None:
        expected = parsed_way(value, chain)
        assert not isinstance(expected, Exception), (value, result, expected)
        assert orjson.loads(result) == expected
    return result


# JSON written by hand, in every form the grammar allows: spacing, escapes, numbers
numbers = st.from_regex(r"-?(0|[1-9][0-9]{0,22})(\.[0-9]{1,12})?([eE][+-]?[0-9]{1,3})?",
                        fullmatch=True)
texts = st.text(st.characters(codec="utf-8"), max_size=12)
# keys mostly written without escapes (one with an escape is declined whole)
plain_keys = st.text(st.characters(codec="utf-8", categories=["L", "N", "Zs"]), max_size=8)
keys = st.one_of(st.sampled_from(NAMES), plain_keys, plain_keys, texts)
scalars = st.one_of(st.none(), st.booleans(), texts, numbers.map(lambda token: Raw(token)))


class Raw(str):
    """A number token written as it is."""


def containers(children: Any) -> Any:
    return st.one_of(st.lists(children, max_size=4),
                     st.lists(st.tuples(keys, children), max_size=4).map(Members))


class Members(list[tuple[str, Any]]):
    """An object's members in order (a name may repeat)."""


trees = st.recursive(scalars, containers, max_leaves=20)
spaces = st.sampled_from(["", " ", "\n  ", "\t", "\r\n"])


@st.composite
def documents(draw: st.DrawFn) -> bytes:
    space = draw(spaces)
    ascii_only = draw(st.integers(0, 3)) == 0

    def write(node: Any) -> str:
        if isinstance(node, Raw):
            return str(node)
        if isinstance(node, Members):
            return "{" + space + f",{space}".join(
                f"{json.dumps(key, ensure_ascii=ascii_only)}{space}:{space}{write(value)}"
                for key, value in node) + space + "}"
        if isinstance(node, list):
            return "[" + f",{space}".join(map(write, node)) + "]"
        return json.dumps(node, ensure_ascii=ascii_only)

    members = draw(st.lists(st.tuples(keys, trees), max_size=8))
    if draw(st.booleans()):  # a renamed name at a chosen position
        members.insert(draw(st.integers(0, len(members))), (draw(st.sampled_from(NAMES)),
                                                           draw(trees)))
    top: Any = Members(members) if draw(st.integers(0, 9)) else draw(trees)
    return (space + write(top) + space).encode("utf-8", "surrogatepass")


@pytest.mark.parametrize("chain", CHAINS.values(), ids=CHAINS.keys())
@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=documents())
def test_renamed_bytes_parse_to_what_the_parsed_way_makes_or_are_declined(
        compiled: ModuleType, chain: tuple[Sequence[Any], ...], value: bytes) -> None:
    agrees(compiled.renamed, value, chain)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=documents(), cut=st.integers(0, 400), byte=st.integers(0, 255))
def test_damaged_bytes_are_declined_or_parse_to_what_the_parsed_way_makes(
        compiled: ModuleType, value: bytes, cut: int, byte: int) -> None:
    chain = CHAINS["one rename"]
    agrees(compiled.renamed, value[:cut], chain)
    if value:
        at = cut % len(value)
        agrees(compiled.renamed, value[:at] + bytes([byte]) + value[at + 1:], chain)


@pytest.mark.parametrize(("value", "expected"), [
    (b'{"id":1,"note":"x","tags":[{"note":2}]}', {"id": 1, "remark": "x", "tags": [{"note": 2}]}),
    (b' {\n "note" : {"remark": "\\"}"}, "notes": 1.5e-3 } ', {"remark": {"remark": '"}'},
                                                              "notes": 1.5e-3}),
    (b'{"n\xc3\xb6te":"\xe2\x82\xac","note":[1,[2,{"a":null}],true,false,-0]}',
     {"nöte": "€", "remark": [1, [2, {"a": None}], True, False, 0]}),
])
def test_a_renamed_member_keeps_its_place_and_value(compiled: ModuleType, value: bytes,
                                                     expected: dict[str, Any]) -> None:
    result = agrees(compiled.renamed, value, CHAINS["one rename"])
    assert result is not None
    assert orjson.loads(result) == expected
    assert result == value.replace(b'"note"', b'"remark"', 1)


def test_a_value_without_the_renamed_member_comes_back_as_it_is(compiled: ModuleType) -> None:
    value = b'{"remark":1,"notes":2,"no":{"note":3}}'
    assert compiled.renamed(value, renames_of(CHAINS["one rename"])) is value


def test_chained_renames_end_at_the_last_name(compiled: ModuleType) -> None:
    chain = CHAINS["a rename then its target renamed"]
    assert agrees(compiled.renamed, b'{"note":1,"x":2}', chain) == b'{"n":1,"x":2}'
    chain = CHAINS["a rename onto a name another frees"]
    result = agrees(compiled.renamed, b'{"no":1,"note":2}', chain)
    assert result == b'{"note":1,"remark":2}'


@pytest.mark.parametrize("value", [
    b'[{"note":1}]', b'"note"', b"1", b"null", b"",
    b'{"\\u006eote":1}', b'{"no\\te":1}',
    b'{"note":1,"remark":2}', b'{"remark":2,"note":1}',
    b'{"note":1,"note":2}', b'{"a":1,"a":2,"note":3}',
    b'{"note":1', b'{"note":1,}', b'{"note":01}', b'{"note":1e999}', b'{"note":"\xff"}',
    b'{"note":"\\ud800"}', b'{"note":1} x', b'{note:1}', b'{"note":tru}', b"\xef\xbb\xbf{}",
    b'{"note":' + b"[" * 300 + b"]" * 300 + b"}",
    b'{"note":"' + b"x" * (1 << 20) + b'"}',
])
def test_what_the_bytes_way_is_not_sure_of_is_declined(compiled: ModuleType, value: bytes) -> None:
    assert compiled.renamed(value, renames_of(CHAINS["one rename"])) is None


def test_a_rename_onto_a_held_name_is_declined_where_the_parsed_way_fails(
        compiled: ModuleType) -> None:
    chain = CHAINS["a rename then its target renamed"]
    for value in (b'{"note":1,"remark":2}', b'{"remark":1,"n":2}', b'{"note":1,"n":2}'):
        assert isinstance(parsed_way(value, chain), ConversionFailed)
        assert compiled.renamed(value, renames_of(chain)) is None


def test_only_top_level_rename_chains_go_on_bytes() -> None:
    renames = functools.partial(top_level_renames, tokens=migrate._tokens)
    assert renames(([rename("a", "b")], [{"op": "drop", "path": "/c"}])) is None
    assert renames(([{"op": "rename", "from": "/a/b", "to": "/c"}],)) is None
    assert renames(([{"op": "rename", "from": "", "to": "/c"}],)) is None
    assert renames(([],)) is None
    assert renames(([rename(f"k{i}", f"k{i + 1}") for i in range(0, 20, 2)],)) is None
    assert renames(([{"op": "rename", "from": "/a~1b", "to": "/c~0"}],)) == (
        (b"a/b", b"c~"), (b'"c~"', None), b"\x00\x00\x00\x01")


# closed objects: the proof holds only when no other member can take the renamed one's name
V1 = {"type": "object", "properties": {"qty": {"type": "integer"}, "id": {"type": "integer"}},
      "additionalProperties": False}
V2 = {"type": "object", "properties": {"quantity": {"type": "integer"}, "id": {"type": "integer"}},
      "additionalProperties": False}


class Versions:
    records = {1: SchemaRecord("t", 1, 1, V1, "none", "f1", 0, "test"),
               2: SchemaRecord("t", 1, 2, V2, "none", "f2", 0, "test",
                               {"upgrade": [rename("qty", "quantity")]})}

    def get(self, topic: str, created_at_ms: int, version: int) -> SchemaRecord | None:
        return self.records.get(version)


PAGE = [b'{"qty":1,"id":1}', b'{"id":2,"qty":2,"quantity":3}', b"not json", b'{"id":4}',
        b'{"\\u0071ty":5}', b'[1]', b'{"qty":6}']


def outcomes(converted: Sequence[bytes | ConversionFailed]) -> list[Any]:
    return [str(each) if isinstance(each, ConversionFailed) else orjson.loads(each)
            for each in converted]


def test_a_proven_rename_step_converts_a_page_as_the_parsed_way_does_in_order(
        monkeypatch: pytest.MonkeyPatch) -> None:
    step = ValueConverter(Versions()).step("t", 1, "1", 2)
    assert step.proven
    on_bytes = step.values(PAGE)
    one_by_one = [converted for value in PAGE for converted in step.values([value])]
    calls: list[bytes | ConversionFailed] = []
    for value in PAGE:
        try:
            calls.append(step(value))
        except ConversionFailed as exc:
            calls.append(exc)
    monkeypatch.setattr(migrate, "renamed_or_none", lambda *_: None)
    parsed = step.values(PAGE)
    assert outcomes(on_bytes) == outcomes(one_by_one) == outcomes(calls) == outcomes(parsed)
    assert outcomes(parsed)[0] == {"quantity": 1, "id": 1}
    assert isinstance(parsed[1], ConversionFailed)
    assert isinstance(parsed[2], ConversionFailed)


def test_a_page_the_bytes_way_takes_whole_is_converted_in_order(compiled: ModuleType) -> None:
    step = ValueConverter(Versions()).step("t", 1, "1", 2)
    page = [orjson.dumps({"id": i, "qty": i}) for i in range(50)]
    assert step.values(page) == [orjson.dumps({"id": i, "quantity": i}) for i in range(50)]


def test_renaming_many_values_keeps_memory_and_references_flat(compiled: ModuleType) -> None:
    renames = renames_of(CHAINS["one rename"])
    values = [b'{"id":1,"note":"x"}', b'{"note":1,"remark":2}', b'{"id":2}', b"[1]",
              b'{"a":"' + b"y" * 200 + b'","note":[1,{"b":2}]}']
    # None's count moves with everything else the interpreter does: only the objects of the call
    objects = [each for each in (*values, renames, *renames[0], *renames[1]) if each is not None]

    def run(rounds: int) -> None:
        for _ in range(rounds):
            for value in values:
                compiled.renamed(value, renames)

    run(1000)
    gc.collect()
    held = list(map(sys.getrefcount, objects))
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        run(40_000)
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown < 64 * 1024
    assert list(map(sys.getrefcount, objects)) == held
