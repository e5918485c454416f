"""Purging a topic, one partition of it, or its dead letters: admin-only, audited, in one call."""

from __future__ import annotations

import logging

from aiohttp import web

from gateway.auth.acl import Action
from gateway.auth.gatekeeper import gatekeeper_of, principal_of
from gateway.delivery.dead_letters import dlq_name
from gateway.errors import invalid_field
from gateway.publish.validation import reject_unknown_fields
from gateway.responses import json_response
from gateway.routes.bodies import optional_int, read_json_object
from gateway.services import services_of
from storage.models import PurgeReport

audit = logging.getLogger("streamgate.audit")

PURGE_FIELDS = frozenset({"partition"})


async def purge_topic(request: web.Request) -> web.Response:
    """POST /v1/topics/{topic}/purge {partition?} -> what went, per partition."""
    return await _purge(request, request.match_info["topic"])


async def purge_dead_letters(request: web.Request) -> web.Response:
    """POST /v1/topics/{topic}/dlq/purge {partition?}: the same on ``<topic>.dlq``, granted by
    admin on the topic (as a redrive is)."""
    return await _purge(request, dlq_name(request.match_info["topic"]))


async def _purge(request: web.Request, name: str) -> web.Response:
    services = services_of(request)
    principal = principal_of(request)
    gatekeeper_of(request).require(principal, Action.ADMIN, request.match_info["topic"])
    doc = await read_json_object(request) if request.can_read_body else {}
    reject_unknown_fields(doc, PURGE_FIELDS)
    partition = optional_int(doc, "partition", minimum=0)
    topic = await services.topic(name)
    if partition is not None and partition >= topic.partitions:
        raise invalid_field("/partition", f"{name} has partitions 0..{topic.partitions - 1}")
    partitions = range(topic.partitions) if partition is None else (partition,)
    reports = [await services.store.purge_partition(name, p) for p in partitions]
    removed = sum(report.removed + report.scheduled for report in reports)
    services.metrics.purges.labels(name).inc()
    services.metrics.purged.labels(name).inc(removed)
    audit.info("purge of %s partitions %s by %s: %d entries, %d scheduled removed; groups moved "
               "to the cut: %s", name, ",".join(str(p) for p in partitions), principal.name,
               sum(r.removed for r in reports), sum(r.scheduled for r in reports),
               ",".join(sorted({g for r in reports for g in r.groups})) or "none")
    return json_response({"topic": name, "purged": sum(r.removed for r in reports),
                          "scheduled": sum(r.scheduled for r in reports),
                          "partitions": [_partition_document(r) for r in reports]})


def _partition_document(report: PurgeReport) -> dict[str, object]:
    return {"partition": report.partition, "purged": report.removed,
            "scheduled": report.scheduled, "cut": report.cut}


def add_routes(app: web.Application) -> None:
    """Register the purge routes."""
    app.router.add_post("/v1/topics/{topic}/purge", purge_topic)
    app.router.add_post("/v1/topics/{topic}/dlq/purge", purge_dead_letters)
