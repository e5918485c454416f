"""The one boundary to the JSON Schema engine (jsonschema-rs, draft 2020-12): schemas compiled with
linear-time patterns and no remote references, and the first place an instance fails."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import jsonschema_rs

DRAFT_2020_12 = "https://json-schema.org/draft/2020-12/schema"
MAX_PATTERN_BYTES = 64 * 1024  # a compiled pattern's size: bounds what one schema may cost


class SchemaRefused(Exception):
    """A schema the engine cannot take: not draft 2020-12, invalid, a pattern past the linear
    engine's features or size, a remote reference (never fetched)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(frozen=True, slots=True)
class Failure:
    """Where an instance fails its schema: a JSON pointer into the instance and why."""

    pointer: str
    message: str


class CompiledSchema:
    """A compiled schema; ``first_failure`` answers None for a valid instance."""

    __slots__ = ("_validator",)

    def __init__(self, validator: Any) -> None:
        self._validator = validator

    def is_valid(self, instance: Any) -> bool:
        """Whether ``instance`` (parsed JSON) matches."""
        return bool(self._validator.is_valid(instance))

    def all_valid(self, instances: list[Any]) -> bool:
        """Whether every one of ``instances`` matches (one call into the engine per instance, no
        Python frame between them)."""
        return all(map(self._validator.is_valid, instances))

    def first_failure(self, instance: Any) -> Failure | None:
        """The first place ``instance`` fails (None: it matches)."""
        for error in self._validator.iter_errors(instance):
            return Failure(pointer_of(error.instance_path), str(error.message))
        return None


def compile_schema(schema: Mapping[str, Any]) -> CompiledSchema:
    """Compile ``schema`` as draft 2020-12 (its ``$schema``, if any, must say so), patterns on the
    linear-time engine, remote references refused; SchemaRefused says why it cannot be."""
    declared = schema.get("$schema", DRAFT_2020_12)
    if not isinstance(declared, str) or declared.rstrip("#") != DRAFT_2020_12:
        raise SchemaRefused(f"$schema must be {DRAFT_2020_12!r} (draft 2020-12), got {declared!r}")
    try:
        validator = jsonschema_rs.Draft202012Validator(
            dict(schema), validate_formats=True, offline=True,
            pattern_options=jsonschema_rs.RegexOptions(size_limit=MAX_PATTERN_BYTES))
    except (ValueError, jsonschema_rs.ValidationError, jsonschema_rs.ReferencingError) as exc:
        raise SchemaRefused(f"not a usable JSON Schema: {_first_line(exc)}") from None
    return CompiledSchema(validator)


class CompiledSchemas:
    """A bounded cache of compiled schemas by fingerprint (least recently used out first)."""

    __slots__ = ("_compiled", "_max_compiled")

    def __init__(self, max_compiled: int) -> None:
        self._max_compiled = max_compiled
        self._compiled: OrderedDict[str, CompiledSchema] = OrderedDict()

    def __len__(self) -> int:
        return len(self._compiled)

    def get(self, fingerprint: str, schema: Mapping[str, Any]) -> CompiledSchema:
        """``schema`` (whose fingerprint is ``fingerprint``) compiled, once while it stays."""
        compiled = self._compiled.get(fingerprint)
        if compiled is not None:
            self._compiled.move_to_end(fingerprint)
            return compiled
        compiled = compile_schema(schema)
        self._compiled[fingerprint] = compiled
        if len(self._compiled) > self._max_compiled:
            self._compiled.popitem(last=False)
        return compiled


def pointer_of(path: Any) -> str:
    """A JSON pointer (RFC 6901) from the engine's path of keys and indexes."""
    return "".join("/" + str(part).replace("~", "~0").replace("/", "~1") for part in path)


def _first_line(exc: Exception) -> str:
    return str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__
