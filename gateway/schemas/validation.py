"""Validation at the door: every message of a batch for a topic with a schema must be JSON that
matches the topic's latest version (its event type's subschema when it declares types), and each
is stamped with that version's number."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import orjson

from gateway.errors import Problem
from gateway.publish.headers import SCHEMA_VERSION_HEADER
from gateway.publish.validation import PublishBatch
from gateway.schemas.engine import CompiledSchema, CompiledSchemas
from gateway.schemas.event_types import EVENT_TYPE_HEADER, compiled_for_type
from partitioner.schemas import SchemaRecord
from partitioner.topics import TopicMetadata
from storage.models import ValueFormat

# compiled validators kept: a topic's latest version each (and its event types' subschemas),
# with room for versions moving on
MAX_COMPILED_SCHEMAS = 256
KNOWN_TYPES_SHOWN = 5  # an unknown event type's refusal lists this many of the known ones


class SchemaSource(Protocol):
    """Where the gate learns a topic's latest schema (the registry's watch-fed mirror)."""

    def latest(self, topic: str, created_at_ms: int) -> SchemaRecord | None:
        """The newest version registered for the topic incarnation, None when it has none."""


class SchemaGate:
    """Checks publish batches against their topic's latest schema, with a bounded cache of
    compiled validators by fingerprint (least recently used out first)."""

    __slots__ = ("_compiled", "_source")

    def __init__(self, source: SchemaSource, max_compiled: int = MAX_COMPILED_SCHEMAS) -> None:
        self._source = source
        self._compiled = CompiledSchemas(max_compiled)

    def __len__(self) -> int:
        return len(self._compiled)

    def check(self, topic: TopicMetadata, batch: PublishBatch) -> int | None:
        """The version every message of ``batch`` matches and now carries as a header (None: the
        topic has no schema, the batch is untouched); 422 at the first message that fails."""
        record = self._source.latest(topic.name, topic.created_at_ms)
        if record is None:
            return None
        _refuse_binary(batch, record.version)
        # one parse for the batch: every value is JSON as stored, so the array is too
        instances = orjson.loads(b"[" + b",".join(batch.values) + b"]")
        if record.event_types and batch.headers is not None:
            self._check_by_type(record, batch.headers, instances)
        else:
            compiled = self._compiled.get(record.fingerprint, record.schema)
            if not compiled.all_valid(instances):
                raise _first_mismatch(compiled, instances, range(len(instances)),
                                      record.version)[1]
        _stamp(batch, record.version)
        return record.version

    def _check_by_type(self, record: SchemaRecord, headers: Sequence[dict[str, str]],
                       instances: list[Any]) -> None:
        """Each message against its ``ce-type``'s subschema (the whole schema without one): one
        pass per type in the batch, the refusal at the first failing message in batch order."""
        groups: dict[str | None, list[int]] = {}
        for index, each in enumerate(headers):
            groups.setdefault(each.get(EVENT_TYPE_HEADER), []).append(index)
        refusals: list[tuple[int, Problem]] = []
        for event_type, indexes in groups.items():
            compiled = compiled_for_type(self._compiled, record, event_type)
            if compiled is None:
                refusals.append((indexes[0], _unknown_type(record, event_type, indexes[0])))
            elif not compiled.all_valid([instances[i] for i in indexes]):
                refusals.append(_first_mismatch(compiled, instances, indexes, record.version,
                                                event_type))
        if refusals:
            raise min(refusals, key=lambda refusal: refusal[0])[1]


def schema_mismatch(pointer: str, detail: str, version: int, failure: str) -> Problem:
    """422: a message does not match its topic's schema; ``pointer`` reaches the failing path."""
    return Problem(422, "schema-mismatch", "Message does not match the topic's schema", detail,
                   pointer=pointer, extra={"schema_version": version, "schema_error": failure})


def _first_mismatch(compiled: CompiledSchema, instances: list[Any], indexes: Sequence[int],
                    version: int, event_type: str | None = None) -> tuple[int, Problem]:
    """The first of ``indexes`` whose instance fails ``compiled``, and its refusal."""
    index = next(i for i in indexes if not compiled.is_valid(instances[i]))
    failure = compiled.first_failure(instances[index])
    # is_valid and first_failure agree; the fallback only keeps the refusal well formed
    path, message = ("", "does not match") if failure is None else (failure.pointer,
                                                                   failure.message)
    against = f"schema version {version}" if event_type is None else \
        f"the schema of type {event_type!r} in version {version}"
    return index, schema_mismatch(f"/messages/{index}/value{path}",
                                  f"message {index} does not match {against}: {message}",
                                  version, message)


def _unknown_type(record: SchemaRecord, event_type: str | None, index: int) -> Problem:
    known = sorted(record.event_types)
    shown = ", ".join(map(repr, known[:KNOWN_TYPES_SHOWN])) + (
        ", ..." if len(known) > KNOWN_TYPES_SHOWN else "")
    return schema_mismatch(f"/messages/{index}/headers/{EVENT_TYPE_HEADER}",
                           f"message {index}: its {EVENT_TYPE_HEADER} {event_type!r} has no schema "
                           f"in version {record.version} (known types: {shown})",
                           record.version, "the event type has no schema")


def _refuse_binary(batch: PublishBatch, version: int) -> None:
    """A topic with a schema takes JSON values only: an opaque value cannot be checked."""
    if batch.formats is ValueFormat.JSON:
        return
    formats = batch.formats if isinstance(batch.formats, list) else [batch.formats]
    index = next(i for i, each in enumerate(formats) if each is not ValueFormat.JSON)
    raise schema_mismatch(f"/messages/{index}/value_b64",
                          f"message {index} is not JSON: this topic checks every value against "
                          f"its schema (version {version}); send it as 'value'",
                          version, "a value_b64 value cannot be checked against a schema")


def _stamp(batch: PublishBatch, version: int) -> None:
    """The version header on every message (one shared dict where none had headers: the store
    encodes it once)."""
    header = {SCHEMA_VERSION_HEADER: str(version)}
    if batch.headers is None:
        batch.headers = [header] * len(batch)
        return
    for headers in batch.headers:
        headers.update(header)
