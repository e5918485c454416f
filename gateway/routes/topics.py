"""Topic administration: create, list, describe, change, delete."""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from aiohttp import web

from gateway.auth.acl import Action
from gateway.auth.gatekeeper import gatekeeper_of, principal_of
from gateway.errors import invalid_field
from gateway.observe.hotspots import PartitionHeat
from gateway.publish.validation import reject_unknown_fields
from gateway.responses import json_response
from gateway.routes.admission import admit_or_refuse
from gateway.routes.bodies import optional_int, read_json_object
from gateway.routes.dry_runs import dry_run, patch_impact
from gateway.services import Services, services_of
from gateway.throttle import RateAction
from partitioner.errors import ConcurrentModification, PartitionerError
from partitioner.topics import DEFAULT_RETENTION_MS, TopicMetadata, TopicSettings
from storage.models import ArchivedRange, PartitionInfo

log = logging.getLogger(__name__)

CREATE_FIELDS = frozenset({"name", "partitions", "retention_ms", "max_length", "key_index",
                           "compact"})
PATCH_FIELDS = frozenset({"partitions", "retention_ms", "max_length"})
UPDATE_ATTEMPTS = 5
NOTHING_ARCHIVED = ArchivedRange(None, None, 0, 0, 0)


def topic_document(topic: TopicMetadata) -> dict[str, Any]:
    """The public JSON form of a topic."""
    return {
        "name": topic.name,
        "partitions": topic.partitions,
        "retention_ms": topic.retention_ms,
        "max_length": topic.max_length,
        "created_at_ms": topic.created_at_ms,
        "owner": topic.owner,
        "key_index": topic.key_index,
        "compact": topic.compact,
        "growing_to": topic.growing_to,
    }


def optional_bool(doc: dict[str, Any], name: str, *, default: bool = False) -> bool:
    """An optional boolean field; 422 with a pointer otherwise."""
    value = doc.get(name, default)
    if not isinstance(value, bool):
        raise invalid_field(f"/{name}", f"'{name}' must be true or false")
    return value


def partition_document(info: PartitionInfo, heat: PartitionHeat, *,
                       show_keys: bool = True) -> dict[str, Any]:
    """The public JSON form of one partition's size, bounds (both tiers: the archive's first offset
    is the partition's when it holds one), tiers and recent publish rate (this gateway's view).

    ``show_keys=False`` leaves the heavy keys out (they may belong to other tenants of a filtered
    principal).
    """
    archived = info.archived or NOTHING_ARCHIVED
    return {"partition": info.partition, "length": archived.entries + info.length,
            "first_offset": archived.first_offset or info.first_offset,
            "last_offset": info.last_offset or archived.last_offset,
            "tiers": tiers_document(info),
            "publish_rate_per_s": round(heat.rate_per_s, 3), "hot": heat.hot,
            "top_keys": ([{"key": key, "messages": count} for key, count in heat.top_keys]
                         if show_keys else [])}


def tiers_document(info: PartitionInfo) -> dict[str, Any]:
    """Where a partition's entries live: the hot range in Redis, and the archived one (null when
    the gateway has no archive tier)."""
    archived = info.archived
    return {"hot": {"first_offset": info.first_offset, "last_offset": info.last_offset,
                    "entries": info.length},
            "archive": None if archived is None else {
                "first_offset": archived.first_offset, "last_offset": archived.last_offset,
                "entries": archived.entries, "segments": archived.segments,
                "bytes": archived.bytes}}


async def create_topic(request: web.Request) -> web.Response:
    """POST /v1/topics -> 201 with the topic; 409 when the name is taken."""
    services = services_of(request)
    doc = await read_json_object(request)
    reject_unknown_fields(doc, CREATE_FIELDS)
    name = doc.get("name")
    if not isinstance(name, str):
        raise invalid_field("/name", "'name' must be a string")
    principal = principal_of(request)
    gatekeeper_of(request).require(principal, Action.ADMIN, name)
    partitions = optional_int(doc, "partitions")
    if partitions is None:
        raise invalid_field("/partitions", "'partitions' is required")
    compact = optional_bool(doc, "compact")
    settings = TopicSettings(name, partitions,
                             optional_int(doc, "retention_ms") or DEFAULT_RETENTION_MS,
                             optional_int(doc, "max_length"),
                             optional_bool(doc, "key_index", default=compact), compact)
    topic = await services.registry.create(settings, owner=principal.name)
    services.cache.remember(topic)
    return json_response(topic_document(topic), status=201,
                         headers={"Location": f"/v1/topics/{name}"})


async def list_topics(request: web.Request) -> web.Response:
    """GET /v1/topics -> every topic the caller has some access to (charged to the caller's reads
    bucket)."""
    services, principal, gatekeeper = (services_of(request), principal_of(request),
                                       gatekeeper_of(request))
    limited = await admit_or_refuse(services, principal, RateAction.READ)
    topics = await services.registry.list()
    return json_response({"topics": [topic_document(topic) for topic in topics
                                     if gatekeeper.may_see(principal, topic.name)]},
                         headers=limited)


async def describe_topic(request: web.Request) -> web.Response:
    """GET /v1/topics/{topic} -> the topic with each partition's length, first/last offset and
    tiers."""
    services, principal, gatekeeper = (services_of(request), principal_of(request),
                                       gatekeeper_of(request))
    gatekeeper.require_any(principal, request.match_info["topic"])
    limited = await admit_or_refuse(services, principal, RateAction.READ)
    topic = await services.registry.get(request.match_info["topic"])
    infos = await services.store.partition_info(topic.name, topic.partitions)
    heat = services.stats.heat(topic.name, topic.partitions)
    show_keys = may_see_keys(request, topic.name)
    return json_response({**topic_document(topic), "partition_details": [
        partition_document(i, h, show_keys=show_keys)
        for i, h in zip(infos, heat, strict=True)]}, headers=limited)


def may_see_keys(request: web.Request, topic: str) -> bool:
    """Message keys are message data: only for a reader of the topic whose reads are not filtered
    (the heavy keys may belong to other tenants)."""
    principal, gatekeeper = principal_of(request), gatekeeper_of(request)
    return (gatekeeper.acl.allows(principal, Action.SUBSCRIBE, topic)
            and not gatekeeper.forced_headers(principal))


async def update_topic(request: web.Request) -> web.Response:
    """PATCH /v1/topics/{topic}: partitions may only grow; retention_ms and max_length (null
    clears)."""
    services = services_of(request)
    _require_unfiltered_admin(request, "changing a topic",
                              "every tenant's messages (retention, length, partitions)")
    doc = await read_json_object(request)
    for fixed in ("key_index", "compact"):
        if fixed in doc:
            raise invalid_field(f"/{fixed}", f"'{fixed}' is fixed when the topic is created: an "
                                "index started later would miss the history before it")
    reject_unknown_fields(doc, PATCH_FIELDS)
    partitions, retention_ms = optional_int(doc, "partitions"), optional_int(doc, "retention_ms")
    max_length = optional_int(doc, "max_length")
    clear_max_length = "max_length" in doc and doc["max_length"] is None
    name = request.match_info["topic"]
    # checked before anything is written: a PATCH applies whole or not at all
    current = await services.registry.get(name)
    changed = current.with_changes(retention_ms, max_length, clear_max_length)
    if dry_run(request):
        return await _patch_dry_run(services, current, changed, partitions,
                                    bool({"retention_ms", "max_length"} & set(doc)))
    if partitions is not None:
        if services.growth is None:
            raise PartitionerError("growing partitions needs etcd")
        await services.growth.grow(name, partitions)
    for attempt in range(UPDATE_ATTEMPTS):
        current = await services.registry.get(name)
        try:
            updated = await services.registry.update(
                current.with_changes(retention_ms, max_length, clear_max_length))
            break
        except ConcurrentModification:
            if attempt == UPDATE_ATTEMPTS - 1:
                raise
    services.cache.remember(updated)
    return json_response(topic_document(updated))


async def delete_topic(request: web.Request) -> web.Response:
    """DELETE /v1/topics/{topic} -> 204; metadata first, so publishers stop before the data goes."""
    services = services_of(request)
    _require_unfiltered_admin(request, "deleting a topic", "every tenant's messages")
    topic = await services.registry.delete(request.match_info["topic"])
    services.cache.forget(topic.name, topic.version + 1)
    services.stats.forget(topic.name)
    await services.store.delete_topic(topic.name, topic.partitions)
    await _forget_groups(services, topic.name)
    return web.Response(status=204)


async def _patch_dry_run(services: Services, current: TopicMetadata, changed: TopicMetadata,
                         partitions: int | None, retention: bool) -> web.Response:
    """The PATCH's answer had it run now, with ``dry_run`` and its impact."""
    impact = await patch_impact(services, current, changed, partitions, retention)
    after = changed if impact["growth"] is None else dataclasses.replace(
        changed, partitions=impact["growth"]["to"], growing_to=None)
    return json_response({**topic_document(after), "dry_run": True, "impact": impact})


def _require_unfiltered_admin(request: web.Request, action: str, reach: str) -> None:
    """Admin on the topic, and no forced header filter: ``action`` reaches ``reach``."""
    principal, gatekeeper = principal_of(request), gatekeeper_of(request)
    gatekeeper.require(principal, Action.ADMIN, request.match_info["topic"])
    gatekeeper.require_unfiltered(principal, action, reach)


async def _forget_groups(services: Services, topic: str) -> None:
    """Forget the group policies, filter bindings and schemas of a deleted topic."""
    for what, forget in (("policies", services.policies), ("bindings", services.group_bindings),
                         ("schemas", services.schema_registry),
                         ("push subscriptions", services.push_subscriptions)):
        if forget is None:
            continue
        try:
            await forget.forget_topic(topic)
        except PartitionerError as exc:
            # the topic is gone; stale entries only matter if the name is reused (bindings
            # carry the topic's creation time and are replaced then)
            log.warning("group %s of deleted topic %s not removed: %s", what, topic, exc)


def add_routes(app: web.Application) -> None:
    """Register the topic routes."""
    app.router.add_post("/v1/topics", create_topic)
    app.router.add_get("/v1/topics", list_topics)
    app.router.add_get("/v1/topics/{topic}", describe_topic)
    app.router.add_patch("/v1/topics/{topic}", update_topic)
    app.router.add_delete("/v1/topics/{topic}", delete_topic)
