"""Hostile schemas refused at registration, each with a pointer to what was refused."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.schemas.errors import SchemaRejected
from gateway.schemas.limits import admit_schema


def refused(schema: Any) -> SchemaRejected:
    with pytest.raises(SchemaRejected) as caught:
        admit_schema(schema)
    return caught.value


def nested(depth: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(depth):
        schema = {"type": "array", "items": schema}
    return schema


def test_a_schema_over_64_kib_is_refused() -> None:
    big = {"type": "object", "description": "x" * (64 * 1024)}
    assert refused(big).pointer == "/schema"


def test_nesting_deeper_than_32_is_refused_where_it_goes_too_deep() -> None:
    assert refused(nested(40)).pointer.startswith("/schema/items/items")
    admit_schema(nested(10))


def test_an_enum_of_more_than_1000_items_is_refused() -> None:
    error = refused({"properties": {"s": {"enum": list(range(1001))}}})
    assert error.pointer == "/schema/properties/s/enum"


def test_more_than_256_patterns_are_refused() -> None:
    props = {f"p{i}": {"type": "string", "pattern": "^a$"} for i in range(257)}
    assert "patterns" in refused({"properties": props}).message


def test_remote_refs_are_refused_and_never_fetched() -> None:
    error = refused({"properties": {"a": {"$ref": "https://example.invalid/s.json"}}})
    assert error.pointer == "/schema/properties/a/$ref"
    assert refused({"$dynamicRef": "other.json#x"}).pointer == "/schema/$dynamicRef"


def test_an_unknown_dollar_schema_is_refused() -> None:
    error = refused({"$schema": "http://json-schema.org/draft-04/schema#"})
    assert error.pointer == "/schema/$schema"


def test_lookaround_backreference_and_invalid_patterns_are_refused() -> None:
    for pattern in ("(?=a)b", r"(a)\1", "(a"):
        assert refused({"type": "string", "pattern": pattern}).pointer == "/schema"


def test_names_that_look_like_keywords_in_data_are_not_taken_for_keywords() -> None:
    admit_schema({"properties": {"$ref": {"type": "string"}, "pattern": {"type": "string"}},
                  "enum": [{"$ref": "https://example.invalid"}]})
