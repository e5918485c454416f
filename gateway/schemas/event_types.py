"""A schema version's CloudEvents types: each ``type`` (the ``ce-type`` header) names a subschema
under the version's ``$defs``, compiled on its own and cached like the whole schema."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.schemas.engine import DRAFT_2020_12, CompiledSchema, CompiledSchemas
from partitioner.schemas import SchemaRecord

__all__ = ["DEFS_PREFIX", "EVENT_TYPE_HEADER", "compiled_for_type", "pointer_target",
           "subschema_document"]

# the header the CloudEvents publish paths store ``type`` in (a plain publish may set it too)
EVENT_TYPE_HEADER = "ce-type"
DEFS_PREFIX = "/$defs/"


def pointer_target(schema: Mapping[str, Any], pointer: str) -> Any:
    """What the JSON pointer ``pointer`` reaches in ``schema``; None when it reaches nothing."""
    node: Any = schema
    for token in pointer.split("/")[1:]:
        token = token.replace("~1", "/").replace("~0", "~")
        if isinstance(node, Mapping) and token in node:
            node = node[token]
        elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
            node = node[int(token)]
        else:
            return None
    return node


def subschema_document(schema: Mapping[str, Any], pointer: str) -> dict[str, Any]:
    """The subschema at ``pointer`` (under ``$defs``) as a document of its own: the version's
    ``$defs`` come along, so its references into them still resolve."""
    return {"$schema": schema.get("$schema", DRAFT_2020_12), "$defs": schema.get("$defs", {}),
            "$ref": "#" + pointer}


def compiled_for_type(compiled: CompiledSchemas, record: SchemaRecord,
                      event_type: str | None) -> CompiledSchema | None:
    """The validator for a value of ``event_type`` under ``record``: its type's subschema, or
    the whole schema when the value has no type or the version declares none; None when the
    version declares types and this one is not among them."""
    if event_type is None or not record.event_types:
        return compiled.get(record.fingerprint, record.schema)
    pointer = record.event_types.get(event_type)
    if pointer is None:
        return None
    # a fingerprint is hex and a pointer starts with '/': the key never meets a fingerprint's
    return compiled.get(record.fingerprint + pointer, subschema_document(record.schema, pointer))
