"""What a registered schema may be: bounded in size, depth, enums and patterns, with local
references only, and one the engine compiles; its migrations and event types: bounded, on valid
pointers. Anything else is refused with a pointer to it."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import orjson

from gateway.schemas.engine import DRAFT_2020_12, SchemaRefused, compile_schema
from gateway.schemas.errors import SchemaRejected
from gateway.schemas.event_types import DEFS_PREFIX, pointer_target, subschema_document
from gateway.schemas.migrate import parse_pointer

__all__ = ["MAX_DEPTH", "MAX_ENUM_ITEMS", "MAX_EVENT_TYPES", "MAX_EVENT_TYPE_CHARS",
           "MAX_MIGRATION_OPERATIONS", "MAX_MIGRATION_VALUE_BYTES", "MAX_PATTERNS",
           "MAX_POINTER_CHARS", "MAX_SCHEMA_BYTES", "admit_event_types", "admit_migrations",
           "admit_schema"]

MAX_SCHEMA_BYTES = 64 * 1024
MAX_DEPTH = 32
MAX_ENUM_ITEMS = 1000
MAX_PATTERNS = 256
ROOT = "/schema"
MAX_MIGRATION_OPERATIONS = 64  # per direction
MAX_MIGRATION_VALUE_BYTES = 4096  # a default's value, as JSON
MAX_POINTER_CHARS = 512
MIGRATIONS = "/migrations"
DIRECTIONS = ("upgrade", "downgrade")
EVENT_TYPES = "/event_types"
MAX_EVENT_TYPES = 256
MAX_EVENT_TYPE_CHARS = 256
# each operation's members besides "op", and which of them are pointers
OPERATION_MEMBERS = {"rename": ("from", "to"), "move": ("from", "to"), "default": ("path", "value"),
                     "drop": ("path",)}
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


def admit_migrations(migrations: Any) -> dict[str, list[dict[str, Any]]]:
    """The declared migrations (each direction optional), or SchemaRejected pointing under
    ``/migrations`` at the first operation that is unknown, malformed or past a bound."""
    if not isinstance(migrations, Mapping):
        raise SchemaRejected(MIGRATIONS, "'migrations' must be an object of 'upgrade' and "
                                         "'downgrade' lists")
    for name in migrations:
        if name not in DIRECTIONS:
            raise SchemaRejected(f"{MIGRATIONS}/{_escape(name)}",
                                 "a migration direction is 'upgrade' or 'downgrade'")
    return {direction: _admit_operations(migrations[direction], f"{MIGRATIONS}/{direction}")
            for direction in DIRECTIONS if direction in migrations}


def admit_event_types(event_types: Any, schema: Mapping[str, Any]) -> dict[str, str]:
    """The declared event types (an admitted ``schema``'s), or SchemaRejected pointing under
    ``/event_types`` at the first type or pointer that is malformed, past a bound, or reaches no
    schema under ``$defs``."""
    if not isinstance(event_types, Mapping):
        raise SchemaRejected(EVENT_TYPES, "'event_types' must be an object of CloudEvents types "
                                          "to JSON pointers into the schema")
    if len(event_types) > MAX_EVENT_TYPES:  # refused before a pass over them
        raise SchemaRejected(EVENT_TYPES, f"{len(event_types)} event types; at most "
                                          f"{MAX_EVENT_TYPES}")
    compiled: set[str] = set()
    for name, pointer in event_types.items():
        here = f"{EVENT_TYPES}/{_escape(name)}"
        _admit_event_type(name, here)
        if pointer not in compiled:
            _admit_subschema(pointer, schema, here)
            compiled.add(pointer)
    return dict(event_types)


def _admit_event_type(name: str, pointer: str) -> None:
    if not name or len(name) > MAX_EVENT_TYPE_CHARS or not name.isprintable():
        raise SchemaRejected(pointer, f"an event type is 1 to {MAX_EVENT_TYPE_CHARS} printable "
                                      "characters")


def _admit_subschema(value: Any, schema: Mapping[str, Any], pointer: str) -> None:
    """A pointer under ``$defs`` at an object or boolean schema that compiles on its own."""
    _admit_pointer(value, pointer)
    if not value.startswith(DEFS_PREFIX):
        raise SchemaRejected(pointer, f"an event type's schema is under '{DEFS_PREFIX}'")
    target = pointer_target(schema, value)
    if not isinstance(target, (Mapping, bool)):
        raise SchemaRejected(pointer, f"{value[:200]!r} reaches no schema in this version")
    try:
        compile_schema(subschema_document(schema, value))
    except SchemaRefused as exc:
        raise SchemaRejected(pointer, exc.message) from None


def _admit_operations(operations: Any, pointer: str) -> list[dict[str, Any]]:
    if not isinstance(operations, list):
        raise SchemaRejected(pointer, "a migration direction is a list of operations")
    if len(operations) > MAX_MIGRATION_OPERATIONS:
        raise SchemaRejected(pointer, f"{len(operations)} operations; at most "
                                      f"{MAX_MIGRATION_OPERATIONS}")
    for index, operation in enumerate(operations):
        _admit_operation(operation, f"{pointer}/{index}")
    return [dict(operation) for operation in operations]


def _admit_operation(operation: Any, pointer: str) -> None:
    if not isinstance(operation, Mapping):
        raise SchemaRejected(pointer, "an operation is an object with an 'op'")
    op = operation.get("op")
    members = OPERATION_MEMBERS.get(op) if isinstance(op, str) else None
    if members is None:
        raise SchemaRejected(f"{pointer}/op", f"'op' must be one of "
                                              f"{', '.join(OPERATION_MEMBERS)}")
    for name in operation:
        if name != "op" and name not in members:
            raise SchemaRejected(f"{pointer}/{_escape(name)}",
                                 f"{operation['op']!r} takes {', '.join(members)}")
    for name in members:
        if name not in operation:
            raise SchemaRejected(pointer, f"{operation['op']!r} needs {name!r}")
        if name != "value":
            _admit_pointer(operation[name], f"{pointer}/{name}")
    if "value" in operation and len(orjson.dumps(operation["value"])) > MAX_MIGRATION_VALUE_BYTES:
        raise SchemaRejected(f"{pointer}/value", f"a default's value is at most "
                                                 f"{MAX_MIGRATION_VALUE_BYTES} bytes of JSON")
    if "to" in operation:
        _admit_destination(operation, pointer)


def _admit_pointer(value: Any, pointer: str) -> None:
    if not isinstance(value, str) or not value.startswith("/"):
        raise SchemaRejected(pointer, "a JSON pointer to a member (starting with '/')")
    if len(value) > MAX_POINTER_CHARS:
        raise SchemaRejected(pointer, f"a pointer is at most {MAX_POINTER_CHARS} characters")
    try:
        tokens = parse_pointer(value)
    except ValueError as exc:
        raise SchemaRejected(pointer, str(exc)) from None
    if len(tokens) > MAX_DEPTH:
        raise SchemaRejected(pointer, f"a pointer is at most {MAX_DEPTH} levels deep")


def _admit_destination(operation: Mapping[str, Any], pointer: str) -> None:
    """A rename stays under its parent; a move never goes into what it moves."""
    source, target = parse_pointer(operation["from"]), parse_pointer(operation["to"])
    if source == target:
        raise SchemaRejected(f"{pointer}/to", "'to' is the same member as 'from'")
    if operation["op"] == "rename" and source[:-1] != target[:-1]:
        raise SchemaRejected(f"{pointer}/to", "a rename keeps the member under the same parent; "
                                              "use 'move' to change it")
    if target[:len(source)] == source:
        raise SchemaRejected(f"{pointer}/to", "a member cannot move inside itself")


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
