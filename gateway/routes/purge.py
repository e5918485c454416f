"""Admin over a topic's stored messages: purging the topic, one partition of it or its dead letters
(audited, in one call), and redriving dead letters to the topic."""

from __future__ import annotations

import logging
from typing import Any

from aiohttp import web

from gateway.auth.acl import Action
from gateway.auth.gatekeeper import gatekeeper_of, principal_of
from gateway.delivery.dead_letters import dlq_name
from gateway.delivery.redrive import redrive, redrive_one
from gateway.errors import Problem, invalid_field
from gateway.offsets import parse_offset
from gateway.publish.validation import reject_unknown_fields
from gateway.responses import json_response
from gateway.routes.bodies import bounded_int, optional_int, read_json_object
from gateway.routes.dry_runs import dry_run, letter_waiting, purge_impact, redrive_impact
from gateway.routes.groups import puller_of
from gateway.routes.tenancy import letter_spaces
from gateway.services import services_of
from partitioner.topics import TopicMetadata
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
    gatekeeper = gatekeeper_of(request)
    gatekeeper.require(principal, Action.ADMIN, request.match_info["topic"])
    gatekeeper.require_unfiltered(principal, f"a purge of {name}", "every tenant's messages")
    doc = await read_json_object(request) if request.can_read_body else {}
    reject_unknown_fields(doc, PURGE_FIELDS)
    partition = optional_int(doc, "partition", minimum=0)
    topic = await services.topic(name)
    if partition is not None and partition >= topic.partitions:
        raise invalid_field("/partition", f"{name} has partitions 0..{topic.partitions - 1}")
    partitions = range(topic.partitions) if partition is None else (partition,)
    if dry_run(request):
        return json_response(await purge_impact(services, name, partitions))
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


REDRIVE_FIELDS = frozenset({"max_messages", "rate_per_s", "partition", "offset"})


async def redrive_dead_letters(request: web.Request) -> web.Response:
    """POST /v1/topics/{topic}/dlq/redrive {max_messages?, rate_per_s?} or {partition, offset}
    (one letter) -> {"redriven": n}. A filtered principal redrives one letter of its own tenant at
    a time."""
    services, principal, gatekeeper = (services_of(request), principal_of(request),
                                       gatekeeper_of(request))
    gatekeeper.require(principal, Action.ADMIN, request.match_info["topic"])
    doc = await read_json_object(request) if request.can_read_body else {}
    reject_unknown_fields(doc, REDRIVE_FIELDS)
    one = _one_letter(doc)
    if one is None:
        gatekeeper.require_unfiltered(principal, "a redrive of many letters",
                                      "every tenant's dead letters")
    source = await services.topic(request.match_info["topic"])
    dlq = await services.topic(dlq_name(source.name))
    if one is not None:
        return await _redrive_one_letter(request, source, dlq, *one)
    max_messages = bounded_int(doc, "max_messages", 1000, 1, 100_000)
    rate_per_s = bounded_int(doc, "rate_per_s", 1000, 1, 100_000)
    groups = puller_of(services).store
    if dry_run(request):
        return json_response(await redrive_impact(services, dlq, max_messages))
    moved = await redrive(services.store, groups, source, dlq,
                          max_messages=max_messages, rate_per_s=rate_per_s,
                          dedup_ttl_ms=services.settings.dedup_ttl_ms,
                          space_of=letter_spaces(gatekeeper, principal, source))
    return json_response({"redriven": moved})


async def _redrive_one_letter(request: web.Request, source: TopicMetadata, dlq: TopicMetadata,
                              partition: int, offset: str) -> web.Response:
    """One letter back; 404 when there is none there, or none the caller's filter lets through."""
    services, gatekeeper, principal = (services_of(request), gatekeeper_of(request),
                                       principal_of(request))
    required = gatekeeper.forced_headers(principal)
    if dry_run(request):
        if not await letter_waiting(services, dlq, partition, offset, required):
            raise _no_letter(dlq, partition, offset)
        return json_response({"redriven": 1, "dry_run": True})
    if partition >= dlq.partitions or not await redrive_one(
            services.store, source, dlq, partition, offset, services.settings.dedup_ttl_ms,
            required, letter_spaces(gatekeeper, principal, source)):
        raise _no_letter(dlq, partition, offset)
    return json_response({"redriven": 1})


def _no_letter(dlq: TopicMetadata, partition: int, offset: str) -> Problem:
    return Problem(404, "dead-letter-not-found", "Dead letter not found",
                   f"{dlq.name} has no letter at {partition}:{offset} (never, or it was "
                   "redriven)")


def _one_letter(doc: dict[str, Any]) -> tuple[int, str] | None:
    """The (partition, offset) of a redrive of one letter; None for a redrive of many."""
    if "partition" not in doc and "offset" not in doc:
        return None
    if "max_messages" in doc or "rate_per_s" in doc:
        raise invalid_field("/partition", "a redrive names one letter (partition and offset) or "
                                          "sets max_messages/rate_per_s, not both")
    partition = optional_int(doc, "partition", minimum=0)
    offset = doc.get("offset")
    if partition is None or not isinstance(offset, str):
        raise invalid_field("/offset" if partition is not None else "/partition",
                            "one letter needs both 'partition' (an integer) and 'offset'")
    parse_offset(offset, "/offset")
    return partition, offset


def add_routes(app: web.Application) -> None:
    """Register the purge and redrive routes."""
    app.router.add_post("/v1/topics/{topic}/purge", purge_topic)
    app.router.add_post("/v1/topics/{topic}/dlq/purge", purge_dead_letters)
    app.router.add_post("/v1/topics/{topic}/dlq/redrive", redrive_dead_letters)
