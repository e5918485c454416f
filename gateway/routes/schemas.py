"""A topic's schema registry over HTTP: register a version (admin, audited, compatibility checked),
list the versions, read one."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from aiohttp import web

from gateway.auth.acl import Action
from gateway.auth.gatekeeper import gatekeeper_of, principal_of
from gateway.errors import Problem, invalid_field
from gateway.publish.validation import reject_unknown_fields
from gateway.responses import json_response
from gateway.routes.bodies import read_json_object
from gateway.schemas.compat import event_type_changes, incompatible_changes
from gateway.schemas.errors import SchemaIncompatible, SchemaRejected
from gateway.schemas.limits import (
    MAX_SCHEMA_BYTES,
    admit_event_types,
    admit_migrations,
    admit_schema,
)
from gateway.services import Services, services_of
from partitioner.schemas import COMPATIBILITY_MODES, SchemaMirror, SchemaRecord, SchemaRegistry
from partitioner.topics import TopicMetadata

audit = logging.getLogger("streamgate.audit")

REGISTER_FIELDS = frozenset({"schema", "compatibility", "migrations", "event_types"})
# room past the schema's own bound, so an oversized schema is told as such (422), not as 413
REGISTER_BODY_MAX_BYTES = 4 * MAX_SCHEMA_BYTES


def record_document(record: SchemaRecord, with_schema: bool = True) -> dict[str, Any]:
    """The public JSON form of one version."""
    doc: dict[str, Any] = {"topic": record.topic, "version": record.version,
                           "compatibility": record.compatibility,
                           "fingerprint": record.fingerprint,
                           "created_at_ms": record.created_at_ms, "created_by": record.created_by}
    if with_schema:
        doc["schema"] = record.schema
        doc["migrations"] = record.migrations
        if record.event_types:
            doc["event_types"] = record.event_types
    return doc


async def register_schema(request: web.Request) -> web.Response:
    """POST /v1/topics/{topic}/schemas {schema, compatibility?, migrations?, event_types?} -> 201
    the new version, 200 when identical to the latest; 409 naming each incompatible change."""
    services, principal = services_of(request), principal_of(request)
    gatekeeper_of(request).require(principal, Action.ADMIN, request.match_info["topic"])
    registry, mirror = _registry_of(services)
    doc = await read_json_object(request, REGISTER_BODY_MAX_BYTES)
    reject_unknown_fields(doc, REGISTER_FIELDS)
    if "schema" not in doc:
        raise invalid_field("/schema", "'schema' (a JSON Schema object) is required")
    mode = _mode_of(doc)
    admit_schema(doc["schema"])
    migrations = admit_migrations(doc["migrations"]) if "migrations" in doc else {}
    event_types = (admit_event_types(doc["event_types"], doc["schema"])
                   if "event_types" in doc else {})
    topic = await services.topic(request.match_info["topic"])
    record, created = await registry.register(
        topic.name, topic.created_at_ms, doc["schema"], mode, principal.name,
        _compatible(doc["schema"], event_types, bool(migrations)), migrations, event_types)
    mirror.remember(record)
    if created:
        audit.info("schema version %d of %s registered by %s (%s, %s)", record.version,
                   topic.name, principal.name, record.compatibility, record.fingerprint[:16])
    return json_response(record_document(record), status=201 if created else 200)


async def list_schemas(request: web.Request) -> web.Response:
    """GET /v1/topics/{topic}/schemas -> every version, oldest first (without the schemas)."""
    topic, mirror = await _readable_topic(request)
    return json_response({"topic": topic.name, "versions": [
        record_document(record, with_schema=False)
        for record in mirror.versions(topic.name, topic.created_at_ms)]})


async def get_schema(request: web.Request) -> web.Response:
    """GET /v1/topics/{topic}/schemas/{version} (a number, or ``latest``) -> the version."""
    topic, mirror = await _readable_topic(request)
    wanted = request.match_info["version"]
    if wanted == "latest":
        record = mirror.latest(topic.name, topic.created_at_ms)
    elif wanted.isascii() and wanted.isdigit() and len(wanted) <= 9:
        record = mirror.get(topic.name, topic.created_at_ms, int(wanted))
    else:
        raise invalid_field("/version", "a version is a positive integer or 'latest'")
    if record is None:
        raise Problem(404, "schema-not-found", "Schema version not found",
                      f"topic {topic.name!r} has no schema version {wanted}")
    return json_response(record_document(record))


def _mode_of(doc: dict[str, Any]) -> str | None:
    mode = doc.get("compatibility")
    if mode is not None and mode not in COMPATIBILITY_MODES:
        raise invalid_field("/compatibility",
                            f"compatibility must be one of {', '.join(COMPATIBILITY_MODES)}")
    return mode if isinstance(mode, str) else None


def _compatible(schema: dict[str, Any], event_types: dict[str, str],
                has_migrations: bool) -> Any:
    """The registry's check: SchemaIncompatible naming every change the mode refuses; a first
    version has nothing to migrate from."""
    def check(previous: Sequence[SchemaRecord], mode: str) -> None:
        if not previous:
            if has_migrations:
                raise SchemaRejected("/migrations", "the first schema version takes no "
                                                    "migrations: there is no version before it")
            return
        changes = incompatible_changes(mode, schema, [record.schema for record in previous])
        changes += event_type_changes(mode, (schema, event_types),
                                      [(record.schema, record.event_types) for record in previous])
        if changes:
            raise SchemaIncompatible(mode, changes)
    return check


async def _readable_topic(request: web.Request) -> tuple[TopicMetadata, SchemaMirror]:
    """The topic, for a caller who may publish or subscribe to it."""
    services, principal = services_of(request), principal_of(request)
    name = request.match_info["topic"]
    gatekeeper = gatekeeper_of(request)
    if not gatekeeper.may_see(principal, name, (Action.PUBLISH, Action.SUBSCRIBE, Action.ADMIN)):
        gatekeeper.require(principal, Action.SUBSCRIBE, name)
    _, mirror = _registry_of(services)
    return await services.topic(name), mirror


def _registry_of(services: Services) -> tuple[SchemaRegistry, SchemaMirror]:
    if services.schema_registry is None or not isinstance(services.schemas, SchemaMirror):
        raise Problem(501, "schemas-unavailable", "Schema registry unavailable",
                      "this gateway runs without etcd: it has no schema registry")
    return services.schema_registry, services.schemas


def add_routes(app: web.Application) -> None:
    """Register the schema routes."""
    app.router.add_post("/v1/topics/{topic}/schemas", register_schema)
    app.router.add_get("/v1/topics/{topic}/schemas", list_schemas)
    app.router.add_get("/v1/topics/{topic}/schemas/{version}", get_schema)

