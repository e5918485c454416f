"""Conversion between schema versions by declared migrations: each operation, chains up and down,
the checks against the target schema, the value converter's headers, and named failures."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from gateway.publish.headers import SCHEMA_VERSION_HEADER
from gateway.schemas.errors import ConversionFailed, SchemaRejected
from gateway.schemas.limits import admit_migrations
from gateway.schemas.migrate import ValueConverter, apply_operations, compile_operations, convert
from partitioner.schemas import SchemaRecord, fingerprint_of

TOPIC, CREATED = "orders", 7


def obj(required: list[str], **properties: Any) -> dict[str, Any]:
    return {"type": "object", "required": required, "properties": properties,
            "additionalProperties": False}


STR, INT = {"type": "string"}, {"type": "integer"}
# v1 {id, qty}; v2 renames qty to quantity and adds currency; v3 moves currency under price
V1 = obj(["id", "qty"], id=STR, qty=INT)
V2 = obj(["id", "quantity", "currency"], id=STR, quantity=INT, currency=STR)
V3 = obj(["id", "quantity", "price"], id=STR, quantity=INT,
         price=obj(["currency"], currency=STR))
UP2 = [{"op": "rename", "from": "/qty", "to": "/quantity"},
       {"op": "default", "path": "/currency", "value": "EUR"}]
DOWN2 = [{"op": "rename", "from": "/quantity", "to": "/qty"}, {"op": "drop", "path": "/currency"}]
UP3 = [{"op": "move", "from": "/currency", "to": "/price/currency"}]
DOWN3 = [{"op": "move", "from": "/price/currency", "to": "/currency"},
         {"op": "drop", "path": "/price"}]


def record(version: int, schema: dict[str, Any], **migrations: Any) -> SchemaRecord:
    return SchemaRecord(TOPIC, CREATED, version, schema, "none", fingerprint_of(schema), 0,
                        "admin", migrations)


RECORDS = {1: record(1, V1), 2: record(2, V2, upgrade=UP2, downgrade=DOWN2),
           3: record(3, V3, upgrade=UP3, downgrade=DOWN3)}


class Versions:
    def __init__(self, records: dict[int, SchemaRecord]) -> None:
        self.records = records

    def get(self, topic: str, created_at_ms: int, version: int) -> SchemaRecord | None:
        return self.records.get(version) if (topic, created_at_ms) == (TOPIC, CREATED) else None


def failure(*args: Any) -> str:
    with pytest.raises(ConversionFailed) as caught:
        convert(*args)
    return caught.value.reason


def test_each_operation_changes_only_what_it_names() -> None:
    value = {"a": 1, "x": {"y": 2}, "d": 3}
    assert apply_operations(value, [
        {"op": "rename", "from": "/a", "to": "/b"},
        {"op": "move", "from": "/x/y", "to": "/z"},
        {"op": "default", "path": "/c", "value": [1]},
        {"op": "default", "path": "/b", "value": "kept"},
        {"op": "drop", "path": "/d"},
        {"op": "drop", "path": "/absent"}]) == {"b": 1, "x": {}, "z": 2, "c": [1]}


def test_a_default_never_creates_the_object_it_fills() -> None:
    assert apply_operations({}, [{"op": "default", "path": "/p/c", "value": 1}]) == {}


def test_a_move_onto_a_member_that_exists_is_a_failure() -> None:
    with pytest.raises(ConversionFailed, match="already holds"):
        apply_operations({"a": 1, "b": 2}, [{"op": "rename", "from": "/a", "to": "/b"}])


def test_a_chain_upgrades_through_every_version() -> None:
    original = {"id": "o1", "qty": 2}
    assert convert(original, 1, 3, RECORDS) == {"id": "o1", "quantity": 2,
                                                "price": {"currency": "EUR"}}
    assert original == {"id": "o1", "qty": 2}


def test_a_chain_downgrades_through_every_version() -> None:
    value = {"id": "o1", "quantity": 2, "price": {"currency": "USD"}}
    assert convert(value, 3, 1, RECORDS) == {"id": "o1", "qty": 2}
    assert convert(value, 3, 2, RECORDS) == {"id": "o1", "quantity": 2, "currency": "USD"}


def test_a_direction_not_declared_is_a_failure_named() -> None:
    records = {**RECORDS, 3: record(3, V3, upgrade=UP3)}
    reason = failure({"id": "o", "quantity": 1, "price": {"currency": "EUR"}}, 3, 1, records)
    assert "version 3 declares no downgrade" in reason


def test_a_result_that_does_not_match_the_target_is_a_failure_not_a_value() -> None:
    reason = failure({"id": "o", "qty": "two"}, 1, 2, RECORDS)
    assert "does not match schema version 2 at /quantity" in reason


def test_an_unknown_version_is_a_failure() -> None:
    assert "no schema version 9" in failure({"id": "o", "qty": 1}, 1, 9, RECORDS)
    assert "version 8 is not registered" in failure({"id": "o", "qty": 1}, 8, 1, RECORDS)


def converter() -> ValueConverter:
    return ValueConverter(Versions(RECORDS))


def test_the_same_version_is_returned_as_the_same_bytes() -> None:
    raw = b'{"id": "o",   "qty": 1}'
    value, headers = converter().convert_value(raw, {SCHEMA_VERSION_HEADER: "1", "h": "v"},
                                               TOPIC, CREATED, 1)
    assert value is raw
    assert headers == {SCHEMA_VERSION_HEADER: "1", "h": "v"}


def test_a_converted_value_carries_the_target_version() -> None:
    value, headers = converter().convert_value(b'{"id": "o", "qty": 1}',
                                               {SCHEMA_VERSION_HEADER: "1", "h": "v"},
                                               TOPIC, CREATED, 2)
    assert orjson.loads(value) == {"id": "o", "quantity": 1, "currency": "EUR"}
    assert headers == {SCHEMA_VERSION_HEADER: "2", "h": "v"}


def test_a_value_without_a_version_passes_only_when_it_matches_the_target_as_it_is() -> None:
    raw = b'{"id": "o", "qty": 1}'
    assert converter().convert_value(raw, {}, TOPIC, CREATED, 1) == (
        raw, {SCHEMA_VERSION_HEADER: "1"})
    with pytest.raises(ConversionFailed, match="before the topic had a schema"):
        converter().convert_value(raw, {}, TOPIC, CREATED, 2)


def test_a_value_that_is_not_json_or_has_a_bad_version_is_a_failure() -> None:
    with pytest.raises(ConversionFailed, match="not JSON"):
        converter().convert_value(b"\xff", {SCHEMA_VERSION_HEADER: "1"}, TOPIC, CREATED, 2)
    with pytest.raises(ConversionFailed, match="not a number"):
        converter().convert_value(b"{}", {SCHEMA_VERSION_HEADER: "x"}, TOPIC, CREATED, 2)


def rejected(migrations: Any) -> str:
    with pytest.raises(SchemaRejected) as caught:
        admit_migrations(migrations)
    return caught.value.pointer


def test_declared_migrations_are_admitted_as_given() -> None:
    assert admit_migrations({"upgrade": UP2, "downgrade": DOWN2}) == {"upgrade": UP2,
                                                                      "downgrade": DOWN2}
    assert admit_migrations({"upgrade": UP3}) == {"upgrade": UP3}


@pytest.mark.parametrize(("migrations", "pointer"), [
    ([], "/migrations"),
    ({"sideways": []}, "/migrations/sideways"),
    ({"upgrade": {}}, "/migrations/upgrade"),
    ({"upgrade": [{"op": "eval", "code": "x"}]}, "/migrations/upgrade/0/op"),
    ({"upgrade": [{"op": ["rename"]}]}, "/migrations/upgrade/0/op"),
    ({"upgrade": [{"op": "drop", "path": "/a", "extra": 1}]}, "/migrations/upgrade/0/extra"),
    ({"downgrade": [UP2[0], {"op": "drop", "path": "a"}]}, "/migrations/downgrade/1/path"),
    ({"upgrade": [{"op": "drop", "path": "/a~2"}]}, "/migrations/upgrade/0/path"),
    ({"upgrade": [{"op": "drop", "path": ""}]}, "/migrations/upgrade/0/path"),
    ({"upgrade": [{"op": "rename", "from": "/a/b", "to": "/c"}]}, "/migrations/upgrade/0/to"),
    ({"upgrade": [{"op": "move", "from": "/a", "to": "/a/b"}]}, "/migrations/upgrade/0/to"),
    ({"upgrade": [{"op": "default", "path": "/a"}]}, "/migrations/upgrade/0"),
    ({"upgrade": [{"op": "default", "path": "/a", "value": "x" * 5000}]},
     "/migrations/upgrade/0/value"),
    ({"upgrade": [{"op": "drop", "path": "/a"}] * 65}, "/migrations/upgrade"),
    ({"upgrade": [{"op": "drop", "path": "/a" * 40}]}, "/migrations/upgrade/0/path"),
])
def test_a_bad_migration_is_refused_at_its_pointer(migrations: Any, pointer: str) -> None:
    assert rejected(migrations) == pointer


def test_a_default_object_is_a_fresh_copy_in_each_value() -> None:
    fill = compile_operations([{"op": "default", "path": "/tags", "value": {"seen": []}}])
    first: dict[str, Any] = {}
    second: dict[str, Any] = {}
    fill(first)
    fill(second)
    first["tags"]["seen"].append("changed")
    assert second == {"tags": {"seen": []}}


def test_a_page_of_values_is_converted_with_why_for_each_that_cannot_be() -> None:
    step = converter().step(TOPIC, CREATED, "1", 2)
    page = [b'{"id": "a", "qty": 1}', b'{"id": "b", "qty": "two"}', b"{", b'{"id": "c", "qty": 3}']
    outcomes = [orjson.loads(outcome) if isinstance(outcome, bytes) else outcome.reason
                for outcome in step.values(page)]
    assert outcomes[0] == {"id": "a", "quantity": 1, "currency": "EUR"}
    assert "does not match schema version 2 at /quantity" in outcomes[1]
    assert outcomes[2] == "the value is not JSON"
    assert outcomes[3] == {"id": "c", "quantity": 3, "currency": "EUR"}
    assert [orjson.loads(value) for value in step.values([page[0], page[3]])
            if isinstance(value, bytes)] == [outcomes[0], outcomes[3]]
