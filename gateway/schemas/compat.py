"""Compatibility between JSON Schema versions with Confluent's meanings: a structural check that one
schema (the reader's) accepts every instance another (the writer's) accepts, naming each change."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import orjson

from gateway.schemas.event_types import pointer_target, subschema_document

__all__ = ["Change", "Version", "changes_between", "event_type_changes", "incompatible_changes"]

# keywords that never change which instances a schema accepts
ANNOTATIONS = frozenset({"title", "description", "default", "examples", "$comment", "$id",
                         "$schema", "$anchor", "$defs", "definitions", "deprecated", "readOnly",
                         "writeOnly", "contentMediaType", "contentEncoding", "$vocabulary"})
# keywords the checker reasons about; any other one must be equal on both sides
STRUCTURAL = frozenset({"type", "enum", "const", "properties", "required",
                        "additionalProperties", "items", "prefixItems", "minimum", "maximum",
                        "exclusiveMinimum", "exclusiveMaximum", "minLength", "maxLength",
                        "minItems", "maxItems", "minProperties", "maxProperties", "pattern",
                        "format", "multipleOf", "uniqueItems", "$ref"})
# a backward check finds what the new schema narrowed; a forward one what it widened
WIDENED = {"type_narrowed": "type_widened", "enum_narrowed": "enum_widened",
           "required_added": "required_removed", "property_removed": "property_added",
           "property_added": "property_removed", "min_increased": "min_decreased",
           "max_decreased": "max_increased",
           "additional_properties_closed": "additional_properties_opened",
           "unique_items_added": "unique_items_removed"}
MAX_REF_DEPTH = 64  # a reference followed deeper than this is judged undecidable
# a version as the per-type check sees it: its schema and its event types (type -> pointer)
Version = tuple[Mapping[str, Any], Mapping[str, str]]
_Earlier = TypeVar("_Earlier")


@dataclass(frozen=True, slots=True)
class Change:
    """One incompatible change: where in the schema (a JSON pointer), its name, and why."""

    path: str
    change: str
    detail: str


def incompatible_changes(mode: str, new: Mapping[str, Any],
                         previous: Sequence[Mapping[str, Any]]) -> list[Change]:
    """What makes ``new`` incompatible under ``mode`` with the earlier versions ``previous``
    (oldest first; a non-transitive mode looks at the last one only); empty when compatible."""
    return list(dict.fromkeys(change for old, direction in _comparisons(mode, previous)
                              for change in changes_between(old, new, direction)))


def event_type_changes(mode: str, new: Version, previous: Sequence[Version]) -> list[Change]:
    """What makes ``new``'s event types incompatible under ``mode`` with the earlier versions'
    (oldest first): each type both declare is compared as a schema, paths under
    ``/event_types/<type>``; a type dropped refuses backward (new readers meet old events of it),
    a type added refuses forward (old readers meet new ones)."""
    return list(dict.fromkeys(change for old, direction in _comparisons(mode, previous)
                              for change in _type_changes(old, new, direction)))


def _comparisons(mode: str, previous: Sequence[_Earlier]) -> list[tuple[_Earlier, str]]:
    """(earlier version, direction) for each comparison ``mode`` asks for: the last version (or,
    transitive, every one), backward and/or forward."""
    if mode == "none":
        return []
    against = previous if mode.endswith("_transitive") else previous[-1:]
    kind = mode.removesuffix("_transitive")
    return [(old, direction) for old in against for direction in ("backward", "forward")
            if kind in (direction, "full")]


def _type_changes(old: Version, new: Version, direction: str) -> Iterator[Change]:
    (old_schema, old_types), (new_schema, new_types) = old, new
    if direction == "backward":
        missing, name, where = set(old_types) - set(new_types), "event_type_removed", "old"
    else:
        missing, name, where = set(new_types) - set(old_types), "event_type_added", "new"
    for event_type in sorted(missing):
        yield Change(f"/event_types/{_escape(event_type)}", name,
                     f"{event_type!r} has a schema in the {where} version only")
    for event_type in sorted(set(old_types) & set(new_types)):
        prefix = f"/event_types/{_escape(event_type)}"
        for change in changes_between(
                subschema_document(old_schema, old_types[event_type]),
                subschema_document(new_schema, new_types[event_type]), direction):
            path = prefix if change.path == "/" else prefix + change.path
            yield Change(path, change.change, change.detail)


def changes_between(old: Mapping[str, Any], new: Mapping[str, Any],
                    direction: str) -> list[Change]:
    """``backward``: what the new schema refuses that the old accepted (consumers on the new read
    old data); ``forward``: what the old refuses that the new accepts."""
    reader, writer = (new, old) if direction == "backward" else (old, new)
    check = _Check(reader, writer, direction == "forward")
    return list(check.accepts(reader, writer, "", 0))


def _canonical(value: Any) -> bytes:
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)


def _types(schema: Mapping[str, Any]) -> set[str] | None:
    declared = schema.get("type")
    if declared is None:
        return None
    return {declared} if isinstance(declared, str) else set(declared)


def _covers(reader: set[str] | None, writer: set[str] | None) -> set[str]:
    """The writer's types the reader does not accept (integer is a number)."""
    if reader is None:
        return set()
    if writer is None:
        return {"any type"}
    missing = writer - reader
    if "number" in reader:
        missing.discard("integer")
    return missing


def _applies(schema: Mapping[str, Any], *types: str) -> bool:
    declared = _types(schema)
    return declared is None or bool(declared & set(types))


class _Check:
    """One reader-accepts-writer question over two whole documents (for their local $refs)."""

    def __init__(self, reader_root: Mapping[str, Any], writer_root: Mapping[str, Any],
                 forward: bool) -> None:
        self._roots = (reader_root, writer_root)
        self._forward = forward
        self._seen: set[tuple[int, int]] = set()

    def _change(self, path: str, name: str, detail: str) -> Change:
        return Change(path or "/", WIDENED.get(name, name) if self._forward else name, detail)

    def _resolve(self, schema: Any, side: int) -> Any:
        """Follow a local ``$ref`` (siblings kept on top of its target); None when it cannot."""
        for _ in range(MAX_REF_DEPTH):
            if not isinstance(schema, Mapping) or "$ref" not in schema:
                return schema
            target = _pointer_target(self._roots[side], schema["$ref"])
            if target is None:
                return None
            siblings = {k: v for k, v in schema.items() if k != "$ref"}
            if siblings:
                schema = {**target, **siblings} if isinstance(target, Mapping) else None
            else:
                schema = target  # the same object each time: a recursion is recognised
        return None

    def accepts(self, reader: Any, writer: Any, path: str, depth: int) -> Iterator[Change]:
        """Every way ``reader`` refuses something ``writer`` accepts, at ``path``."""
        resolved_reader, resolved_writer = self._resolve(reader, 0), self._resolve(writer, 1)
        if resolved_reader is None or resolved_writer is None or depth > MAX_REF_DEPTH:
            yield self._change(path, "undecidable_change", "a reference that cannot be followed")
            return
        pair = (id(resolved_reader), id(resolved_writer))
        if pair in self._seen and isinstance(reader, Mapping) and "$ref" in reader:
            return  # a recursive reference: the pair is being checked further up
        self._seen.add(pair)
        yield from self._accepts(_as_schema(resolved_reader), _as_schema(resolved_writer), path,
                                 depth)

    def _accepts(self, reader: Mapping[str, Any] | None, writer: Mapping[str, Any] | None,
                 path: str, depth: int) -> Iterator[Change]:
        if writer is None or reader == {}:  # false accepts nothing; {} everything
            return
        if reader is None:
            yield self._change(path, "type_narrowed", "the schema now accepts nothing")
            return
        yield from self._undecidable(reader, writer, path)
        missing = _covers(_types(reader), _types(writer))
        if missing:
            yield self._change(path + "/type", "type_narrowed",
                               f"{', '.join(sorted(missing))} no longer accepted")
        yield from self._enum(reader, writer, path)
        yield from self._bounds(reader, writer, path)
        yield from self._strings(reader, writer, path)
        if _applies(reader, "object") and _applies(writer, "object"):
            yield from self._objects(reader, writer, path, depth)
        if _applies(reader, "array") and _applies(writer, "array"):
            yield from self._arrays(reader, writer, path, depth)

    def _undecidable(self, reader: Mapping[str, Any], writer: Mapping[str, Any],
                     path: str) -> Iterator[Change]:
        for keyword, value in reader.items():
            if keyword in ANNOTATIONS or keyword in STRUCTURAL:
                continue
            if keyword not in writer or _canonical(writer[keyword]) != _canonical(value):
                yield self._change(f"{path}/{_escape(keyword)}", "undecidable_change",
                                   f"{keyword} differs and cannot be compared structurally")

    def _enum(self, reader: Mapping[str, Any], writer: Mapping[str, Any],
              path: str) -> Iterator[Change]:
        allowed = _enumerated(reader)
        if allowed is None:
            return
        offered = _enumerated(writer)
        keyword = "const" if "const" in reader and "enum" not in reader else "enum"
        if offered is None:
            yield self._change(f"{path}/{keyword}", "enum_narrowed",
                               f"values are now limited to {keyword}")
            return
        dropped = [v for v in offered if v not in allowed]
        if dropped:
            yield self._change(f"{path}/{keyword}", "enum_narrowed",
                               f"{len(dropped)} value(s) no longer accepted")

    def _bounds(self, reader: Mapping[str, Any], writer: Mapping[str, Any],
                path: str) -> Iterator[Change]:
        numeric = _applies(reader, "number", "integer") and _applies(writer, "number", "integer")
        if numeric:
            low_r, low_w = _bound(reader, "minimum"), _bound(writer, "minimum")
            if low_r is not None and (low_w is None or low_w < low_r):
                yield self._change(f"{path}/minimum", "min_increased",
                                   f"lower bound {low_r[0]} is above {_shown(low_w)}")
            high_r, high_w = _bound(reader, "maximum"), _bound(writer, "maximum")
            if high_r is not None and (high_w is None or high_w > high_r):
                yield self._change(f"{path}/maximum", "max_decreased",
                                   f"upper bound {high_r[0]} is below {_shown(high_w)}")
            step_r, step_w = reader.get("multipleOf"), writer.get("multipleOf")
            if step_r is not None and (step_w is None or step_w % step_r != 0):
                yield self._change(f"{path}/multipleOf", "multiple_of_changed",
                                   f"multipleOf {step_r} does not divide {step_w}")
        for low, high, kind in (("minLength", "maxLength", "string"),
                                ("minItems", "maxItems", "array"),
                                ("minProperties", "maxProperties", "object")):
            if _applies(reader, kind) and _applies(writer, kind):
                yield from self._sizes(reader, writer, path, low, high)

    def _sizes(self, reader: Mapping[str, Any], writer: Mapping[str, Any], path: str,
               low: str, high: str) -> Iterator[Change]:
        if low in reader and writer.get(low, 0) < reader[low]:
            yield self._change(f"{path}/{low}", "min_increased",
                               f"{low} {reader[low]} is above {writer.get(low, 0)}")
        if high in reader and (high not in writer or writer[high] > reader[high]):
            yield self._change(f"{path}/{high}", "max_decreased",
                               f"{high} {reader[high]} is below {writer.get(high, 'none')}")

    def _strings(self, reader: Mapping[str, Any], writer: Mapping[str, Any],
                 path: str) -> Iterator[Change]:
        if not (_applies(reader, "string") and _applies(writer, "string")):
            return
        for keyword, name in (("pattern", "pattern_changed"), ("format", "format_changed")):
            if keyword in reader and writer.get(keyword) != reader[keyword]:
                yield self._change(f"{path}/{keyword}", name,
                                   f"{keyword} {reader[keyword]!r} differs from "
                                   f"{writer.get(keyword)!r}")

    def _objects(self, reader: Mapping[str, Any], writer: Mapping[str, Any], path: str,
                 depth: int) -> Iterator[Change]:
        for name in sorted(set(reader.get("required", ())) - set(writer.get("required", ()))):
            yield self._change(f"{path}/required", "required_added",
                               f"{name!r} is now required")
        props_r, props_w = reader.get("properties", {}), writer.get("properties", {})
        extra_r = reader.get("additionalProperties", True)
        extra_w = writer.get("additionalProperties", True)
        for name in sorted(set(props_r) | set(props_w)):
            where = f"{path}/properties/{_escape(name)}"
            if name in props_r:
                yield from self._property(props_r[name], props_w.get(name, extra_w), where,
                                          depth, "property_added", name in props_w)
            elif extra_r is False and props_w[name] is not False:
                yield self._change(where, "property_removed",
                                   f"{name!r} is refused by additionalProperties false")
            else:
                yield from self.accepts(extra_r, props_w[name],
                                        f"{path}/additionalProperties", depth + 1)
        if extra_r is False and extra_w is not False:
            yield self._change(f"{path}/additionalProperties", "additional_properties_closed",
                               "properties not listed are no longer accepted")
        elif extra_r is not False:
            yield from self.accepts(extra_r, extra_w, f"{path}/additionalProperties", depth + 1)

    def _property(self, reader: Any, writer: Any, where: str, depth: int, name: str,
                  declared: bool) -> Iterator[Change]:
        found = list(self.accepts(reader, writer, where, depth + 1))
        if found and not declared and writer is not False:
            # the writer's open content model may already hold any value under this name
            yield self._change(where, name, "a property added to an open content model")
        else:
            yield from found

    def _arrays(self, reader: Mapping[str, Any], writer: Mapping[str, Any], path: str,
                depth: int) -> Iterator[Change]:
        if reader.get("uniqueItems") is True and writer.get("uniqueItems") is not True:
            yield self._change(f"{path}/uniqueItems", "unique_items_added",
                               "items must now be unique")
        prefix_r, prefix_w = reader.get("prefixItems", []), writer.get("prefixItems", [])
        for index in range(max(len(prefix_r), len(prefix_w))):
            where = (f"{path}/prefixItems/{index}" if index < len(prefix_r)
                     else f"{path}/items")
            yield from self.accepts(_item(reader, index), _item(writer, index), where, depth + 1)
        yield from self.accepts(reader.get("items", True), writer.get("items", True),
                                f"{path}/items", depth + 1)


def _as_schema(schema: Any) -> Mapping[str, Any] | None:
    """A schema as a mapping: true is {}, false is None."""
    if schema is True:
        return {}
    if schema is False:
        return None
    return schema if isinstance(schema, Mapping) else {}


def _item(schema: Mapping[str, Any], index: int) -> Any:
    prefix = schema.get("prefixItems", [])
    return prefix[index] if index < len(prefix) else schema.get("items", True)


def _enumerated(schema: Mapping[str, Any]) -> list[bytes] | None:
    """The canonical values a schema enumerates (const is an enum of one); None: not
    enumerated."""
    if "const" in schema:
        return [_canonical(schema["const"])]
    if "enum" in schema:
        return [_canonical(value) for value in schema["enum"]]
    return None


def _bound(schema: Mapping[str, Any], side: str) -> tuple[float, int] | None:
    """A numeric bound as (value, strictness) ordered so that a larger tuple is tighter for a
    minimum and looser for a maximum."""
    exclusive = schema.get("exclusive" + side.capitalize())
    inclusive = schema.get(side)
    candidates = []
    if inclusive is not None:
        candidates.append((float(inclusive), 0))
    if exclusive is not None:
        candidates.append((float(exclusive), 1 if side == "minimum" else -1))
    if not candidates:
        return None
    return max(candidates) if side == "minimum" else min(candidates)


def _shown(bound: tuple[float, int] | None) -> str:
    return "none" if bound is None else f"{bound[0]:g}"


def _escape(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


def _pointer_target(root: Mapping[str, Any], ref: Any) -> Any:
    """The subschema a local reference (``#`` or ``#/...``) points at; None when it is not
    one."""
    if not isinstance(ref, str) or not ref.startswith("#"):
        return None
    return pointer_target(root, ref[1:])
