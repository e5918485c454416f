"""Pausing and resuming a consumer group on a topic: no delivery to any member on any gateway
while paused, everything else (members, assignments, positions, pending entries) kept."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from gateway.auth.acl import Action
from gateway.auth.gatekeeper import gatekeeper_of, principal_of
from gateway.delivery.params import GROUP_NAME
from gateway.delivery.pause_gate import PauseGate, pause_fields
from gateway.errors import invalid_field, unavailable
from gateway.publish.validation import reject_unknown_fields
from gateway.responses import json_response
from gateway.routes.bodies import optional_int, read_json_object
from gateway.routes.tenancy import require_own_group
from gateway.services import Services, services_of
from partitioner.group_pause import now_ms
from partitioner.topics import TopicMetadata

PAUSE_FIELDS = frozenset({"until_ms"})
MAX_UNTIL_MS = 253_402_300_799_999  # the last millisecond of the year 9999


def _pauses_of(services: Services) -> PauseGate:
    """The gateway's paused groups; 503 where they cannot be changed (no etcd)."""
    pauses = None if services.delivery is None else services.delivery.pauses
    if pauses is None or not pauses.writable:
        raise unavailable("pausing groups is not available on this gateway",
                          services.settings.retry_after_s)
    return pauses


async def _admin_target(request: web.Request, what: str) -> tuple[TopicMetadata, str]:
    """The group and the ``?topic=`` it is paused on, once the caller may administer the topic
    (403 before 404) and, when filtered, the group is bound to its own filter."""
    group = request.match_info["group"]
    if not GROUP_NAME.fullmatch(group):
        raise invalid_field("/group", "'group' must match [A-Za-z0-9._-]{1,200}")
    name = request.query.get("topic")
    if not name:
        raise invalid_field("/topic", "the 'topic' query parameter is required")
    principal, gatekeeper = principal_of(request), gatekeeper_of(request)
    gatekeeper.require(principal, Action.ADMIN, name, group)
    services = services_of(request)
    topic = await services.topic(name)
    await require_own_group(services, gatekeeper, principal, topic, group, what)
    return topic, group


def _until_ms(doc: dict[str, Any]) -> int | None:
    """The optional automatic resume time; 422 when it has passed already (or is past 9999)."""
    until_ms = optional_int(doc, "until_ms")
    if until_ms is not None and not now_ms() < until_ms <= MAX_UNTIL_MS:
        raise invalid_field("/until_ms", "'until_ms' must be in the future (epoch milliseconds, "
                                         "at most 253402300799999)")
    return until_ms


async def pause_group(request: web.Request) -> web.Response:
    """POST /v1/groups/{group}/pause?topic= {until_ms?}: stop every delivery of the group."""
    topic, group = await _admin_target(request, "a pause")
    doc = await read_json_object(request) if request.body_exists else {}
    reject_unknown_fields(doc, PAUSE_FIELDS)
    pause = await _pauses_of(services_of(request)).pause(topic.name, group, _until_ms(doc),
                                                         topic.created_at_ms)
    return json_response({"topic": topic.name, "group": group, **pause_fields(pause)})


async def resume_group(request: web.Request) -> web.Response:
    """POST /v1/groups/{group}/resume?topic=: deliveries go on from where they stopped."""
    topic, group = await _admin_target(request, "a resume")
    await _pauses_of(services_of(request)).resume(topic.name, group)
    return json_response({"topic": topic.name, "group": group, **pause_fields(None)})


def add_routes(app: web.Application) -> None:
    """Register the pause routes."""
    app.router.add_post("/v1/groups/{group}/pause", pause_group)
    app.router.add_post("/v1/groups/{group}/resume", resume_group)
