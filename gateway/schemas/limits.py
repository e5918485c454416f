"""What a registered schema may be: bounded in size, depth, enums and patterns, with local
references only, and one the engine compiles; anything else is refused with a pointer to it."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import orjson

from gateway.schemas.engine import DRAFT_2020_12, SchemaRefused, compile_schema
from gateway.schemas.errors import SchemaRejected

__all__ = ["MAX_DEPTH", "MAX_ENUM_ITEMS", "MAX_PATTERNS", "MAX_SCHEMA_BYTES", "admit_schema"]

MAX_SCHEMA_BYTES = 64 * 1024
MAX_DEPTH = 32
MAX_ENUM_ITEMS = 1000
MAX_PATTERNS = 256
ROOT = "/schema"
# keywords whose value is one subschema, a list of them, or a map of names to them
ONE_SCHEMA = frozenset({"items", "additionalProperties", "not", "if", "then", "else", "contains",
                        "propertyNames", "unevaluatedItems", "unevaluatedProperties",
                        "additionalItems", "contentSchema"})
SCHEMA_LISTS = frozenset({"allOf", "anyOf", "oneOf", "prefixItems"})
SCHEMA_MAPS = frozenset({"properties", "patternProperties", "$defs", "definitions",
                         "dependentSchemas"})
REFERENCES = frozenset({"$ref", "$dynamicRef", "$recursiveRef"})


def admit_schema(schema: Any) -> None:
    """Refuse ``schema`` (SchemaRejected, pointing under ``/schema``) unless it is within every
    bound and compiles."""
    if not isinstance(schema, Mapping):
        raise SchemaRejected(ROOT, "schema must be a JSON object")
    size = len(orjson.dumps(schema))
    if size > MAX_SCHEMA_BYTES:
        raise SchemaRejected(ROOT, f"schema is {size} bytes; at most {MAX_SCHEMA_BYTES}")
    _check_depth(schema, ROOT, 0)
    declared = schema.get("$schema", DRAFT_2020_12)
    if not isinstance(declared, str) or declared.rstrip("#") != DRAFT_2020_12:
        raise SchemaRejected(ROOT + "/$schema", f"$schema must be {DRAFT_2020_12!r}")
    patterns = 0
    for pointer, keyword, value in _keywords(schema, ROOT):
        patterns += _check_keyword(pointer, keyword, value)
        if patterns > MAX_PATTERNS:
            raise SchemaRejected(pointer, f"more than {MAX_PATTERNS} patterns")
    try:
        compile_schema(schema)
    except SchemaRefused as exc:
        raise SchemaRejected(ROOT, exc.message) from None


def _check_depth(node: Any, pointer: str, depth: int) -> None:
    if depth > MAX_DEPTH:
        raise SchemaRejected(pointer, f"nested deeper than {MAX_DEPTH} levels")
    if isinstance(node, Mapping):
        for key, value in node.items():
            _check_depth(value, f"{pointer}/{_escape(key)}", depth + 1)
    elif isinstance(node, list):
        for index, value in enumerate(node):
            _check_depth(value, f"{pointer}/{index}", depth + 1)


def _check_keyword(pointer: str, keyword: str, value: Any) -> int:
    """Refuse a hostile keyword; how many patterns it brings."""
    if keyword in REFERENCES and not (isinstance(value, str) and value.startswith("#")):
        raise SchemaRejected(pointer, f"{keyword} {str(value)[:200]!r} is not local (#...); "
                                      "remote references are never fetched")
    if keyword == "enum" and isinstance(value, list) and len(value) > MAX_ENUM_ITEMS:
        raise SchemaRejected(pointer, f"enum has {len(value)} items; at most {MAX_ENUM_ITEMS}")
    if keyword == "pattern":
        return 1
    if keyword == "patternProperties" and isinstance(value, Mapping):
        return len(value)
    return 0


def _keywords(schema: Any, pointer: str) -> Iterator[tuple[str, str, Any]]:
    """(pointer, keyword, value) of every keyword of every subschema (data such as enum values or
    property names is never taken for a keyword)."""
    if not isinstance(schema, Mapping):
        return
    for keyword, value in schema.items():
        here = f"{pointer}/{_escape(keyword)}"
        yield here, keyword, value
        if keyword in ONE_SCHEMA:
            yield from _keywords(value, here)
        elif keyword in SCHEMA_LISTS and isinstance(value, list):
            for index, item in enumerate(value):
                yield from _keywords(item, f"{here}/{index}")
        elif keyword in SCHEMA_MAPS and isinstance(value, Mapping):
            for name, item in value.items():
                yield from _keywords(item, f"{here}/{_escape(name)}")


def _escape(token: Any) -> str:
    return str(token).replace("~", "~0").replace("/", "~1")
