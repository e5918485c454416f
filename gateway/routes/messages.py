"""Publishing to a topic and replaying a partition."""

from __future__ import annotations

from typing import Any, NamedTuple

import orjson
from aiohttp import web

from gateway._speedups import plain_results_json
from gateway.auth.acl import Action
from gateway.auth.errors import Forbidden
from gateway.auth.gatekeeper import Gatekeeper, gatekeeper_of, principal_of
from gateway.auth.principal import Principal
from gateway.delivery.filters import HeaderFilter
from gateway.documents import entry_document
from gateway.errors import (
    Problem,
    condition_failed,
    invalid_field,
    rate_limited,
    too_large,
    unavailable,
)
from gateway.observe.tracing import TRACEPARENT, incoming_context, publish_span, spans_on
from gateway.offsets import parse_offset, predecessor, successor
from gateway.publish.headers import stored_header_bytes
from gateway.publish.publisher import Published, PublishResult, place, principal_scope
from gateway.publish.validation import PublishBatch, parse_publish_body
from gateway.responses import json_response
from gateway.routes.admission import admit_or_refuse
from gateway.routes.bodies import read_body
from gateway.routes.tenancy import key_space_of
from gateway.services import Services, services_of
from gateway.throttle import RateAction
from partitioner.topics import TopicMetadata
from storage.errors import ConditionFailed
from storage.models import Acks, Appended, Conditions, ScheduledResult, StoredEntry

IDEMPOTENCY_HEADER = "Idempotency-Key"
# a validated body's acks; Acks(value) is a Python-level enum lookup
ACKS = {acks.value: acks for acks in Acks}
DEFAULT_REPLAY_LIMIT = 100


async def publish(request: web.Request) -> web.Response:
    """POST /v1/topics/{topic}/messages -> 200 with one result per message, or 202 for acks=0."""
    services, gatekeeper, principal = (services_of(request), gatekeeper_of(request),
                                       principal_of(request))
    name = request.match_info["topic"]
    gatekeeper.require(principal, Action.PUBLISH, name)
    # the cache first: no coroutine on a hit
    topic = services.cache.get(name) or await services.topic(name)
    try:
        response = await _publish_to(request, services, topic, gatekeeper, principal)
    except Exception:
        services.metrics.publish_requests.labels(topic.name, "error").inc()
        raise
    services.metrics.publish_requests.labels(topic.name, "ok").inc()
    return response


async def _publish_to(request: web.Request, services: Services, topic: TopicMetadata,
                      gatekeeper: Gatekeeper, principal: Principal) -> web.Response:
    # Content-Encoding gzip/zstd decoded
    body = await read_body(request, services.settings.max_batch_bytes)
    batch = parse_publish_body(body, services.limits, request.headers.get(IDEMPOTENCY_HEADER))
    if gatekeeper.forced_headers(principal):
        batch = batch.with_headers()
        gatekeeper.stamp(principal, batch.headers or ())
    incoming = incoming_context(request.headers) if TRACEPARENT in request.headers else None
    if spans_on():
        with publish_span(topic.name, len(batch), incoming) as context:
            return await _admit_and_write(request, services, topic, _traced(batch, context),
                                          gatekeeper, principal)
    return await _admit_and_write(request, services, topic, _traced(batch, incoming), gatekeeper,
                                  principal)


async def _admit_and_write(request: web.Request, services: Services, topic: TopicMetadata,
                           batch: PublishBatch, gatekeeper: Gatekeeper,
                           principal: Principal) -> web.Response:
    """The batch as stored, trace context included, within the header limits and charged to the
    bytes rate limit with its headers; then placed and written."""
    header_bytes = stored_header_bytes(batch, services.limits)
    throttled = ({} if services.throttle is None
                 else await _admit(request, services, topic, len(batch),
                                   batch.value_bytes + header_bytes))
    in_flight = services.publisher.in_flight
    # Counted before the partition count is read, and until written: a growth's pause waits for
    # every publish placed by the old count.
    in_flight.begin(topic.name)
    try:
        topic = services.cache.get(topic.name) or topic
        _refuse_while_growing(topic, services.settings.retry_after_s)
        return await _place_and_write(services, topic, batch, gatekeeper, principal, throttled)
    finally:
        in_flight.end(topic.name)


def _traced(batch: PublishBatch, context: dict[str, str] | None) -> PublishBatch:
    """The batch with the request's trace context on every message that has none of its own."""
    if not context:
        return batch
    if batch.headers is None:
        # one object for every message: the store encodes it once
        batch.headers = [context] * len(batch)
        return batch
    for headers in batch.headers:
        if TRACEPARENT not in headers:
            headers.update(context)
    return batch


async def _place_and_write(services: Services, topic: TopicMetadata, batch: PublishBatch,
                           gatekeeper: Gatekeeper, principal: Principal,
                           throttled: dict[str, str]) -> web.Response:
    """Place and write (or queue, for acks=0) a batch."""
    if topic.key_index and batch.due_ms is not None:
        index = next(i for i, due in enumerate(batch.due_ms) if due is not None)
        raise invalid_field(f"/messages/{index}", f"topic {topic.name!r} keeps key indexes: it "
                            "takes no delayed messages (they would join the stream outside them)")
    records = place(batch, topic, services.spreader, principal_scope(principal.name),
                    _key_space(gatekeeper, principal, topic, batch))
    metrics = services.metrics
    if batch.acks == "0":
        await services.publisher.enqueue_waiting(topic, records, batch.due_ms, batch.value_bytes)
        _count_heat(services, topic, records.partitions, records.keys)
        metrics.publish_messages.labels(topic.name, "accepted").inc(len(records))
        metrics.publish_bytes.labels(topic.name).inc(batch.value_bytes)
        return json_response({"accepted": len(records)}, status=202, headers=throttled)
    conditions = None
    if batch.conditional:
        if batch.expected_last_offset is not None:
            _refuse_filtered(gatekeeper, principal)
        conditions = _conditions(batch, topic, records.partitions)
    try:
        results = await services.publisher.publish(topic, records, ACKS[batch.acks],
                                                   batch.due_ms, conditions)
    except ConditionFailed as exc:
        # a publish-only caller learns nothing of positions it may not read
        raise condition_failed(exc, gatekeeper.may_see(principal, topic.name,
                                                       (Action.SUBSCRIBE,))) from None
    _count_heat(services, topic, records.partitions, records.keys)
    metrics.publish_messages.labels(topic.name, "written").inc(len(records))
    metrics.publish_bytes.labels(topic.name).inc(batch.value_bytes)
    return web.Response(body=results_json(results), content_type="application/json",
                        headers=throttled)


def _refuse_while_growing(topic: TopicMetadata, retry_after_s: float) -> None:
    """Publishes pause while a topic's partitions grow (placement changes at one cut)."""
    if topic.growing_to is not None:
        raise unavailable(f"topic {topic.name!r} is growing to {topic.growing_to} partitions; "
                          "publishes resume in a moment", min(retry_after_s, 1))


def _key_space(gatekeeper: Gatekeeper, principal: Principal, topic: TopicMetadata,
               batch: PublishBatch) -> bytes:
    """The key space a batch's keys reach: its writer's, on a topic that keeps key state."""
    if not topic.key_index or all(key is None for key in batch.keys):
        return b""
    return key_space_of(gatekeeper, principal, topic, "a keyed publish")


def _refuse_filtered(gatekeeper: Gatekeeper, principal: Principal) -> None:
    """A partition's position counts every tenant's messages: expecting one would tell a filtered
    principal of other tenants' writes, and let it block theirs. Refused (a key's position is
    its own tenant's: ``expected_offset`` is checked in its key space)."""
    if gatekeeper.forced_headers(principal):
        raise Forbidden(f"{principal.name!r} writes through a forced header filter; "
                        "'expected_last_offset' is not available to it: a partition's position "
                        "counts other tenants' messages")


def _conditions(batch: PublishBatch, topic: TopicMetadata, partitions: list[int]) -> Conditions:
    """A conditional batch's expectations, once it is known to be checkable: one partition, and
    key expectations only where the topic keeps key indexes."""
    if len(set(partitions)) > 1:
        raise invalid_field("/messages", "a conditional append must put all its messages in one "
                            f"partition; these go to partitions {sorted(set(partitions))}")
    if batch.expected_offsets is not None and not topic.key_index:
        index = next(i for i, e in enumerate(batch.expected_offsets) if e is not None)
        raise invalid_field(f"/messages/{index}/expected_offset",
                            f"topic {topic.name!r} keeps no key index (create it with "
                            "\"key_index\": true): only 'expected_last_offset' can be checked")
    return Conditions(batch.expected_last_offset, batch.expected_offsets)


def results_json(results: Published) -> bytes:
    """The publish response: one result per message, in the columns' one encoding call when it
    can."""
    if isinstance(results, Appended) and results.duplicates is None:
        return plain_results_json(results.partitions, results.offsets)
    return orjson.dumps({"results": [result_document(r) for r in results]})


def _count_heat(services: Services, topic: TopicMetadata, partitions: list[int],
                keys: list[bytes | None]) -> None:
    """The hot-partition statistics count a batch once it is written (acks 1/all) or queued (acks
    0): a refused or failed publish (429, 503...) is no traffic."""
    services.stats.record(topic.name, partitions, keys)


async def _admit(request: web.Request, services: Services, topic: TopicMetadata, messages: int,
                 size_bytes: int) -> dict[str, str]:
    """Charge the rate limits (429 when refused, 413 when the request can never fit); the headers to
    send."""
    if services.throttle is None:
        return {}
    decision = await services.throttle.admit_publish(principal_of(request), topic.name, messages,
                                                     size_bytes)
    if decision.allowed:
        return dict(decision.headers)
    services.metrics.rate_limited.labels(topic.name, decision.limit).inc()
    services.metrics.ratelimit_refused.labels(RateAction.PUBLISH.value, decision.limit).inc()
    if decision.retry_after_s == 0:
        raise too_large(decision.reason)
    raise rate_limited(decision.reason, decision.retry_after_s, dict(decision.headers))


# what the dedup key holds while an idempotent message still waits in the schedule
SCHEDULED_MARK = "s:"


def result_document(result: PublishResult) -> dict[str, Any]:
    """One publish result: where it landed, or where it waits (``scheduled_id``,
    ``deliver_at_ms``)."""
    if isinstance(result, ScheduledResult):
        return {"partition": result.partition, "offset": result.offset,
                "duplicate": result.duplicate, "scheduled_id": result.schedule_id or None,
                "deliver_at_ms": result.due_ms}
    # an idempotent retry of a message that is still scheduled
    if result.offset.startswith(SCHEDULED_MARK):
        return {"partition": result.partition, "offset": None, "duplicate": result.duplicate,
                "scheduled_id": result.offset.removeprefix(SCHEDULED_MARK)}
    return {"partition": result.partition, "offset": result.offset, "duplicate": result.duplicate}


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
    """GET /v1/topics/{topic}/partitions/{p}/messages?from=&from_time_ms=&limit= -> messages,
    next_offset."""
    services, topic, visible, limited = await reader_of(request)
    partition = partition_param(request.match_info["partition"], topic)
    limit = int_param(request, "limit", 1,
                       services.settings.max_replay_limit) or DEFAULT_REPLAY_LIMIT
    start = request.query.get("from", "earliest")
    from_time_ms = int_param(request, "from_time_ms", 0, 2**63 - 1)
    if from_time_ms is not None and start != "earliest":
        raise invalid_field("/from_time_ms", "'from_time_ms' cannot be combined with 'from'")
    if start == "latest":
        last = await services.store.last_offset(topic.name, partition)
        return json_response({"messages": [],
                              "next_offset": "0-0" if last is None else successor(last)},
                             headers=limited)
    after = None if start == "earliest" else _after(start)
    entries = await _read(services, topic, partition, after, from_time_ms, limit)
    next_offset = (successor(entries[-1].offset) if entries
                   else ("0-0" if start == "earliest" else start))
    if not entries and from_time_ms is not None:
        next_offset = f"{from_time_ms}-0"
    # A forced filter hides other tenants' messages; next_offset still moves past them, so pages may
    # be short.
    return json_response({"messages": [entry_document(e) for e in entries
                                       if visible.matches(e.headers)],
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
