"""Reading messages at a schema version (replay, key history): each value converted to the version
asked for, or returned as written with a ``schema_error`` (``sgschemaerror`` in an event) saying
why it could not be."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from aiohttp import web

from gateway.cloudevents import event_document, versioned_event
from gateway.delivery.pinning import PinnedVersion
from gateway.documents import entry_document
from gateway.errors import Problem, invalid_field
from gateway.schemas.migrate import ConversionFailed, ValueConverter
from gateway.services import Services
from partitioner.topics import TopicMetadata
from storage.models import StoredEntry, ValueFormat

VERSION_PARAM = "schema_version"


@dataclasses.dataclass(frozen=True, slots=True)
class ReadingVersion:
    """The version a read asks for, with what converts to it."""

    version: int
    converter: ValueConverter


def reading_version(request: web.Request, services: Services,
                    topic: TopicMetadata) -> ReadingVersion | None:
    """The ``schema_version`` a read asks for (None: values as written); 404 when the topic has
    no such version, 409 when it has no schema at all."""
    raw = request.query.get(VERSION_PARAM)
    if raw is None:
        return None
    if not (raw.isascii() and raw.isdigit() and 0 < len(raw) <= 9 and int(raw) > 0):
        raise invalid_field(f"/{VERSION_PARAM}", f"'{VERSION_PARAM}' is a positive integer")
    return ReadingVersion(int(raw), converter_to(services, topic, int(raw)))


def pinned_version(services: Services, topic: TopicMetadata,
                   version: int | None) -> PinnedVersion | None:
    """What converts a subscription's or a pull's deliveries to ``version`` (None: values as
    written); the errors of ``reading_version``."""
    if version is None:
        return None
    return PinnedVersion(version, topic.name, topic.created_at_ms,
                         converter_to(services, topic, version))


def converter_to(services: Services, topic: TopicMetadata, version: int) -> ValueConverter:
    """The converter to the topic's ``version``: 501 without a registry, 409 when the topic has
    no schema, 404 when it has no such version."""
    converter, schemas = services.value_converter, services.schemas
    if converter is None or schemas is None:
        raise Problem(501, "schemas-unavailable", "Schema registry unavailable",
                      "this gateway runs without etcd: it has no schema registry")
    if schemas.latest(topic.name, topic.created_at_ms) is None:
        raise Problem(409, "topic-without-schema", "Topic has no schema",
                      f"topic {topic.name!r} has no schema: its values are read as written")
    if not converter.knows(topic.name, topic.created_at_ms, version):
        raise Problem(404, "schema-version-not-found", "Schema version not found",
                      f"topic {topic.name!r} has no schema version {version}")
    return converter


def message_documents(entries: Sequence[StoredEntry], topic: TopicMetadata,
                      reading: ReadingVersion | None) -> list[dict[str, Any]]:
    """The entries' documents, at the version asked for, if any."""
    if reading is None:
        return [entry_document(entry) for entry in entries]
    return [entry_document(entry) if error is None
            else {**entry_document(entry), "schema_error": error}
            for entry, error in _entries_at(entries, topic, reading)]


def message_events(entries: Sequence[StoredEntry], topic: TopicMetadata,
                   reading: ReadingVersion | None) -> list[dict[str, Any]]:
    """The entries as CloudEvents, at the version asked for, if any."""
    if reading is None:
        return [event_document(topic.name, entry) for entry in entries]
    return [versioned_event(topic.name, entry, error)
            for entry, error in _entries_at(entries, topic, reading)]


def _entries_at(entries: Sequence[StoredEntry], topic: TopicMetadata,
                reading: ReadingVersion) -> list[tuple[StoredEntry, str | None]]:
    """Each entry converted, or as written with why it could not be (never silently changed)."""
    return [_entry_at(entry, topic, reading) for entry in entries]


def _entry_at(entry: StoredEntry, topic: TopicMetadata,
              reading: ReadingVersion) -> tuple[StoredEntry, str | None]:
    try:
        if entry.value_format is not ValueFormat.JSON:
            raise ConversionFailed("the value is not JSON")
        value, headers = reading.converter.convert_value(
            entry.value, entry.headers, topic.name, topic.created_at_ms, reading.version)
    except ConversionFailed as exc:
        return entry, exc.reason
    return dataclasses.replace(entry, value=value, headers=headers), None
