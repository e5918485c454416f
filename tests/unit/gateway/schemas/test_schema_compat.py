"""Compatibility between schema versions, on Confluent's documented JSON Schema cases: open and
closed content models, optional and required properties, narrowed and widened types."""

from __future__ import annotations

from typing import Any

from gateway.schemas.compat import incompatible_changes

OPEN = {"type": "object", "properties": {"id": {"type": "string"}}}
CLOSED = {**OPEN, "additionalProperties": False}


def names(mode: str, old: dict[str, Any], new: dict[str, Any]) -> set[str]:
    return {change.change for change in incompatible_changes(mode, new, [old])}


def with_property(base: dict[str, Any], name: str, schema: Any) -> dict[str, Any]:
    return {**base, "properties": {**base["properties"], name: schema}}


def test_adding_an_optional_property_to_a_closed_model_is_backward_but_not_forward() -> None:
    new = with_property(CLOSED, "note", {"type": "string"})
    assert names("backward", CLOSED, new) == set()
    assert names("forward", CLOSED, new) == {"property_added"}
    assert names("full", CLOSED, new) == {"property_added"}


def test_adding_a_property_to_an_open_model_is_not_backward_compatible() -> None:
    new = with_property(OPEN, "note", {"type": "string"})
    assert names("backward", OPEN, new) == {"property_added"}
    assert names("forward", OPEN, new) == set()


def test_removing_a_property_from_an_open_model_is_backward_but_not_forward() -> None:
    old = with_property(OPEN, "note", {"type": "string"})
    assert names("backward", old, OPEN) == set()
    assert names("forward", old, OPEN) == {"property_removed"}


def test_removing_a_property_from_a_closed_model_is_not_backward_compatible() -> None:
    old = with_property(CLOSED, "note", {"type": "string"})
    changes = incompatible_changes("backward", CLOSED, [old])
    assert [(c.path, c.change) for c in changes] == [("/properties/note", "property_removed")]


def test_a_new_required_property_is_named_with_its_path() -> None:
    new = {**with_property(CLOSED, "note", {"type": "string"}), "required": ["note"]}
    changes = incompatible_changes("backward", new, [CLOSED])
    assert [(c.path, c.change) for c in changes] == [("/required", "required_added")]


def test_integer_to_number_widens_and_number_to_integer_narrows() -> None:
    integer = with_property(CLOSED, "n", {"type": "integer"})
    number = with_property(CLOSED, "n", {"type": "number"})
    assert names("backward", integer, number) == set()
    assert names("backward", number, integer) == {"type_narrowed"}
    assert names("forward", integer, number) == {"type_widened"}


def test_narrowed_enums_bounds_lengths_and_patterns_are_each_named() -> None:
    old = {"type": "object", "properties": {
        "state": {"enum": ["a", "b"]}, "n": {"type": "integer", "minimum": 0, "maximum": 10},
        "s": {"type": "string", "maxLength": 8, "pattern": "^[a-z]+$"}}}
    new = {"type": "object", "properties": {
        "state": {"enum": ["a"]}, "n": {"type": "integer", "minimum": 1, "exclusiveMaximum": 10},
        "s": {"type": "string", "maxLength": 4, "pattern": "^[a-c]+$"}}}
    changes = {(c.path, c.change) for c in incompatible_changes("backward", new, [old])}
    assert changes == {("/properties/state/enum", "enum_narrowed"),
                       ("/properties/n/minimum", "min_increased"),
                       ("/properties/n/maximum", "max_decreased"),
                       ("/properties/s/maxLength", "max_decreased"),
                       ("/properties/s/pattern", "pattern_changed")}
    # a changed pattern cannot be compared: it counts as narrowing either way
    assert names("backward", new, old) == {"pattern_changed"}


def test_closing_an_open_model_is_named() -> None:
    assert names("backward", OPEN, CLOSED) == {"additional_properties_closed"}
    assert names("backward", CLOSED, OPEN) == set()


def test_nested_objects_arrays_and_local_refs_are_followed() -> None:
    old = {"$defs": {"line": {"type": "object", "properties": {"qty": {"type": "number"}}}},
           "type": "object",
           "properties": {"lines": {"type": "array", "items": {"$ref": "#/$defs/line"}}}}
    new = {"$defs": {"line": {"type": "object", "properties": {"qty": {"type": "integer"}}}},
           "type": "object",
           "properties": {"lines": {"type": "array", "items": {"$ref": "#/$defs/line"}}}}
    changes = incompatible_changes("backward", new, [old])
    assert [(c.path, c.change) for c in changes] == [
        ("/properties/lines/items/properties/qty/type", "type_narrowed")]


def test_a_recursive_reference_terminates() -> None:
    tree = {"$defs": {"node": {"type": "object", "properties": {
        "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}}}},
        "$ref": "#/$defs/node"}
    assert incompatible_changes("full", tree, [tree]) == []


def test_combinators_are_undecidable_unless_unchanged() -> None:
    old = {"anyOf": [{"type": "string"}, {"type": "integer"}]}
    new = {"anyOf": [{"type": "string"}, {"type": "number"}]}
    assert names("backward", old, new) == {"undecidable_change"}
    assert names("backward", old, old) == set()


def test_transitive_modes_check_every_earlier_version_and_none_checks_nothing() -> None:
    v1 = with_property(CLOSED, "note", {"type": "string"})
    v2 = CLOSED
    v3 = with_property(CLOSED, "note", {"type": "integer"})
    assert incompatible_changes("backward", v3, [v1, v2]) == []
    assert {c.change for c in incompatible_changes("backward_transitive", v3, [v1, v2])} == {
        "type_narrowed"}
    assert incompatible_changes("none", {"type": "null"}, [v1, v2]) == []
