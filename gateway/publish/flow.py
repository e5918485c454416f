"""One publish, whatever brought it (an HTTP request or a WebSocket frame): the ACL, forced tenant
headers, the topic's schema, trace context, rate limits, placement and the write, answered as the
JSON body HTTP sends; errors raise (``gateway.errors`` maps them)."""

from __future__ import annotations

import copy
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
from gateway.routes.admission import admit_or_refuse
from gateway.routes.tenancy import key_space_of
from gateway.services import Services
from gateway.throttle import RateAction
from partitioner.hashing import KeylessSpreader
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


class DryRun(NamedTuple):
    """A publish that stops before its write: what its answer reports besides the placement."""

    schema_version: int | None

    def answer(self, partitions: list[int], headers: dict[str, str]) -> PublishAnswer:
        """200: the batch is valid, with the partition each message would go to."""
        return PublishAnswer(200, orjson.dumps({
            "dry_run": True, "valid": True, "messages": len(partitions),
            "schema_version": self.schema_version, "partitions": partitions}), headers)


async def publish_batch(services: Services, gatekeeper: Gatekeeper, principal: Principal,
                        name: str, read_batch: Callable[[], Awaitable[PublishBatch]],
                        incoming: dict[str, str] | None,
                        placed: Placed | None = None, dry_run: bool = False) -> PublishAnswer:
    """Publish the batch ``read_batch`` reads and validates (once the caller may publish to topic
    ``name`` and it exists) for ``principal``, with the caller's trace context ``incoming``;
    ``placed``, when given, is called once the batch passed every check, just before its write
    is queued (a connection orders its frames by it). A ``dry_run`` makes every check and stops
    before the write: nothing written, one read charged, no quota charged."""
    gatekeeper.require(principal, Action.PUBLISH, name)
    # the cache first: no coroutine on a hit
    topic = services.cache.get(name) or await services.topic(name)
    try:
        batch = _stamped(gatekeeper, principal, await read_batch())
        # before any limit is charged: a refused batch costs the caller nothing
        version = (None if services.schema_gate is None
                   else services.schema_gate.check(topic, batch))
        rehearsal = DryRun(version) if dry_run else None
        if spans_on() and rehearsal is None:
            with publish_span(topic.name, len(batch), incoming) as context:
                answer = await _admit_and_write(services, topic, _traced(batch, context),
                                                gatekeeper, principal, placed)
        else:
            answer = await _admit_and_write(services, topic, _traced(batch, incoming),
                                            gatekeeper, principal, placed, rehearsal)
    except Exception:
        if not dry_run:
            services.metrics.publish_requests.labels(topic.name, "error").inc()
        raise
    if not dry_run:
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
                           placed: Placed | None, rehearsal: DryRun | None = None) -> PublishAnswer:
    """The batch as stored, trace context included, within the header limits and charged to the
    bytes rate limit with its headers; then placed and written (a dry run: charged one read,
    admitted by the retained-bytes quota but not charged to it, placed, and answered)."""
    header_bytes = stored_header_bytes(batch, services.limits)
    if rehearsal is not None:
        # charged as a read: a dry run cannot drain the publish buckets
        throttled = await admit_or_refuse(services, principal, RateAction.READ)
    else:
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
                                        placed, rehearsal)
    finally:
        in_flight.end(topic.name)
    if retained is not None and rehearsal is None:
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
                           throttled: dict[str, str], placed: Placed | None,
                           rehearsal: DryRun | None = None) -> PublishAnswer:
    """Place and write (or queue, for acks=0) a batch; a dry run stops once it is placed."""
    if topic.key_index and batch.due_ms is not None:
        index = next(i for i, due in enumerate(batch.due_ms) if due is not None)
        raise invalid_field(f"/messages/{index}", f"topic {topic.name!r} keeps key indexes: it "
                            "takes no delayed messages (they would join the stream outside them)")
    records = place(batch, topic, _spreader(services, rehearsal), principal_scope(principal.name),
                    _key_space(gatekeeper, principal, topic, batch))
    if rehearsal is not None:
        if batch.conditional:
            _checked_conditions(batch, topic, records.partitions, gatekeeper, principal)
        return rehearsal.answer(records.partitions, throttled)
    metrics = services.metrics
    if batch.acks == "0":
        if placed is not None:
            placed()
        await services.publisher.enqueue_waiting(topic, records, batch.due_ms, batch.value_bytes)
        _count_heat(services, topic, records.partitions, records.keys)
        metrics.publish_messages.labels(topic.name, "accepted").inc(len(records))
        metrics.publish_bytes.labels(topic.name).inc(batch.value_bytes)
        return PublishAnswer(202, orjson.dumps({"accepted": len(records)}), throttled)
    conditions = (_checked_conditions(batch, topic, records.partitions, gatekeeper, principal)
                  if batch.conditional else None)
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


def _spreader(services: Services, rehearsal: DryRun | None) -> KeylessSpreader:
    """The keyless spreader; a dry run's copy, so that rehearsals leave the real spread as is
    (it shows where the next publish would go, were no other publish placed first)."""
    return services.spreader if rehearsal is None else copy.copy(services.spreader)


def _checked_conditions(batch: PublishBatch, topic: TopicMetadata, partitions: list[int],
                        gatekeeper: Gatekeeper, principal: Principal) -> Conditions:
    """A conditional batch's expectations, refused where its writer or placement cannot have
    them checked."""
    if batch.expected_last_offset is not None:
        _refuse_filtered(gatekeeper, principal)
    return _conditions(batch, topic, partitions)


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
