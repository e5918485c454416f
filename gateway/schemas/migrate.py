"""Converting values between a topic's schema versions by their declared, data-only migrations
(rename, move, default, drop on JSON pointers); a result must match the target version's schema."""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import orjson

from gateway._speedups import renamed_or_none
from gateway.publish.headers import SCHEMA_VERSION_HEADER
from gateway.schemas.engine import CompiledSchema, CompiledSchemas
from gateway.schemas.errors import ConversionFailed
from gateway.schemas.event_types import EVENT_TYPE_HEADER, compiled_for_type
from gateway.schemas.proof import proves
from gateway.schemas.renames import top_level_renames
from partitioner.schemas import SchemaRecord

__all__ = ["MAX_COMPILED_TARGETS", "ConversionFailed", "SchemaVersions", "ValueConverter",
           "ValueStep", "apply_operations", "compile_operations", "convert",
           "parse_pointer"]

# compiled target schemas kept by a converter (the versions readers ask for)
MAX_COMPILED_TARGETS = 256
MAX_CACHED_POINTERS = 4096  # parsed migration pointers kept (process-wide)
MAX_CACHED_STEPS = 1024  # resolved (topic incarnation, written, target) conversions kept
MAX_TYPE_SHOWN = 256  # characters of an event type a reason names (a declared one is no longer)
Operation = Mapping[str, Any]
Migrate = Callable[[Any], None]  # one compiled operation (or chain) applied to a value in place
Member = tuple[tuple[str, ...], str]  # a pointer as the steps to its holder and the member's name


@runtime_checkable
class SchemaVersions(Protocol):
    """Where a converter finds a topic's versions (the registry's watch-fed mirror)."""

    def get(self, topic: str, created_at_ms: int, version: int) -> SchemaRecord | None:
        """One version of the topic incarnation; None when there is no such version."""


def parse_pointer(pointer: str) -> list[str]:
    """The tokens of a JSON pointer (RFC 6901); ValueError when it is not one."""
    if pointer == "":
        return []
    if not pointer.startswith("/"):
        raise ValueError("a JSON pointer starts with '/'")
    tokens = pointer[1:].split("/")
    for token in tokens:
        if "~" in token.replace("~0", "").replace("~1", ""):
            raise ValueError("'~' in a JSON pointer must be escaped as '~0' or '~1'")
    return [token.replace("~1", "/").replace("~0", "~") for token in tokens]


def convert(instance: Any, from_version: int, to_version: int,
            records: Mapping[int, SchemaRecord], compiled: CompiledSchemas | None = None) -> Any:
    """``instance`` (parsed JSON of ``from_version``) as ``to_version``: the chain of upgrades (or
    downgrades) between them applied to a copy, the result checked against the target's schema.
    ConversionFailed when a version or a direction is missing or the result does not match."""
    target = records.get(to_version)
    if target is None:
        raise ConversionFailed(f"there is no schema version {to_version}")
    if from_version not in records:
        raise ConversionFailed(f"the value's schema version {from_version} is not registered")
    return _convert_own(copy.deepcopy(instance), from_version, target, records,
                        CompiledSchemas(1) if compiled is None else compiled)


def _convert_own(instance: Any, from_version: int, target: SchemaRecord,
                 records: Mapping[int, SchemaRecord], compiled: CompiledSchemas) -> Any:
    """``convert`` on an instance the caller owns (changed in place: no copy)."""
    for operations in _chain(from_version, target.version, records):
        instance = apply_operations(instance, operations)
    _require_match(instance, target, compiled)
    return instance


def apply_operations(instance: Any, operations: Sequence[Operation]) -> Any:
    """``instance`` with each operation applied in order (in place); ConversionFailed when one
    cannot be."""
    compile_operations(operations)(instance)
    return instance


def compile_operations(operations: Sequence[Operation]) -> Migrate:
    """The operations as one call applying them in order to a value, in place (pointers parsed
    once, for the many values it applies to); the call raises ConversionFailed when one cannot
    be applied."""
    return _compiled_chain((operations,)) or _unchanged


def _unchanged(instance: Any) -> None:
    """No operation to apply."""


class ValueConverter:
    """Converts stored JSON values to the version a reader asks for, reading each value's version
    from its ``sg-schema-version`` header; compiled target schemas are cached (bounded)."""

    __slots__ = ("_compiled", "_steps", "_versions")

    def __init__(self, versions: SchemaVersions, max_compiled: int = MAX_COMPILED_TARGETS) -> None:
        self._versions = versions
        self._compiled = CompiledSchemas(max_compiled)
        self._steps: dict[tuple[str, int, str | None, int], ValueStep] = {}

    def knows(self, topic: str, created_at_ms: int, version: int) -> bool:
        """Whether the topic incarnation has ``version``."""
        return self._versions.get(topic, created_at_ms, version) is not None

    def convert_value(self, value: bytes, headers: Mapping[str, str], topic: str,
                      created_at_ms: int, target: int) -> tuple[bytes, dict[str, str]]:
        """``value`` (JSON) as version ``target`` and its headers with that version; the same
        bytes when it already is. A value without a version (written before the topic had a
        schema) passes only if it matches the target as it is. ConversionFailed says why not."""
        wanted = str(target)
        written = headers.get(SCHEMA_VERSION_HEADER)
        if written == wanted:
            return value, dict(headers)
        step = self.step(topic, created_at_ms, written, target)
        return (step(value, headers.get(EVENT_TYPE_HEADER)),
                {**headers, SCHEMA_VERSION_HEADER: wanted})

    def step(self, topic: str, created_at_ms: int, written: str | None,
             target: int) -> ValueStep:
        """What converts a value written at ``written`` (its ``sg-schema-version``; None: before
        the topic had a schema) to ``target``, resolved once for many values of that version;
        ConversionFailed when no value of that version can be converted (the step raises it for
        one that cannot)."""
        # kept once resolved: a topic incarnation's versions never change once registered; a
        # refusal is not kept (the registry's mirror may not have the written version yet)
        key = (topic, created_at_ms, written, target)
        step = self._steps.get(key)
        if step is None:
            step = self._resolved(topic, created_at_ms, written, target)
            if len(self._steps) >= MAX_CACHED_STEPS:
                self._steps.clear()
            self._steps[key] = step
        return step

    def _resolved(self, topic: str, created_at_ms: int, written: str | None,
                  target: int) -> ValueStep:
        target_record = self._versions.get(topic, created_at_ms, target)
        if target_record is None:
            raise ConversionFailed(f"there is no schema version {target}")
        if written is None:
            return ValueStep((), target_record, self._compiled,
                             "a value written before the topic had a schema")
        if not (written.isascii() and written.isdigit() and len(written) <= 9):
            raise ConversionFailed(f"the value's schema version {written[:20]!r} is not a number")
        records = self._between(topic, created_at_ms, int(written), target)
        if int(written) not in records:
            raise ConversionFailed(f"the value's schema version {written} is not registered")
        return ValueStep(tuple(_chain(int(written), target, records)), target_record,
                         self._compiled, written=records[int(written)])

    def _between(self, topic: str, created_at_ms: int, one: int,
                 other: int) -> dict[int, SchemaRecord]:
        """The registered versions from ``one`` to ``other`` (either order), by number."""
        numbers = range(min(one, other), max(one, other) + 1)
        return {number: record for number in numbers
                if (record := self._versions.get(topic, created_at_ms, number)) is not None}


class ValueStep:
    """Converts JSON values of one version to another by a resolved chain of operations lists,
    compiled once; the result must match the target's schema, or the subschema of the value's
    event type (no chain: the value as it is must). Given the written version, a chain proven to
    keep every value its schema accepts valid under the target's skips that check."""

    __slots__ = ("_chain", "_checked", "_compiled", "_migrate", "_renames", "_schema", "_target",
                 "_what")

    def __init__(self, chain: tuple[Sequence[Operation], ...], target: SchemaRecord,
                 compiled: CompiledSchemas, what: str = "the converted value",
                 written: SchemaRecord | None = None) -> None:
        self._chain = chain
        self._migrate = _compiled_chain(chain)
        self._target = target
        self._compiled = compiled
        self._schema = compiled.get(target.fingerprint, target.schema)
        self._what = what
        self._checked = not _proven(written, chain, target)
        # a proven chain of top-level renames rewrites the keys' bytes, unparsed
        self._renames = None if self._checked else top_level_renames(chain, _tokens)

    @property
    def proven(self) -> bool:
        """Whether every value of the written version converts to a valid one (none checked)."""
        return not self._checked

    def __call__(self, value: bytes, event_type: str | None = None) -> bytes:
        """``value`` (of ``event_type``, its ``ce-type``) converted (the same bytes when there is
        nothing to apply); ConversionFailed says why it cannot be."""
        if self._renames is not None:
            renamed = renamed_or_none(value, self._renames)
            if renamed is not None:
                return renamed
        schema = self._schema_for(event_type) if self._checked else self._schema
        instance = _parsed(value)  # parsed here: changed in place, no copy
        if self._migrate is not None:
            self._migrate(instance)
        if self._checked and not schema.is_valid(instance):
            _require_match(instance, self._target, schema, self._what, event_type)
        return orjson.dumps(instance) if self._chain else value

    def values(self, values: Sequence[bytes],
               event_type: str | None = None) -> Sequence[bytes | ConversionFailed]:
        """Each of ``values`` (all of ``event_type``) converted, or why it cannot be, in order.
        A page goes through each stage at once (one engine call checks them all); it is redone
        value by value only when one of them fails, to tell which and why."""
        renames = self._renames
        if renames is None:
            return self._parsed_values(values, event_type)
        converted = [renamed_or_none(value, renames) for value in values]
        if None not in converted:
            return converted  # type: ignore[return-value]  # no None left in it
        return self._declined_filled(values, converted, event_type)

    def _declined_filled(self, values: Sequence[bytes], renamed: list[bytes | None],
                         event_type: str | None) -> list[bytes | ConversionFailed]:
        """``renamed`` with the values it declined (None) converted the parsed way, in order."""
        declined = [value for value, done in zip(values, renamed, strict=True) if done is None]
        parsed = iter(self._parsed_values(declined, event_type))
        return [next(parsed) if done is None else done for done in renamed]

    def _parsed_values(self, values: Sequence[bytes],
                       event_type: str | None) -> Sequence[bytes | ConversionFailed]:
        """``values`` the parsed way: parse, migrate, check when not proven, encode."""
        try:
            schema = self._schema_for(event_type) if self._checked else self._schema
        except ConversionFailed as exc:
            return [exc] * len(values)
        try:
            instances = _page_parsed(values)
            migrate = self._migrate
            if migrate is not None:
                for instance in instances:
                    migrate(instance)
        except (orjson.JSONDecodeError, ConversionFailed):
            return self._one_by_one(values, event_type)
        if self._checked and not schema.all_valid(instances):
            return self._one_by_one(values, event_type)
        return list(map(orjson.dumps, instances)) if self._chain else values

    def _schema_for(self, event_type: str | None) -> CompiledSchema:
        """What a converted value of ``event_type`` must match (the whole schema without a type
        or when the target declares none); ConversionFailed when the target lacks the type."""
        schema = compiled_for_type(self._compiled, self._target, event_type)
        if schema is None:
            raise ConversionFailed(f"version {self._target.version} has no schema for event type "
                                   f"{str(event_type)[:MAX_TYPE_SHOWN]!r}")
        return schema

    def _one_by_one(self, values: Sequence[bytes],
                    event_type: str | None = None) -> list[bytes | ConversionFailed]:
        converted: list[bytes | ConversionFailed] = []
        for value in values:
            try:
                converted.append(self(value, event_type))
            except ConversionFailed as exc:
                converted.append(exc)
        return converted


def _proven(written: SchemaRecord | None, chain: tuple[Sequence[Operation], ...],
            target: SchemaRecord) -> bool:
    """Whether every value written at ``written`` converts to one the target accepts. A value
    matched its version's whole schema at the door (only the gateway writes the version header),
    unless the version has event types: then only its type's subschema. A target with event types
    checks a typed value against its type's subschema, which the proof does not model."""
    return (written is not None and not written.event_types and not target.event_types
            and proves(written.schema, chain, target.schema, _tokens))


def _chain(from_version: int, to_version: int,
           records: Mapping[int, SchemaRecord]) -> list[Sequence[Operation]]:
    """The operations lists taking ``from_version`` to ``to_version``, in order."""
    if from_version <= to_version:
        steps = [(number, "upgrade") for number in range(from_version + 1, to_version + 1)]
    else:
        steps = [(number, "downgrade") for number in range(from_version, to_version, -1)]
    chain = []
    for number, direction in steps:
        record = records.get(number)
        if record is None:
            raise ConversionFailed(f"schema version {number} is not registered")
        operations = record.migrations.get(direction)
        if operations is None:
            raise ConversionFailed(f"schema version {number} declares no {direction}: a value "
                                   f"cannot be converted from version {from_version} to "
                                   f"{to_version}")
        chain.append(operations)
    return chain


def _require_match(instance: Any, target: SchemaRecord, compiled: CompiledSchemas | CompiledSchema,
                   what: str = "the converted value", event_type: str | None = None) -> None:
    schema = (compiled.get(target.fingerprint, target.schema)
              if isinstance(compiled, CompiledSchemas) else compiled)
    # the engine's yes/no is several times cheaper than its errors: asked first
    failure = None if schema.is_valid(instance) else schema.first_failure(instance)
    if failure is not None:
        against = (f"schema version {target.version}" if event_type is None or
                   not target.event_types else f"the schema of type "
                   f"{event_type[:MAX_TYPE_SHOWN]!r} in version {target.version}")
        raise ConversionFailed(f"{what} does not match {against} at "
                               f"{failure.pointer or '/'}: {failure.message}")


def _parsed(value: bytes) -> Any:
    try:
        return orjson.loads(value)
    except orjson.JSONDecodeError:
        raise ConversionFailed("the value is not JSON") from None


def _page_parsed(values: Sequence[bytes]) -> list[Any]:
    """The JSON ``values`` parsed, in order; JSONDecodeError when one is not JSON."""
    # One parse for the page: a stored JSON value is valid JSON on its own (every publish path,
    # a body's or a WebSocket frame's ``value`` and a CloudEvent's ``data``, stores what orjson
    # writes of the parsed document, or the scanned bytes when they are exactly that), so the
    # page joined is an array of as many; anything else is parsed value by value.
    try:
        instances = orjson.loads(b"[" + b",".join(values) + b"]")
    except orjson.JSONDecodeError:
        instances = None
    if isinstance(instances, list) and len(instances) == len(values):
        return instances
    return list(map(orjson.loads, values))


def _compiled_chain(chain: Sequence[Sequence[Operation]]) -> Migrate | None:
    """The chain's operations as one call (None: nothing to apply), pointers parsed once."""
    compiled = tuple(_compiled_operation(operation)
                     for operations in chain for operation in operations)
    if not compiled:
        return None
    if len(compiled) == 1:
        return compiled[0]

    def migrate(instance: Any) -> None:
        for apply in compiled:
            apply(instance)

    return migrate


def _compiled_operation(operation: Operation) -> Migrate:
    """One operation as a call on a value; a malformed one (never admitted) fails each value."""
    op = operation.get("op")
    try:
        if op in ("rename", "move"):
            return _mover(operation["from"], operation["to"], str(op))
        if op == "default":
            return _defaulter(_member(operation["path"]), operation["value"])
        if op == "drop":
            return _dropper(_member(operation["path"]))
    except (KeyError, TypeError, ValueError) as exc:
        return _refusal(f"migration operation {op!r} is malformed: {exc}")
    return _refusal(f"unknown migration operation {op!r}")


def _member(pointer: str) -> Member:
    tokens = _tokens(pointer)
    if not tokens:
        raise ValueError("the empty pointer names the whole value, not a member")
    return tokens[:-1], tokens[-1]


def _holder(instance: Any, steps: tuple[str, ...], create: bool = False) -> dict[str, Any] | None:
    """The object the steps lead to; None when a step on the way is absent or not a container
    (``create`` makes absent objects on the way)."""
    node = instance
    for token in steps:
        if isinstance(node, list) and token.isdigit() and int(token) < len(node):
            node = node[int(token)]
        elif isinstance(node, dict) and token in node:
            node = node[token]
        elif isinstance(node, dict) and create:
            node = node.setdefault(token, {})
        else:
            return None
    return node if isinstance(node, dict) else None


@functools.lru_cache(maxsize=MAX_CACHED_POINTERS)
def _tokens(pointer: str) -> tuple[str, ...]:
    """``parse_pointer`` once per pointer: each delivery of a pinned group applies the same few."""
    return tuple(parse_pointer(pointer))


def _mover(source: str, target: str, op: str) -> Migrate:
    (from_steps, from_name), (to_steps, to_name) = _member(source), _member(target)

    def move(instance: Any) -> None:
        present, value = _take(instance, from_steps, from_name)
        if not present:
            return
        holder = _holder(instance, to_steps, create=True)
        if holder is None:
            raise ConversionFailed(f"{op}: {target!r} is not inside an object of the value")
        if to_name in holder:
            raise ConversionFailed(f"{op}: {target!r} already holds a value")
        holder[to_name] = value

    def move_at_top(instance: Any) -> None:
        # the usual rename: one member of the value's own object, no walk
        if isinstance(instance, dict) and from_name in instance:
            value = instance.pop(from_name)
            if to_name in instance:
                raise ConversionFailed(f"{op}: {target!r} already holds a value")
            instance[to_name] = value

    return move_at_top if not from_steps and not to_steps else move


def _take(instance: Any, steps: tuple[str, ...], name: str) -> tuple[bool, Any]:
    """(whether the member existed, its value), removed from the instance."""
    holder = _holder(instance, steps)
    if holder is None or name not in holder:
        return False, None
    return True, holder.pop(name)


def _defaulter(member: Member, default: Any) -> Migrate:
    steps, name = member
    # a default of a container is copied into each value: later operations may change it there
    fresh = ((lambda: default) if default is None or isinstance(default, (str, int, float))
             else functools.partial(copy.deepcopy, default))

    def fill(instance: Any) -> None:
        holder = _holder(instance, steps)
        # a default fills a member of an object the value has; it never creates the object
        if holder is not None and name not in holder:
            holder[name] = fresh()

    return fill


def _dropper(member: Member) -> Migrate:
    steps, name = member

    def drop(instance: Any) -> None:
        _take(instance, steps, name)

    return drop


def _refusal(reason: str) -> Migrate:
    def refuse(instance: Any) -> None:
        raise ConversionFailed(reason)

    return refuse
