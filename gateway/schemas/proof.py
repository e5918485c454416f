"""A static proof, made once per conversion step, that every value valid under the written version's
schema is, once migrated, valid under the target's: when it holds, values need no check."""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import orjson

from gateway.schemas.compat import ANNOTATIONS, STRUCTURAL, changes_between
from gateway.schemas.engine import compile_schema

__all__ = ["proves"]

Tokens = Callable[[str], Sequence[str]]  # a JSON pointer's tokens, as the converter reads them
# keywords the transformation and the structural check model together; any other one anywhere
# in either schema leaves the step unproven (an equal keyword may still mean something else
# once its siblings changed)
MODELLED = STRUCTURAL | ANNOTATIONS
# keywords that change how references resolve below the root
ROOT_ONLY = frozenset({"$id", "$anchor", "$schema", "$vocabulary"})
# a reference may only name a definition: those are never changed by the transformation, so it
# resolves alike in the written schema and in the migrated one
DEFINITIONS = ("#/$defs/", "#/definitions/")


class _NotProven(Exception):
    """Something the proof does not model."""


def proves(written: Mapping[str, Any], chain: Sequence[Sequence[Mapping[str, Any]]],
           target: Mapping[str, Any], tokens: Tokens) -> bool:
    """Whether every value ``written`` accepts, after the ``chain`` of operations lists (in
    order), is accepted by ``target`` or makes an operation fail. False whenever that cannot be
    shown, whatever the reason (never an exception)."""
    try:
        _require_modelled(written, True)
        _require_modelled(target, True)
        migrated = copy.deepcopy(dict(written))
        for operations in chain:
            for operation in operations:
                _transform(migrated, operation, tokens)
        return not changes_between(migrated, target, "backward")
    except Exception:  # a schema or an operation the proof cannot read: the values are checked
        return False


def _require_modelled(schema: Any, root: bool) -> None:
    if isinstance(schema, bool):
        return
    if not isinstance(schema, Mapping):
        raise _NotProven("a schema is an object or a boolean")
    unmodelled = set(schema) - MODELLED | (set() if root else set(schema) & ROOT_ONLY)
    if unmodelled or ("const" in schema and "enum" in schema):
        raise _NotProven(f"{sorted(unmodelled)} not modelled")
    # the structural check lays a reference's siblings over its target instead of adding them:
    # only annotations may stand beside one
    if "$ref" in schema and (not str(schema["$ref"]).startswith(DEFINITIONS)
                             or set(schema) - ANNOTATIONS - {"$ref"}):
        raise _NotProven("a reference other than to a definition, or beside assertions")
    for keyword in ("properties", "$defs", "definitions"):
        for subschema in schema.get(keyword, {}).values():
            _require_modelled(subschema, False)
    for keyword in ("additionalProperties", "items"):
        if keyword in schema:
            _require_modelled(schema[keyword], False)
    for subschema in schema.get("prefixItems", ()):
        _require_modelled(subschema, False)


def _transform(root: dict[str, Any], operation: Mapping[str, Any], tokens: Tokens) -> None:
    """``root`` changed into the schema of the values ``operation`` leaves (those it does not
    refuse)."""
    op = operation.get("op")
    if op in ("rename", "move"):
        _move(root, _member(tokens(operation["from"])), _member(tokens(operation["to"])))
    elif op == "default":
        _default(root, _member(tokens(operation["path"])), operation["value"])
    elif op == "drop":
        _drop(root, _member(tokens(operation["path"])))
    else:
        raise _NotProven(f"operation {op!r}")


def _member(pointer: Sequence[str]) -> tuple[tuple[str, ...], str]:
    if not pointer:
        raise _NotProven("the whole value")
    return tuple(pointer[:-1]), pointer[-1]


def _holder(root: dict[str, Any], steps: tuple[str, ...]) -> dict[str, Any]:
    """The schema of the object the steps lead to. Each object on the way must be one (no list
    for a step to index), reached through ``properties`` alone, its value not enumerated (a
    changed member would leave the enumeration behind) and its additional members either
    refused or unconstrained."""
    node = root
    for step in (None, *steps):
        if step is not None:
            node = node.get("properties", {}).get(step)
        if not isinstance(node, dict) or node.get("type") not in ("object", ["object"]):
            raise _NotProven("a holder that is not an object schema")
        if {"$ref", "enum", "const"} & set(node):
            raise _NotProven("a holder behind a reference or enumerated")
        if node.get("additionalProperties", True) not in (True, False):
            raise _NotProven("a holder whose additional members have a schema")
    return node


def _move(root: dict[str, Any], source: tuple[tuple[str, ...], str],
          target: tuple[tuple[str, ...], str]) -> None:
    """A rename or move. Values without the source member are left as they are; the others
    lose it and the target gets its value, unless the target already holds one (then the
    operation fails the value). So the target member's schema is the source member's when no
    value can reach the operation with both, or when a value without the source member may
    hold the target but under the very same schema; any other case is not proven."""
    (from_steps, from_name), (to_steps, to_name) = source, target
    whole_from, whole_to = (*from_steps, from_name), (*to_steps, to_name)
    if whole_to[:len(whole_from)] == whole_from or whole_from[:len(whole_to)] == whole_to:
        raise _NotProven("a member moved into or out of itself")
    giver, taker = _holder(root, from_steps), _holder(root, to_steps)
    moved = giver.get("properties", {}).get(from_name)
    if moved is None:
        raise _NotProven("the moved member is not declared")
    always_there = from_name in giver.get("required", ())
    if from_steps != to_steps:
        # the member leaves one object for another: their sizes change, and a target object a
        # value lacks would be created with nothing else in it
        _require_always_present(root, to_steps)
        if giver.get("minProperties", 0) > 0 or "maxProperties" in taker:
            raise _NotProven("a move across objects with bounded sizes")
        always_there = False
    if _may_hold(taker, to_name) and not always_there:
        held = taker.get("properties", {}).get(to_name)
        if held is None or _canonical(held) != _canonical(moved):
            raise _NotProven("the target member may hold a value of another schema")
    _remove(giver, from_name)
    taker.setdefault("properties", {})[to_name] = moved
    if always_there:
        _add_required(taker, to_name)


def _require_always_present(root: dict[str, Any], steps: tuple[str, ...]) -> None:
    node = root
    for step in steps:
        if step not in node.get("required", ()):
            raise _NotProven("a target object a value may lack")
        node = node["properties"][step]


def _may_hold(holder: Mapping[str, Any], name: str) -> bool:
    """Whether a value of ``holder`` may have the member ``name``."""
    declared = holder.get("properties", {})
    if name in declared:
        return declared[name] is not False
    return holder.get("additionalProperties", True) is not False


def _default(root: dict[str, Any], member: tuple[tuple[str, ...], str], value: Any) -> None:
    """A default fills the member of each value's object that lacks it: the member keeps its
    schema, which the default must match, and becomes required."""
    steps, name = member
    holder = _holder(root, steps)
    declared = holder.get("properties", {}).get(name)
    if declared is None or "maxProperties" in holder:
        raise _NotProven("a default for an undeclared member or into a bounded object")
    if not _matches(root, declared, value):
        raise _NotProven("a default its member's schema refuses")
    _add_required(holder, name)


def _matches(root: Mapping[str, Any], schema: Any, value: Any) -> bool:
    """Whether ``value`` matches ``schema``, a member's schema in ``root`` (its references name
    the root's definitions)."""
    if isinstance(schema, bool):
        return schema
    alone = dict(schema)
    for keyword in ("$defs", "definitions"):
        if keyword in root:
            if keyword in alone:
                raise _NotProven("a member's own definitions")
            alone[keyword] = root[keyword]
    return compile_schema(alone).is_valid(value)


def _drop(root: dict[str, Any], member: tuple[tuple[str, ...], str]) -> None:
    """A drop leaves no value with the member (its object shrinks by one)."""
    steps, name = member
    holder = _holder(root, steps)
    if holder.get("minProperties", 0) > 0:
        raise _NotProven("a drop from an object with a minimum size")
    _remove(holder, name)


def _remove(holder: dict[str, Any], name: str) -> None:
    """No value has ``name`` in this object any more: a false schema says so exactly."""
    holder.setdefault("properties", {})[name] = False
    if name in holder.get("required", ()):
        holder["required"] = [other for other in holder["required"] if other != name]


def _add_required(holder: dict[str, Any], name: str) -> None:
    if name not in holder.get("required", ()):
        holder["required"] = [*holder.get("required", ()), name]


def _canonical(schema: Any) -> bytes:
    return orjson.dumps(schema, option=orjson.OPT_SORT_KEYS)
