"""Publishing to a topic and replaying a partition."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import NamedTuple

from aiohttp import web

from gateway.auth.acl import Action
from gateway.auth.gatekeeper import gatekeeper_of, principal_of
from gateway.cloudevents import accepts_batch, batch_response
from gateway.delivery.filters import HeaderFilter
from gateway.errors import (
    Problem,
    invalid_field,
)
from gateway.observe.tracing import TRACEPARENT, incoming_context
from gateway.offsets import parse_offset, predecessor, successor
from gateway.publish.cloudevents import Mode, event_pointer, mode_of, parse_events
from gateway.publish.flow import publish_batch
from gateway.publish.validation import PublishBatch, parse_publish_body
from gateway.responses import json_response
from gateway.routes.admission import admit_or_refuse
from gateway.routes.bodies import read_body
from gateway.routes.dry_runs import dry_run
from gateway.routes.schema_reads import (
    ReadingVersion,
    message_documents,
    message_events,
    reading_version,
)
from gateway.services import Services, services_of
from gateway.throttle import RateAction
from partitioner.topics import TopicMetadata
from storage.models import StoredEntry

IDEMPOTENCY_HEADER = "Idempotency-Key"
DEFAULT_REPLAY_LIMIT = 100
# a CloudEvents page is a bare array of events: where it reads on from
NEXT_OFFSET_HEADER = "SG-Next-Offset"


async def publish(request: web.Request) -> web.Response:
    """POST /v1/topics/{topic}/messages -> 200 with one result per message, or 202 for acks=0; a
    CloudEvents request (structured, batched or binary mode) publishes its events. With
    ``?dry_run=true``: every check, nothing written, 200 with where each message would go."""
    services = services_of(request)
    mode = mode_of(request.headers)
    if mode is not None:
        return await _publish_events(request, services, mode)

    async def read_batch() -> PublishBatch:
        # Content-Encoding gzip/zstd decoded
        body = await read_body(request, services.settings.max_batch_bytes)
        return parse_publish_body(body, services.limits, request.headers.get(IDEMPOTENCY_HEADER))

    return await _publish_read(request, services, read_batch)


async def _publish_events(request: web.Request, services: Services, mode: Mode) -> web.Response:
    """A CloudEvents publish; refusals point into the events sent."""

    async def read_batch() -> PublishBatch:
        body = await read_body(request, services.settings.max_batch_bytes)
        return parse_events(mode, body, request.headers, services.limits)

    try:
        return await _publish_read(request, services, read_batch)
    except Problem as exc:
        exc.pointer = event_pointer(exc.pointer, mode)
        raise


async def _publish_read(request: web.Request, services: Services,
                        read_batch: Callable[[], Awaitable[PublishBatch]]) -> web.Response:
    incoming = incoming_context(request.headers) if TRACEPARENT in request.headers else None
    answer = await publish_batch(services, gatekeeper_of(request), principal_of(request),
                                 request.match_info["topic"], read_batch, incoming,
                                 dry_run=dry_run(request))
    return web.Response(status=answer.status, body=answer.body, content_type="application/json",
                        headers=answer.headers)


class Reader(NamedTuple):
    """What a read of a topic's messages runs with: the services, the topic, what the caller may
    see of it, and the rate-limit headers to answer with."""

    services: Services
    topic: TopicMetadata
    visible: HeaderFilter
    limited: dict[str, str]


async def reader_of(request: web.Request) -> Reader:
    """A read of the request's topic by its caller: may subscribe, is charged a read, sees only
    what its forced header filter lets through."""
    services, principal, gatekeeper = (services_of(request), principal_of(request),
                                       gatekeeper_of(request))
    gatekeeper.require(principal, Action.SUBSCRIBE, request.match_info["topic"])
    limited = await admit_or_refuse(services, principal, RateAction.READ)
    visible = HeaderFilter().and_headers(gatekeeper.forced_headers(principal))
    return Reader(services, await services.topic(request.match_info["topic"]), visible, limited)


async def replay(request: web.Request) -> web.Response:
    """GET /v1/topics/{topic}/partitions/{p}/messages?from=&from_time_ms=&limit=&schema_version=
    -> messages (at the schema version, if asked), next_offset."""
    services, topic, visible, limited = await reader_of(request)
    partition = partition_param(request.match_info["partition"], topic)
    reading = reading_version(request, services, topic)
    limit = int_param(request, "limit", 1,
                       services.settings.max_replay_limit) or DEFAULT_REPLAY_LIMIT
    start = request.query.get("from", "earliest")
    from_time_ms = int_param(request, "from_time_ms", 0, 2**63 - 1)
    if from_time_ms is not None and start != "earliest":
        raise invalid_field("/from_time_ms", "'from_time_ms' cannot be combined with 'from'")
    if start == "latest":
        last = await services.store.last_offset(topic.name, partition)
        return _page(request, topic, [], "0-0" if last is None else successor(last), limited,
                     reading)
    after = None if start == "earliest" else _after(start)
    entries = await _read(services, topic, partition, after, from_time_ms, limit)
    next_offset = (successor(entries[-1].offset) if entries
                   else ("0-0" if start == "earliest" else start))
    if not entries and from_time_ms is not None:
        next_offset = f"{from_time_ms}-0"
    # A forced filter hides other tenants' messages; next_offset still moves past them, so pages may
    # be short.
    return _page(request, topic, [e for e in entries if visible.matches(e.headers)], next_offset,
                 limited, reading)


def _page(request: web.Request, topic: TopicMetadata, entries: list[StoredEntry],
          next_offset: str, limited: dict[str, str],
          reading: ReadingVersion | None = None) -> web.Response:
    """A page of replay: messages and next_offset, or a CloudEvents batch when the request
    accepts one (next_offset then in a header); either at the schema version asked for, if
    any."""
    if accepts_batch(request):
        return batch_response(message_events(entries, topic, reading),
                              {**limited, NEXT_OFFSET_HEADER: next_offset})
    return json_response({"messages": message_documents(entries, topic, reading),
                          "next_offset": next_offset}, headers=limited)


async def _read(services: Services, topic: TopicMetadata, partition: int, after: str | None,
                from_time_ms: int | None, limit: int) -> list[StoredEntry]:
    return await services.store.read(topic.name, partition, after=after, from_time_ms=from_time_ms,
                                     limit=limit)


def _after(start: str) -> str | None:
    """``from`` is inclusive; storage reads strictly after an offset, so step back by one ID."""
    parse_offset(start, "/from")
    return predecessor(start)


def partition_param(raw: str, topic: TopicMetadata) -> int:
    if not (raw.isascii() and raw.isdigit()) or int(raw) >= topic.partitions:
        raise Problem(404, "partition-not-found", "Partition not found",
                      f"topic {topic.name!r} has partitions 0..{topic.partitions - 1}, not {raw!r}")
    return int(raw)


def int_param(request: web.Request, name: str, low: int, high: int) -> int | None:
    raw = request.query.get(name)
    if raw is None:
        return None
    if not (raw.isascii() and raw.isdigit()) or not low <= int(raw) <= high:
        raise invalid_field(f"/{name}", f"'{name}' must be an integer between {low} and {high}")
    return int(raw)


def add_routes(app: web.Application) -> None:
    """Register the publish and replay routes."""
    app.router.add_post("/v1/topics/{topic}/messages", publish)
    app.router.add_get("/v1/topics/{topic}/partitions/{partition}/messages", replay)
