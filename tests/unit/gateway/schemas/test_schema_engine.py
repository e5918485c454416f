"""The JSON Schema engine's boundary: draft 2020-12 only, remote references and backtracking
patterns refused at compile time, failures named by a JSON pointer into the instance."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.schemas.engine import Failure, SchemaRefused, compile_schema, pointer_of

ORDER = {"type": "object", "required": ["total"],
         "properties": {"total": {"type": "integer"},
                        "lines": {"type": "array", "items": {"type": "object", "properties": {
                            "sku/code": {"type": "string", "pattern": "^[A-Z]{3}$"}}}},
                        "email": {"type": "string", "format": "email"}}}


@pytest.mark.parametrize(("schema", "why"), [
    ({"$ref": "https://example.com/order.json"}, "not present in a registry"),
    ({"type": "nope"}, "not a usable JSON Schema"),
    ({"pattern": "(?=a)b"}, "regex"),  # lookaround: only a backtracking engine has it
    ({"pattern": "(a)\\1"}, "regex"),  # a backreference, likewise
    ({"$schema": "http://json-schema.org/draft-07/schema#"}, "draft 2020-12"),
    ({"$schema": 7}, "draft 2020-12"),
    ({"properties": {"a": {"$ref": "#/$defs/missing"}}}, "does not exist"),
])
def test_schemas_the_engine_cannot_take_safely_are_refused_with_the_reason(
        schema: dict[str, Any], why: str) -> None:
    with pytest.raises(SchemaRefused, match=why):
        compile_schema(schema)


def test_the_first_failure_points_into_the_instance() -> None:
    compiled = compile_schema({"$schema": "https://json-schema.org/draft/2020-12/schema", **ORDER})
    assert compiled.first_failure({"total": 3, "lines": [{"sku/code": "ABC"}]}) is None
    assert compiled.first_failure({"total": "3"}) == Failure(
        "/total", '"3" is not of type "integer"')
    assert pointer(compiled.first_failure({"total": 1, "lines": [{}, {"sku/code": "abc"}]})) == (
        "/lines/1/sku~1code")
    assert pointer(compiled.first_failure({})) == ""
    assert pointer(compiled.first_failure({"total": 1, "email": "not-an-address"})) == "/email"


def pointer(failure: Failure | None) -> str:
    assert failure is not None
    return failure.pointer


def test_patterns_run_in_linear_time_on_inputs_that_make_backtracking_explode() -> None:
    compiled = compile_schema({"type": "string", "pattern": "^(a+)+$"})
    assert not compiled.is_valid("a" * 100_000 + "!")


def test_pointers_escape_tilde_and_slash() -> None:
    assert pointer_of(["a~b", "c/d", 0]) == "/a~0b/c~1d/0"
