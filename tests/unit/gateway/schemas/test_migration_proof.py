"""The static proof that a conversion step keeps every valid value valid: what it proves, what it
leaves to the per-value check, and that a proven step delivers what the checked one does."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from gateway.schemas.engine import CompiledSchemas
from gateway.schemas.errors import ConversionFailed
from gateway.schemas.migrate import ValueConverter, ValueStep, parse_pointer
from gateway.schemas.proof import proves
from partitioner.schemas import SchemaRecord, fingerprint_of

# the bench's modules import one another by their own names (and are no package mypy reads)
sys.path.insert(0, str(Path(__file__).resolve().parents[4] / "bench"))
PINNED_BENCH = importlib.import_module("schema_pinned")
V2_SCHEMA, V2_MIGRATIONS = PINNED_BENCH.V2_SCHEMA, PINNED_BENCH.V2_MIGRATIONS
ORDER_SCHEMA, order = PINNED_BENCH.ORDER_SCHEMA, PINNED_BENCH.order

STR, INT = {"type": "string"}, {"type": "integer"}


def obj(required: list[str], **properties: Any) -> dict[str, Any]:
    return {"type": "object", "required": required, "properties": properties,
            "additionalProperties": False}


def proven(written: dict[str, Any], target: dict[str, Any], *chain: list[dict[str, Any]]) -> bool:
    return proves(written, chain, target, parse_pointer)


def record(version: int, schema: dict[str, Any], **migrations: Any) -> SchemaRecord:
    return SchemaRecord("orders", 7, version, schema, "none", fingerprint_of(schema), 0, "admin",
                        migrations)


def rename(source: str, target: str) -> dict[str, Any]:
    return {"op": "rename", "from": source, "to": target}


def test_the_benchmark_rename_is_proven_both_ways() -> None:
    assert proven(ORDER_SCHEMA, V2_SCHEMA, V2_MIGRATIONS["upgrade"])
    assert proven(V2_SCHEMA, ORDER_SCHEMA, V2_MIGRATIONS["downgrade"])


@pytest.mark.parametrize("target", [
    obj(["id", "n"], id=STR, n={"type": "string"}),  # a type narrowed
    obj(["id", "n"], id={"enum": ["a"]}, n=INT),  # an enumeration narrowed
    obj(["id", "n", "extra"], id=STR, n=INT, extra=STR),  # required with no default
], ids=["type", "enum", "required"])
def test_a_target_that_refuses_some_migrated_values_is_not_proven(target: dict[str, Any]) -> None:
    written = obj(["id", "qty"], id=STR, qty=INT)
    assert not proven(written, target, [rename("/qty", "/n")])


def test_a_default_its_member_refuses_is_not_proven() -> None:
    positive = {"type": "integer", "minimum": 1}
    written = obj(["id"], id=STR, qty=positive)
    target = obj(["id", "qty"], id=STR, qty=positive)
    assert not proven(written, target, [{"op": "default", "path": "/qty", "value": 0}])
    assert proven(written, target, [{"op": "default", "path": "/qty", "value": 1}])
    any_integer = obj(["id"], id=STR, qty=INT)
    assert not proven(any_integer, target, [{"op": "default", "path": "/qty", "value": 1}])


def test_a_move_under_a_holder_behind_all_of_or_a_reference_is_not_proven() -> None:
    inner = obj(["a"], a=STR)
    composed = {"type": "object", "properties": {"box": {"allOf": [inner]}}}
    referenced = {"type": "object", "$defs": {"box": inner},
                  "properties": {"box": {"$ref": "#/$defs/box"}}}
    target = {"type": "object", "properties": {"box": obj(["b"], b=STR)}}
    for written in (composed, referenced):
        assert not proven(written, target, [rename("/box/a", "/box/b")])


def test_a_rename_onto_a_member_values_may_already_hold_is_not_proven() -> None:
    open_model = {"type": "object", "required": ["a"], "properties": {"a": STR}}
    assert proven(open_model, {"type": "object", "properties": {"b": STR}}, [rename("/a", "/b")])
    optional = {"type": "object", "properties": {"a": STR}}  # b may hold anything without a
    assert not proven(optional, {"type": "object", "properties": {"b": STR}},
                      [rename("/a", "/b")])


def test_a_chain_dropping_in_the_middle_what_the_target_requires_is_not_proven() -> None:
    first = obj(["id", "qty"], id=STR, qty=INT)
    middle = obj(["id"], id=STR)
    last = obj(["id", "qty"], id=STR, qty=INT)
    assert not proven(first, last, [{"op": "drop", "path": "/qty"}], [])
    assert proven(first, middle, [{"op": "drop", "path": "/qty"}])


def test_a_version_with_event_types_is_never_proven() -> None:
    # its values matched only their type's subschema at the door, not the whole schema
    typed = SchemaRecord("orders", 7, 1, ORDER_SCHEMA, "none", "f1", 0, "admin", {},
                         {"order": "/$defs/order"})
    target = record(2, V2_SCHEMA, **V2_MIGRATIONS)
    chain = (V2_MIGRATIONS["upgrade"],)
    assert not ValueStep(chain, target, CompiledSchemas(4), written=typed).proven
    assert ValueStep(chain, target, CompiledSchemas(4), written=record(1, ORDER_SCHEMA)).proven


def test_a_value_written_before_the_schema_is_never_proven() -> None:
    versions = {1: record(1, obj(["id"], id=STR))}

    class Versions:
        def get(self, topic: str, created_at_ms: int, version: int) -> SchemaRecord | None:
            return versions.get(version)

    step = ValueConverter(Versions()).step("orders", 7, None, 1)
    assert not step.proven
    with pytest.raises(ConversionFailed):
        step(b'{"id": 1}')


def test_an_unproven_step_still_refuses_a_bad_converted_value_at_its_pointer() -> None:
    written = obj(["id", "qty"], id=STR, qty=INT)
    target = record(2, obj(["id", "n"], id=STR, n=STR), upgrade=[rename("/qty", "/n")])
    step = ValueStep(([rename("/qty", "/n")],), target, CompiledSchemas(4),
                     written=record(1, written))
    assert not step.proven
    with pytest.raises(ConversionFailed) as caught:
        step(b'{"id": "a", "qty": 3}')
    assert "at /n" in caught.value.reason
    assert isinstance(step.values([b'{"id": "a", "qty": 3}'])[0], ConversionFailed)


def test_a_proven_step_delivers_the_same_values_as_the_checked_one() -> None:
    target = record(2, V2_SCHEMA, **V2_MIGRATIONS)
    chain = (V2_MIGRATIONS["upgrade"],)
    fast = ValueStep(chain, target, CompiledSchemas(4), written=record(1, ORDER_SCHEMA))
    checked = ValueStep(chain, target, CompiledSchemas(4))
    assert fast.proven
    assert not checked.proven
    values = [orjson.dumps(order(index)) for index in range(300)]
    # the same members and values: a rename on bytes keeps the member where it was
    delivered = [(orjson.loads(one), orjson.loads(other)) for one, other
                 in zip(fast.values(values), checked.values(values), strict=True)
                 if isinstance(one, bytes) and isinstance(other, bytes)]
    assert len(delivered) == len(values)
    assert all(one == other for one, other in delivered)
    assert ([orjson.loads(fast(value)) for value in values[:20]]
            == [orjson.loads(checked(value)) for value in values[:20]])
