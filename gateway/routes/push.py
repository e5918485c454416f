"""Push subscriptions: a consumer group whose member is an HTTP endpoint, fed by the gateway owning
each partition (docs/push.md); defined, shown, rotated and deleted here."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

import orjson
from aiohttp import web

from gateway.auth.acl import Action
from gateway.auth.errors import Forbidden
from gateway.auth.gatekeeper import gatekeeper_of, principal_of
from gateway.delivery.params import GROUP_NAME
from gateway.delivery.pause_gate import pause_fields
from gateway.errors import Problem, invalid_field, unavailable
from gateway.push.definition import (
    PushDefinition,
    make_secret,
    parse_definition,
    parse_rotation,
    rotated,
)
from gateway.responses import json_response
from gateway.routes.admission import admit_group
from gateway.routes.bodies import read_json_object
from gateway.routes.tenancy import bind_group
from gateway.services import Services, services_of
from partitioner.push_subscriptions import PushSubscriptions
from partitioner.topics import TopicMetadata
from storage.errors import StorageError


def _now_ms() -> int:
    return int(time.time() * 1000)


def _store(services: Services) -> PushSubscriptions:
    store = services.push_subscriptions
    if store is None:
        raise unavailable("push subscriptions are not available on this gateway",
                          services.settings.retry_after_s)
    return store


def not_found(topic: str, group: str) -> Problem:
    """404: no push subscription of that group on that topic."""
    return Problem(404, "push-subscription-not-found", "Push subscription not found",
                   f"group {group!r} of topic {topic!r} has no push subscription")


async def _target(request: web.Request, with_group: bool = True) -> tuple[TopicMetadata, str]:
    """The topic (and group) of the path once the caller may administer and read the topic
    (403 before 404)."""
    name, group = request.match_info["topic"], request.match_info.get("group", "")
    if with_group and not GROUP_NAME.fullmatch(group):
        raise invalid_field("/group", "'group' must match [A-Za-z0-9._-]{1,200}")
    principal, gatekeeper = principal_of(request), gatekeeper_of(request)
    for action in (Action.ADMIN, Action.SUBSCRIBE):
        gatekeeper.require(principal, action, name, group or None)
    return await services_of(request).topic(name), group


def _current(doc: dict[str, Any] | None, topic: TopicMetadata) -> PushDefinition | None:
    """The stored definition when it is this topic's (not one a deleted namesake left)."""
    if doc is None:
        return None
    try:
        definition = PushDefinition.from_doc(doc)
    except (KeyError, TypeError, ValueError, AttributeError):
        return None
    return definition if definition.topic_created_at_ms == topic.created_at_ms else None


def _require_own(request: web.Request, definition: PushDefinition) -> None:
    """403 unless the caller reads through the filter the subscription was made under."""
    forced = gatekeeper_of(request).forced_headers(principal_of(request))
    if dict(forced) != dict(definition.forced_filter):
        raise Forbidden(f"push subscription of group {definition.group!r} was made under "
                        "another forced header filter")


async def put_push(request: web.Request) -> web.Response:
    """PUT /v1/topics/{topic}/push/{group}: create or replace the group's push subscription."""
    topic, group = await _target(request)
    services = services_of(request)
    store = _store(services)
    doc = await read_json_object(request)
    asked, brought = parse_definition(doc, topic.name, group, services.push_policy)
    principal, gatekeeper = principal_of(request), gatekeeper_of(request)
    existing = _current(await store.read(topic.name, group), topic)
    if existing is not None:
        _require_own(request, existing)
    elif store.count() >= services.settings.push_max_subscriptions:
        raise Problem(409, "too-many-push-subscriptions", "Too many push subscriptions",
                      f"the cluster holds {services.settings.push_max_subscriptions} push "
                      "subscriptions (push_max_subscriptions): delete one first")
    await admit_group(services, principal, topic.name, group)
    await bind_group(services, gatekeeper, principal, topic, group)
    now = _now_ms()
    definition, new_secret = _replacing(existing, asked, brought, now) if existing else \
        _created(asked, brought, now, principal.name, topic, gatekeeper.forced_headers(principal))
    written = await store.update(topic.name, group, lambda _: definition.to_doc())
    if written is None:  # pragma: no cover - update only deletes when asked to
        raise not_found(topic.name, group)
    services.note_group_policy(topic.name, group, definition.ack_timeout_ms,
                               definition.max_deliveries, definition.retry_backoff)
    body = _view(services, definition, now)
    if new_secret is not None:
        body["secret"] = new_secret
    return json_response(body, status=200 if existing else 201)


def _created(asked: PushDefinition, brought: str | None, now: int, creator: str,
             topic: TopicMetadata, forced: Any) -> tuple[PushDefinition, str]:
    secret = make_secret(brought, now)
    return replace(asked, secrets=(secret,), created_by=creator, created_at_ms=now,
                   updated_at_ms=now, topic_created_at_ms=topic.created_at_ms,
                   forced_filter=dict(forced)), secret.value


def _replacing(existing: PushDefinition, asked: PushDefinition, brought: str | None,
               now: int) -> tuple[PushDefinition, str | None]:
    """``asked`` in place of ``existing``, keeping its secrets and origin; a brought secret that is
    not live yet rotates in (the old one signs beside it for a day)."""
    kept = replace(asked, secrets=existing.secrets, created_by=existing.created_by,
                   created_at_ms=existing.created_at_ms, updated_at_ms=now,
                   topic_created_at_ms=existing.topic_created_at_ms,
                   forced_filter=existing.forced_filter)
    if brought is None or any(s.value == brought and s.live(now) for s in existing.secrets):
        return kept, None
    definition, secret = rotated(kept, brought, 86_400, now)
    return definition, secret.value


async def get_push(request: web.Request) -> web.Response:
    """GET /v1/topics/{topic}/push/{group}: the definition (no secret) and its endpoint's
    health as the partitions' owners last posted it."""
    topic, group = await _target(request)
    services = services_of(request)
    definition = _current(await _store(services).read(topic.name, group), topic)
    if definition is None:
        raise not_found(topic.name, group)
    _require_own(request, definition)
    body = _view(services, definition, _now_ms())
    body["health"] = await _health(services, topic, group)
    return json_response(body)


async def list_push(request: web.Request) -> web.Response:
    """GET /v1/topics/{topic}/push: the topic's push subscriptions the caller may see."""
    topic, _ = await _target(request, with_group=False)
    services = services_of(request)
    forced = dict(gatekeeper_of(request).forced_headers(principal_of(request)))
    now = _now_ms()
    found = [definition for (name, _), doc in sorted(_store(services).all().items())
             if name == topic.name and (definition := _current(doc, topic)) is not None
             and dict(definition.forced_filter) == forced]
    return json_response({"subscriptions": [_view(services, d, now) for d in found]})


async def delete_push(request: web.Request) -> web.Response:
    """DELETE /v1/topics/{topic}/push/{group}: stop pushing (the group and its state stay)."""
    topic, group = await _target(request)
    store = _store(services_of(request))
    definition = _current(await store.read(topic.name, group), topic)
    if definition is None:
        raise not_found(topic.name, group)
    _require_own(request, definition)
    await store.delete(topic.name, group)
    return web.Response(status=204)


async def rotate_secret(request: web.Request) -> web.Response:
    """POST /v1/topics/{topic}/push/{group}/rotate-secret: a new signing secret; the newest old
    one keeps signing beside it for ``previous_expires_in_s``."""
    topic, group = await _target(request)
    services = services_of(request)
    store = _store(services)
    value, keep_s = parse_rotation(await read_json_object(request) if request.body_exists else {})
    now = _now_ms()
    made: list[str] = []

    def change(doc: dict[str, Any] | None) -> dict[str, Any] | None:
        definition = _current(doc, topic)
        if definition is None:
            raise not_found(topic.name, group)
        _require_own(request, definition)
        definition, secret = rotated(definition, value, keep_s, now)
        made[:] = [secret.value]
        return definition.to_doc()

    written = await store.update(topic.name, group, change)
    assert written is not None
    secrets = PushDefinition.from_doc(written).view(now)["secrets"]
    return json_response({"topic": topic.name, "group": group, "secret": made[0],
                          "secrets": secrets})


def _view(services: Services, definition: PushDefinition, now: int) -> dict[str, Any]:
    pauses = None if services.delivery is None else services.delivery.pauses
    pause = None if pauses is None else pauses.pause_of(definition.topic, definition.group)
    return definition.view(now) | pause_fields(pause)


async def _health(services: Services, topic: TopicMetadata, group: str) -> dict[str, Any]:
    """Each partition's endpoint health from its owner's posted verdict (null: none lately) and
    a summary: ``open`` when some breaker holds requests back, ``failing`` when some partition's
    last requests failed, ``healthy``, or ``unknown`` when no owner posted."""
    partitions: dict[str, Any] = {}
    for partition in range(topic.partitions):
        raw = None
        if services.verdicts is not None:
            try:
                raw = await services.verdicts.read(topic.name, partition, group)
            except StorageError:
                raw = None
        partitions[str(partition)] = None if raw is None else orjson.loads(raw).get("push")
    known = [h for h in partitions.values() if h is not None]
    state = ("unknown" if not known
             else "open" if any(h["breaker"] != "closed" for h in known)
             else "failing" if any(h["consecutive_failures"] for h in known)
             else "healthy")
    return {"state": state, "partitions": partitions}


def add_routes(app: web.Application) -> None:
    """Register the push subscription routes."""
    app.router.add_get("/v1/topics/{topic}/push", list_push)
    app.router.add_put("/v1/topics/{topic}/push/{group}", put_push)
    app.router.add_get("/v1/topics/{topic}/push/{group}", get_push)
    app.router.add_delete("/v1/topics/{topic}/push/{group}", delete_push)
    app.router.add_post("/v1/topics/{topic}/push/{group}/rotate-secret", rotate_secret)
