"""A version's CloudEvents types: what registration admits, the compatibility of each type's
subschema, the gate checking each message against its ce-type, and the record round trip."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from gateway.errors import Problem
from gateway.publish.cloudevents import Mode, event_pointer
from gateway.publish.validation import PublishBatch, PublishLimits, parse_publish_body
from gateway.schemas.compat import event_type_changes
from gateway.schemas.engine import CompiledSchemas
from gateway.schemas.errors import SchemaRejected
from gateway.schemas.event_types import compiled_for_type
from gateway.schemas.limits import admit_event_types
from gateway.schemas.validation import SchemaGate
from partitioner.schemas import SchemaRecord, fingerprint_of
from partitioner.topics import TopicMetadata

CREATED, PAID = "com.example.order.created", "com.example.order.paid"
ORDERS: dict[str, Any] = {
    "$defs": {
        "money": {"type": "integer", "minimum": 0},
        "created": {"type": "object", "required": ["total"],
                    "properties": {"total": {"$ref": "#/$defs/money"}}},
        "paid": {"type": "object", "required": ["paid_at"],
                 "properties": {"paid_at": {"type": "string"}}},
    },
    "type": "object",
}
TYPES = {CREATED: "/$defs/created", PAID: "/$defs/paid"}
TOPIC = TopicMetadata(name="orders", partitions=1, retention_ms=60_000, max_length=None,
                      created_at_ms=1, owner="admin")
LIMITS = PublishLimits(1024, 256, 16, 4096, 1000, 1 << 20)


def record_of(schema: dict[str, Any], event_types: dict[str, str],
              version: int = 1) -> SchemaRecord:
    return SchemaRecord("orders", 1, version, schema, "backward", fingerprint_of(schema), 0,
                        "admin", {}, event_types)


class OneVersion:
    """A schema source with one version for every topic."""

    def __init__(self, record: SchemaRecord) -> None:
        self.record = record

    def latest(self, topic: str, created_at_ms: int) -> SchemaRecord | None:
        return self.record


def batch_of(*messages: dict[str, Any]) -> PublishBatch:
    return parse_publish_body(orjson.dumps({"messages": list(messages)}), LIMITS, None)


def typed(event_type: str, value: Any) -> dict[str, Any]:
    return {"value": value, "headers": {"ce-type": event_type}}


def refusal(gate: SchemaGate, batch: PublishBatch) -> Problem:
    with pytest.raises(Problem) as caught:
        gate.check(TOPIC, batch)
    return caught.value


# admission

def test_event_types_reaching_subschemas_under_defs_are_admitted() -> None:
    assert admit_event_types(TYPES, ORDERS) == TYPES
    assert admit_event_types({"x": "/$defs/paid", "y": "/$defs/paid"}, ORDERS)


@pytest.mark.parametrize(("event_types", "pointer"), [
    (["not", "an", "object"], "/event_types"),
    ({f"t{i}": "/$defs/paid" for i in range(10_000)}, "/event_types"),
    ({"": "/$defs/paid"}, "/event_types/"),
    ({"x" * 257: "/$defs/paid"}, "/event_types/" + "x" * 257),
    ({"bad\ntype": "/$defs/paid"}, "/event_types/bad\ntype"),
    ({CREATED: "/properties/total"}, f"/event_types/{CREATED}"),
    ({CREATED: "/$defs/nowhere"}, f"/event_types/{CREATED}"),
    ({CREATED: "/$defs/created/required"}, f"/event_types/{CREATED}"),
    ({CREATED: 7}, f"/event_types/{CREATED}"),
    ({CREATED: "$defs/created"}, f"/event_types/{CREATED}"),
    ({"a/b": "/$defs/missing"}, "/event_types/a~1b"),
])
def test_a_malformed_event_type_map_is_refused_at_its_pointer(event_types: Any,
                                                              pointer: str) -> None:
    with pytest.raises(SchemaRejected) as caught:
        admit_event_types(event_types, ORDERS)
    assert caught.value.pointer == pointer


def test_a_subschema_whose_reference_leaves_defs_is_refused() -> None:
    schema = {"$defs": {"odd": {"$ref": "#/properties/total"}},
              "properties": {"total": {"type": "integer"}}}
    with pytest.raises(SchemaRejected) as caught:
        admit_event_types({CREATED: "/$defs/odd"}, schema)
    assert caught.value.pointer == f"/event_types/{CREATED}"


# compatibility per type

def with_defs(**defs: Any) -> dict[str, Any]:
    return {**ORDERS, "$defs": {**ORDERS["$defs"], **defs}}


def names(mode: str, new: tuple[dict[str, Any], dict[str, str]],
          *previous: tuple[dict[str, Any], dict[str, str]]) -> list[tuple[str, str]]:
    return [(c.path, c.change) for c in event_type_changes(mode, new, list(previous))]


def test_a_dropped_type_is_refused_backward_and_an_added_one_forward() -> None:
    only_created = {CREATED: TYPES[CREATED]}
    assert names("backward", (ORDERS, only_created), (ORDERS, TYPES)) == [
        (f"/event_types/{PAID}", "event_type_removed")]
    assert names("backward", (ORDERS, TYPES), (ORDERS, only_created)) == []
    assert names("forward", (ORDERS, TYPES), (ORDERS, only_created)) == [
        (f"/event_types/{PAID}", "event_type_added")]
    assert names("none", (ORDERS, only_created), (ORDERS, TYPES)) == []


def test_a_narrowed_field_of_a_type_is_named_under_that_type() -> None:
    narrowed = with_defs(created={"type": "object", "required": ["total"],
                                  "properties": {"total": {"type": "integer", "minimum": 10}}})
    assert names("backward", (narrowed, TYPES), (ORDERS, TYPES)) == [
        (f"/event_types/{CREATED}/properties/total/minimum", "min_increased")]


def test_a_transitive_mode_compares_each_type_with_every_earlier_version() -> None:
    first = (ORDERS, {PAID: TYPES[PAID]})
    second = (ORDERS, TYPES)
    third = (ORDERS, {CREATED: TYPES[CREATED]})
    assert (f"/event_types/{PAID}", "event_type_removed") in names(
        "backward_transitive", third, first, second)
    assert names("full", (ORDERS, TYPES), first) == [
        (f"/event_types/{CREATED}", "event_type_added")]


# the gate

def test_each_message_is_checked_against_its_type_and_an_untyped_one_against_the_root() -> None:
    gate = SchemaGate(OneVersion(record_of(ORDERS, TYPES, version=3)))
    batch = batch_of(typed(CREATED, {"total": 5}), typed(PAID, {"paid_at": "now"}),
                     {"value": {"anything": True}})
    assert gate.check(TOPIC, batch) == 3
    assert batch.headers is not None
    assert batch.headers[2] == {"sg-schema-version": "3"}


def test_the_first_failing_message_in_batch_order_is_refused_whatever_its_type() -> None:
    gate = SchemaGate(OneVersion(record_of(ORDERS, TYPES)))
    problem = refusal(gate, batch_of(typed(CREATED, {"total": 1}), typed(PAID, {}),
                                     typed(CREATED, {"total": -1})))
    assert (problem.status, problem.slug, problem.pointer) == (422, "schema-mismatch",
                                                               "/messages/1/value")
    assert PAID in problem.detail


def test_a_message_of_another_types_shape_is_refused_at_its_value() -> None:
    gate = SchemaGate(OneVersion(record_of(ORDERS, TYPES)))
    problem = refusal(gate, batch_of(typed(CREATED, {"paid_at": "now"})))
    assert problem.pointer == "/messages/0/value"
    reffed = refusal(gate, batch_of(typed(CREATED, {"total": -3})))
    assert reffed.pointer == "/messages/0/value/total"


def test_an_unknown_type_is_refused_at_its_header_naming_known_types() -> None:
    gate = SchemaGate(OneVersion(record_of(ORDERS, TYPES, version=2)))
    problem = refusal(gate, batch_of(typed(CREATED, {"total": 1}),
                                     typed("com.example.other", {})))
    assert problem.pointer == "/messages/1/headers/ce-type"
    assert "com.example.other" in problem.detail
    assert "version 2" in problem.detail
    assert CREATED in problem.detail


def test_a_version_without_event_types_checks_every_message_against_the_root() -> None:
    gate = SchemaGate(OneVersion(record_of(ORDERS, {})))
    assert gate.check(TOPIC, batch_of(typed("anything", {"x": 1}))) == 1
    assert refusal(gate, batch_of(typed("anything", [1]))).pointer == "/messages/0/value"


def test_a_type_subschema_is_compiled_once_and_kept_beside_the_root() -> None:
    compiled = CompiledSchemas(8)
    record = record_of(ORDERS, TYPES)
    first = compiled_for_type(compiled, record, CREATED)
    assert first is not None
    assert first is compiled_for_type(compiled, record, CREATED)
    assert compiled_for_type(compiled, record, None) is not first
    assert compiled_for_type(compiled, record, "unknown") is None
    assert len(compiled) == 2


# the stored record

def test_a_record_round_trips_its_event_types_and_an_old_one_has_none() -> None:
    record = record_of(ORDERS, TYPES)
    assert SchemaRecord.decode(record.encode()) == record
    old = orjson.loads(record.encode())
    del old["event_types"]
    decoded = SchemaRecord.decode(orjson.dumps(old))
    assert decoded is not None
    assert decoded.event_types == {}


@pytest.mark.parametrize(("mode", "pointer"), [
    (Mode.STRUCTURED, "/type"), (Mode.BATCH, "/2/type"), (Mode.BINARY, "ce-type")])
def test_a_refused_type_header_points_at_the_events_type_attribute(mode: Mode,
                                                                    pointer: str) -> None:
    assert event_pointer("/messages/2/headers/ce-type", mode) == pointer
