"""One publish, whatever brought it (an HTTP request or a WebSocket frame): the ACL, forced tenant
headers, the topic's schema, trace context, rate limits, placement and the write, answered as the
JSON body HTTP sends; errors raise (``gateway.errors`` maps them)."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any, NamedTuple

import orjson

from gateway._speedups import plain_results_json
from gateway.auth.acl import Action
from gateway.auth.errors import Forbidden
from gateway.auth.gatekeeper import Gatekeeper
from gateway.auth.principal import Principal
from gateway.errors import (
    condition_failed,
    invalid_field,
    rate_limited,
    too_large,
    unavailable,
)
from gateway.observe.tracing import TRACEPARENT, publish_span, spans_on
from gateway.publish.headers import stored_header_bytes
from gateway.publish.publisher import Published, PublishResult, place, principal_scope
from gateway.publish.validation import PublishBatch
from gateway.routes.tenancy import key_space_of
from gateway.services import Services
from gateway.throttle import RateAction
from partitioner.topics import TopicMetadata
from storage.errors import ConditionFailed
from storage.models import Acks, Appended, Conditions, ScheduledResult

# a validated body's acks; Acks(value) is a Python-level enum lookup
ACKS = {acks.value: acks for acks in Acks}
NO_HEADERS: dict[str, str] = {}


class PublishAnswer(NamedTuple):
    """A publish's outcome as HTTP answers it: 200 with results or 202 (acks=0), the JSON body,
    and the rate-limit headers."""

    status: int
    body: bytes
    headers: dict[str, str]


Placed = Callable[[], None]  # told right before the write is queued, with no await in between


async def publish_batch(services: Services, gatekeeper: Gatekeeper, principal: Principal,
                        name: str, read_batch: Callable[[], Awaitable[PublishBatch]],
                        incoming: dict[str, str] | None,
                        placed: Placed | None = None) -> PublishAnswer:
    """Publish the batch ``read_batch`` reads and validates (once the caller may publish to topic
    ``name`` and it exists) for ``principal``, with the caller's trace context ``incoming``;
    ``placed``, when given, is called once the batch passed every check, just before its write
    is queued (a connection orders its frames by it)."""
    gatekeeper.require(principal, Action.PUBLISH, name)
    # the cache first: no coroutine on a hit
    topic = services.cache.get(name) or await services.topic(name)
    try:
        batch = _stamped(gatekeeper, principal, await read_batch())
        if services.schema_gate is not None:
            # before any limit is charged: a refused batch costs the caller nothing
            services.schema_gate.check(topic, batch)
        if spans_on():
            with publish_span(topic.name, len(batch), incoming) as context:
                answer = await _admit_and_write(services, topic, _traced(batch, context),
                                                gatekeeper, principal, placed)
        else:
            answer = await _admit_and_write(services, topic, _traced(batch, incoming),
                                            gatekeeper, principal, placed)
    except Exception:
        services.metrics.publish_requests.labels(topic.name, "error").inc()
        raise
    services.metrics.publish_requests.labels(topic.name, "ok").inc()
    return answer


def _stamped(gatekeeper: Gatekeeper, principal: Principal, batch: PublishBatch) -> PublishBatch:
    """The batch with the principal's forced tenant headers on every message."""
    if gatekeeper.forced_headers(principal):
        batch = batch.with_headers()
        gatekeeper.stamp(principal, batch.headers or ())
    return batch


async def _admit_and_write(services: Services, topic: TopicMetadata, batch: PublishBatch,
                           gatekeeper: Gatekeeper, principal: Principal,
                           placed: Placed | None) -> PublishAnswer:
    """The batch as stored, trace context included, within the header limits and charged to the
    bytes rate limit with its headers; then placed and written."""
    header_bytes = stored_header_bytes(batch, services.limits)
    throttled = ({} if services.throttle is None
                 else await _admit(services, principal, topic, len(batch),
                                   batch.value_bytes + header_bytes))
    retained = (None if services.retained_quota is None
                else await _admit_retained(services, principal, topic, batch, header_bytes))
    in_flight = services.publisher.in_flight
    # Counted before the partition count is read, and until written: a growth's pause waits for
    # every publish placed by the old count.
    in_flight.begin(topic.name)
    try:
        topic = services.cache.get(topic.name) or topic
        _refuse_while_growing(topic, services.settings.retry_after_s)
        answer = await _place_and_write(services, topic, batch, gatekeeper, principal, throttled,
                                        placed)
    finally:
        in_flight.end(topic.name)
    if retained is not None:
        retained()
    return answer


async def _admit_retained(services: Services, principal: Principal, topic: TopicMetadata,
                          batch: PublishBatch, header_bytes: int) -> Callable[[], None] | None:
    """Admit the batch's stored bytes (keys, values, headers) against the caller's retained-bytes
    quota (507 past it); what charges them once written or queued (None: no cap)."""
    quota, subject = services.retained_quota, services.quota_rules.subject_for(principal)
    if quota is None or subject.retained_bytes is None:
        return None
    nbytes = batch.value_bytes + header_bytes + sum(len(key) for key in batch.keys if key)
    await quota.admit(subject, topic, nbytes)
    return functools.partial(quota.charge, subject, topic, nbytes)


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
                           throttled: dict[str, str], placed: Placed | None) -> PublishAnswer:
    """Place and write (or queue, for acks=0) a batch."""
    if topic.key_index and batch.due_ms is not None:
        index = next(i for i, due in enumerate(batch.due_ms) if due is not None)
        raise invalid_field(f"/messages/{index}", f"topic {topic.name!r} keeps key indexes: it "
                            "takes no delayed messages (they would join the stream outside them)")
    records = place(batch, topic, services.spreader, principal_scope(principal.name),
                    _key_space(gatekeeper, principal, topic, batch))
    metrics = services.metrics
    if batch.acks == "0":
        if placed is not None:
            placed()
        await services.publisher.enqueue_waiting(topic, records, batch.due_ms, batch.value_bytes)
        _count_heat(services, topic, records.partitions, records.keys)
        metrics.publish_messages.labels(topic.name, "accepted").inc(len(records))
        metrics.publish_bytes.labels(topic.name).inc(batch.value_bytes)
        return PublishAnswer(202, orjson.dumps({"accepted": len(records)}), throttled)
    conditions = None
    if batch.conditional:
        if batch.expected_last_offset is not None:
            _refuse_filtered(gatekeeper, principal)
        conditions = _conditions(batch, topic, records.partitions)
    if placed is not None:
        placed()
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
    return PublishAnswer(200, results_json(results), throttled)


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


async def _admit(services: Services, principal: Principal, topic: TopicMetadata, messages: int,
                 size_bytes: int) -> dict[str, str]:
    """Charge the rate limits (429 when refused, 413 when the request can never fit); the headers to
    send."""
    if services.throttle is None:
        return {}
    decision = await services.throttle.admit_publish(principal, topic.name, messages, size_bytes)
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
