"""Reading at a schema version (``schemaVersion``): the topic's versions, read on the driver from
the gateway at planning and planned into every range (``schema_conversion`` converts with them)."""

from __future__ import annotations

import urllib.error
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from streamgate_spark.errors import InvalidSourceOption, UnknownSchemaVersion
from streamgate_spark.options import SourceOptions
from streamgate_spark.topic_partitions import AUTH_HINTS, topic_document

# A version as the gateway documents it (``GET .../schemas/{version}``): version, schema,
# migrations, compatibility, fingerprint, created_at_ms, created_by. Kept as plain data: an
# executor that reads no version never imports the gateway's schema engine.
VersionDocument = Mapping[str, Any]
VERSION_MEMBERS = ("version", "schema", "compatibility", "fingerprint", "created_at_ms",
                   "created_by")


@dataclass(frozen=True)
class SchemaReading:
    """The version to read at and every registered version of the topic, oldest first."""

    topic: str
    version: int
    documents: tuple[VersionDocument, ...]

    @property
    def versions(self) -> tuple[int, ...]:
        """The registered version numbers, oldest first."""
        return tuple(int(doc["version"]) for doc in self.documents)


def schema_reading(options: SourceOptions) -> SchemaReading | None:
    """The versions to convert with (None: no ``schemaVersion``), read on the driver at planning;
    UnknownSchemaVersion when the topic has no such version (or no schema)."""
    if options.schema_version is None:
        return None
    assert options.gateway is not None  # parse_options requires it with schemaVersion
    reading = SchemaReading(options.topic, options.schema_version,
                            tuple(fetch_documents(options.gateway, options.topic,
                                                  headers=options.gateway_headers())))
    if options.schema_version not in reading.versions:
        raise UnknownSchemaVersion(options.topic, options.schema_version, reading.versions)
    return reading


def refreshed(reading: SchemaReading, options: SourceOptions) -> SchemaReading:
    """``reading`` with the versions registered since it was read (a version never changes: only
    new ones are fetched)."""
    assert options.gateway is not None
    documents = fetch_documents(options.gateway, options.topic, reading.documents,
                                options.gateway_headers())
    if len(documents) == len(reading.documents):
        return reading
    return SchemaReading(reading.topic, reading.version, tuple(documents))


def fetch_documents(gateway: str, topic: str, known: Sequence[VersionDocument] = (),
                    headers: Mapping[str, str] | None = None) -> list[VersionDocument]:
    """Every version of the topic, oldest first, from ``GET .../schemas`` and, for each not
    ``known``, ``GET .../schemas/{version}`` (with its schema and migrations), sent with
    ``headers`` (the credentials)."""
    have = {int(doc["version"]): doc for doc in known}
    try:
        listed = topic_document(gateway, topic, "/schemas", headers).get("versions")
        numbers = [int(doc["version"]) for doc in _objects(listed)]
        return [have.get(number) or _checked(topic_document(gateway, topic,
                                                            f"/schemas/{number}", headers))
                for number in numbers]
    except urllib.error.HTTPError as exc:
        raise InvalidSourceOption("gateway", f"{gateway} cannot list the schemas of {topic!r} "
                                  f"(HTTP {exc.code}): schemaVersion needs its registry"
                                  f"{AUTH_HINTS.get(exc.code, '')}") from None
    except (KeyError, TypeError, ValueError) as exc:
        raise InvalidSourceOption("gateway", f"{gateway} answered an unexpected schema document "
                                  f"for {topic!r}: {exc!r}") from None


def _objects(listed: object) -> list[Mapping[str, Any]]:
    if not isinstance(listed, list) or not all(isinstance(doc, dict) for doc in listed):
        raise TypeError("'versions' is not a list of objects")
    return listed


def _checked(doc: Mapping[str, Any]) -> VersionDocument:
    missing = [name for name in VERSION_MEMBERS if name not in doc]
    if missing or not isinstance(doc["schema"], dict):
        raise KeyError(f"a version document without {', '.join(missing) or 'a schema object'}")
    if not isinstance(doc.get("migrations") or {}, dict):
        raise TypeError("'migrations' is not an object")
    return {name: doc.get(name) for name in (*VERSION_MEMBERS, "migrations")}
