"""Consumer groups over HTTP: pull with receipts, ack/nack/extend/reject, list, describe, seek,
parked keys."""

from __future__ import annotations

import dataclasses
import functools
import time
from typing import Any

from aiohttp import web

from gateway.auth.acl import Action
from gateway.auth.errors import Forbidden
from gateway.auth.gatekeeper import READ_ACTIONS, gatekeeper_of, principal_of
from gateway.cloudevents import accepts_batch, batch_response, pulled_events
from gateway.delivery.key_shared import is_seat
from gateway.delivery.params import GROUP_NAME, RETRY_BACKOFF_FIELDS, parse_retry_backoff
from gateway.delivery.pull import Puller, PullRequest
from gateway.delivery.receipts import MAX_ACK_TIMEOUT_MS, MIN_ACK_TIMEOUT_MS, Receipt
from gateway.delivery.settle_frames import reject_reason
from gateway.documents import entry_document
from gateway.duties.verdict_duty import read_verdict
from gateway.errors import Problem, invalid_field, unavailable
from gateway.fanout import gather_bounded
from gateway.offsets import parse_offset, predecessor
from gateway.publish.validation import reject_unknown_fields
from gateway.quotas.in_flight import InFlightWindow
from gateway.responses import json_response
from gateway.routes.admission import admit_group, admit_or_refuse
from gateway.routes.bodies import bounded_int, optional_int, read_json_object
from gateway.routes.dry_runs import dry_run, seek_impact
from gateway.routes.group_scale import note_puller
from gateway.routes.schema_reads import pinned_version
from gateway.routes.tenancy import bind_group, require_own_group
from gateway.routes.topics import may_see_keys
from gateway.services import Services, services_of
from gateway.throttle import RateAction
from partitioner.group_state import group_view, list_groups
from partitioner.topics import TopicMetadata
from storage.models import GroupPartitionState

PULL_FIELDS = frozenset({"topic", "max_messages", "wait_ms", "ack_timeout_ms", "max_deliveries",
                         "schema_version", *RETRY_BACKOFF_FIELDS})
SETTLE_FIELDS = {"nack": frozenset({"receipts", "delay_ms"}),
                 "reject": frozenset({"receipts", "reason"})}
SEEK_FIELDS = frozenset({"topic", "to"})
MAX_PULL = 1000
MAX_WAIT_MS = 30_000
MAX_RECEIPTS = 10_000
# a CloudEvents pull answers a bare array of events: whether the group is paused
PAUSED_HEADER = "SG-Paused"


def _group(request: web.Request) -> str:
    group = request.match_info["group"]
    if not GROUP_NAME.fullmatch(group):
        raise invalid_field("/group", "'group' must match [A-Za-z0-9._-]{1,200}")
    return group


def puller_of(services: Services) -> Puller:
    """The gateway's puller of group messages; 503 where consumer groups are not available."""
    if services.puller is None:
        raise unavailable("consumer groups are not available on this gateway",
                          services.settings.retry_after_s)
    return services.puller


async def _topic_field(request: web.Request, doc: dict[str, Any], action: Action,
                       group: str) -> TopicMetadata:
    """The body's topic, looked up only once the caller may do ``action`` on it (403 before 404)."""
    name = doc.get("topic")
    if not isinstance(name, str):
        raise invalid_field("/topic", "'topic' is required")
    gatekeeper_of(request).require(principal_of(request), action, name, group)
    return await services_of(request).topic(name)


def _refuse_filtered(request: web.Request) -> None:
    """HTTP pull cannot apply a forced filter without acking other tenants' messages for the group:
    refuse."""
    principal = principal_of(request)
    if gatekeeper_of(request).forced_headers(principal):
        raise Forbidden(f"{principal.name!r} reads through a forced header filter; HTTP "
                        "pull/ack/nack/extend are not available to it: subscribe over the "
                        "WebSocket (its filter applies there)")


async def pull(request: web.Request) -> web.Response:
    """POST /v1/groups/{group}/pull {topic, max_messages?, wait_ms?, ack_timeout_ms?,
    max_deliveries?, schema_version?}."""
    services, group = services_of(request), _group(request)
    _refuse_filtered(request)
    doc = await read_json_object(request)
    reject_unknown_fields(doc, PULL_FIELDS)
    topic = await _topic_field(request, doc, Action.SUBSCRIBE, group)
    pinned = pinned_version(services, topic, optional_int(doc, "schema_version", minimum=1))
    window = await _room_to_pull(services, request)
    limited = await admit_or_refuse(services, principal_of(request), RateAction.READ)
    await admit_group(services, principal_of(request), topic.name, group)
    await bind_group(services, gatekeeper_of(request), principal_of(request), topic, group)
    pull_request = PullRequest(
        topic=topic.name,
        max_messages=bounded_int(doc, "max_messages", 10, 1, MAX_PULL),
        wait_ms=bounded_int(doc, "wait_ms", 0, 0, MAX_WAIT_MS),
        ack_timeout_ms=bounded_int(doc, "ack_timeout_ms", 30_000, MIN_ACK_TIMEOUT_MS,
                                   MAX_ACK_TIMEOUT_MS),
        max_deliveries=bounded_int(doc, "max_deliveries", 5, 1, 1000),
        retry_backoff=parse_retry_backoff(doc),
        pinned=pinned,
    )
    services.note_group_policy(topic.name, group, pull_request.ack_timeout_ms,
                               pull_request.max_deliveries, pull_request.retry_backoff)
    note_puller(request, topic.name, group)
    puller = puller_of(services)
    if window is not None:  # at most the room: what it was at the check, less what went since
        pull_request = dataclasses.replace(
            pull_request, max_messages=max(1, min(pull_request.max_messages, window.room)))
    deliveries = await puller.pull(group, pull_request, topic.partitions)
    issued_ms, holder = _now_ms(), principal_of(request).name
    # asked again, not the window of the check: a long poll may outlast an idle window
    charged = None if window is None else _in_flight_window(services, request)
    if charged is not None:
        charged.charge(len(deliveries), issued_ms + pull_request.ack_timeout_ms)
    receipts = [puller.signer.issue(Receipt(topic.name, d.entry.partition, d.entry.offset,
                                            pull_request.ack_timeout_ms, issued_ms), holder, group)
                for d in deliveries]
    paused = puller.pause_fields(topic.name, group)
    if accepts_batch(request):
        return batch_response(pulled_events(topic.name, deliveries, receipts, pinned is not None),
                              {**limited, PAUSED_HEADER: "true" if paused["paused"] else "false"})
    messages = [{"topic": topic.name, **entry_document(d.entry), "delivery_count": d.delivery_count,
                 "receipt": receipt} for d, receipt in zip(deliveries, receipts, strict=True)]
    return json_response({"messages": messages} | paused, headers=limited)


def _in_flight_window(services: Services, request: web.Request) -> InFlightWindow | None:
    """The caller's in-flight quota (None: uncapped)."""
    quota = services.in_flight_quota
    if quota is None:
        return None
    return quota.window_for(services.quota_rules.subject_for(principal_of(request)))


async def _room_to_pull(services: Services, request: web.Request) -> InFlightWindow | None:
    """The caller's in-flight quota when it has room; 429 quota-in-flight when it has none."""
    quota = services.in_flight_quota
    if quota is None:
        return None
    window = await quota.known_window(services.quota_rules.subject_for(principal_of(request)))
    if window is not None and window.room <= 0:
        raise quota.refuse(window)
    return window


def _now_ms() -> int:
    return int(time.time() * 1000)


async def _settle(request: web.Request, action: str) -> web.Response:
    services, group = services_of(request), _group(request)
    _refuse_filtered(request)
    doc = await read_json_object(request)
    reject_unknown_fields(doc, SETTLE_FIELDS.get(action, frozenset({"receipts"})))
    raw = doc.get("receipts")
    if not isinstance(raw, list) or not raw or len(raw) > MAX_RECEIPTS:
        raise invalid_field("/receipts",
                            f"'receipts' must be a list of 1 to {MAX_RECEIPTS} receipt handles")
    puller = puller_of(services)
    receipts = _verified_receipts(request, puller, group, raw)
    delay_ms = bounded_int(doc, "delay_ms", 0, 0, 86_400_000) if action == "nack" else 0
    backoffs = ({topic: await services.retry_backoff_of(topic, group)
                 for topic in {receipt.topic for receipt in receipts}} if action == "nack" else {})
    try:
        reason = reject_reason(doc.get("reason")) if action == "reject" else ""
    except ValueError as exc:
        raise invalid_field("/reason", str(exc)) from None
    window = _in_flight_window(services, request)
    count = await puller.settle(group, receipts, action, delay_ms, backoffs, reason, window)
    body: dict[str, Any] = {{"ack": "acked", "nack": "nacked", "extend": "extended",
                             "reject": "rejected"}[action]: count}
    # the ack timeout starts again, so does the receipt's validity: hand out new ones
    if action == "extend":
        issued_ms = _now_ms()
        body["receipts"] = _reissued(puller, receipts, principal_of(request).name, group,
                                     issued_ms)
        if window is not None:  # due back at the new receipts' deadline
            for receipt in {r.offset: r for r in receipts}.values():
                window.move(1, receipt.issued_ms + receipt.ack_timeout_ms,
                            issued_ms + receipt.ack_timeout_ms)
    return json_response(body)


def _verified_receipts(request: web.Request, puller: Puller, group: str,
                       raw: list[Any]) -> list[Receipt]:
    """Every receipt of the body, checked before anything is settled: the caller's grants on the
    topics they name first (403 before 422), then their signatures (bound to the caller and
    ``group``) and expiry."""
    sealed = [puller.signer.read(token, f"/receipts/{i}") for i, token in enumerate(raw)]
    principal, gatekeeper = principal_of(request), gatekeeper_of(request)
    for topic in sorted({s.receipt.topic for s in sealed}):
        gatekeeper.require(principal, Action.SUBSCRIBE, topic, group)
    now_ms = _now_ms()
    return [puller.signer.verify(s, principal.name, group, now_ms) for s in sealed]


def _reissued(puller: Puller, receipts: list[Receipt], principal: str, group: str,
              issued_ms: int) -> list[str]:
    return [puller.signer.issue(dataclasses.replace(r, issued_ms=issued_ms), principal, group)
            for r in receipts]


async def ack(request: web.Request) -> web.Response:
    """POST /v1/groups/{group}/ack {receipts}."""
    return await _settle(request, "ack")


async def nack(request: web.Request) -> web.Response:
    """POST /v1/groups/{group}/nack {receipts, delay_ms?}: redeliver after the delay (0: at
    once)."""
    return await _settle(request, "nack")


async def extend(request: web.Request) -> web.Response:
    """POST /v1/groups/{group}/extend {receipts}: restart the ack timeout."""
    return await _settle(request, "extend")


async def reject(request: web.Request) -> web.Response:
    """POST /v1/groups/{group}/reject {receipts, reason?}: to the dead-letter topic now."""
    return await _settle(request, "reject")


async def _readable_topics(services: Services, request: web.Request,
                           group: str | None) -> list[TopicMetadata]:
    """The topics on which the caller may see ``group`` (any group when None): decided from the ACL
    alone, before any Redis call, so a listing costs what the caller may see and not what the
    cluster holds."""
    principal, gatekeeper = principal_of(request), gatekeeper_of(request)
    return [topic for topic in await services.registry.list()
            if gatekeeper.may_see(principal, topic.name, READ_ACTIONS, group)]


async def _groups_in_redis(services: Services, topics: list[TopicMetadata]) -> set[tuple[str, str]]:
    store = puller_of(services).store
    pairs: set[tuple[str, str]] = set()
    for topic in topics:  # one topic at a time, its partitions through the bounded fan-out
        names = await gather_bounded(functools.partial(store.groups, topic.name),
                                     range(topic.partitions))
        pairs |= {(topic.name, group) for partition_groups in names for group in partition_groups}
    return pairs


async def _visible_pairs(services: Services, request: web.Request, group: str | None,
                         topics: list[TopicMetadata]) -> list[tuple[str, str]]:
    """(topic, group) pairs in Redis or etcd on ``topics`` that the caller may see (only ``group``
    when given)."""
    principal, gatekeeper = principal_of(request), gatekeeper_of(request)
    pairs = await _groups_in_redis(services, topics) if topics else set()
    if services.etcd is not None and topics:
        names = {topic.name for topic in topics}
        pairs |= {pair for pair in await list_groups(services.etcd,
                                                     prefix=services.settings.etcd_prefix)
                  if pair[0] in names}
    return sorted((t, g) for t, g in pairs if (group is None or g == group)
                  and gatekeeper.may_see(principal, t, READ_ACTIONS, g))


async def list_all_groups(request: web.Request) -> web.Response:
    """GET /v1/groups -> every (topic, group) known to Redis or holding members in etcd that the
    caller may see.

    Charged to the caller's reads bucket; only topics the caller may read are looked at."""
    services = services_of(request)
    limited = await admit_or_refuse(services, principal_of(request), RateAction.READ)
    pairs = await _visible_pairs(services, request, None,
                                 await _readable_topics(services, request, None))
    return json_response({"groups": [{"topic": t, "group": g} for t, g in pairs]}, headers=limited)


async def describe_group(request: web.Request) -> web.Response:
    """GET /v1/groups/{group}?topic= -> members, assignment and per-partition position, lag,
    pending and the owner's verdict."""
    services, group = services_of(request), _group(request)
    principal, gatekeeper = principal_of(request), gatekeeper_of(request)
    wanted = request.query.get("topic")
    if wanted is not None:
        gatekeeper.require_any(principal, wanted, READ_ACTIONS, group)
    elif not gatekeeper.acl.may_know_group(principal, group):
        raise Forbidden(f"{principal.name!r} has no access to group {group!r}")
    limited = await admit_or_refuse(services, principal, RateAction.READ)
    readable = [t for t in await _readable_topics(services, request, group)
                if wanted is None or t.name == wanted]
    topics = [t for t, _ in await _visible_pairs(services, request, group, readable)]
    if not topics:
        raise Problem(404, "group-not-found", "Group not found", f"group {group!r} has no state"
                      + (f" on topic {wanted!r}" if wanted else ""))
    return json_response({"group": group,
                          "topics": [await _describe_on(services, group, t,
                                                        may_see_keys(request, t))
                                     for t in topics]},
                         headers=limited)


async def _describe_on(services: Services, group: str, name: str,
                       show_keys: bool = True) -> dict[str, Any]:
    topic = await services.topic(name)
    store = puller_of(services).store
    states = await gather_bounded(lambda p: store.state(name, p, group), range(topic.partitions))
    unread = await gather_bounded(lambda state: _oldest_unread_age_ms(services, name, state),
                                  states)
    verdicts = await gather_bounded(lambda p: read_verdict(services.verdicts, name, p, group),
                                    range(topic.partitions))
    doc: dict[str, Any] = {"topic": name, "members": [], "generation": None, "assignment": {},
                           "partitions": [{**_partition_state(state), "oldest_unread_age_ms": age,
                                           "verdict": verdict} for state, age, verdict
                                          in zip(states, unread, verdicts, strict=True)]}
    doc.update(puller_of(services).pause_fields(name, group))  # paused, until_ms
    if services.etcd is not None:
        view = await group_view(services.etcd, topic=name, group=group,
                                prefix=services.settings.etcd_prefix)
        doc["members"] = [{"member_id": m.member_id, "node": m.node, "joined_at_ms": m.joined_at_ms}
                          for m in view.members]
        doc["generation"] = view.generation or None
        doc["assignment"] = {member: list(parts) for member, parts in view.owners.items()}
        if any(is_seat(m.member_id) for m in view.members):
            parked = await gather_bounded(lambda p: store.parked(name, p, group),
                                          range(topic.partitions))
            for partition_doc, keys in zip(doc["partitions"], parked, strict=True):
                partition_doc["parked_keys"] = [
                    {"key": p.key.decode(errors="replace") if show_keys else None,
                     "offset": p.offset, "since_ms": p.since_ms} for p in keys]
    return doc


async def _oldest_unread_age_ms(services: Services, topic: str,
                                state: GroupPartitionState) -> int | None:
    """Age of the first entry not yet delivered to the group; 0 when none waits, None when
    unknown."""
    if state.lag == 0:
        return 0
    if state.last_delivered_offset is None:
        return None
    entries = await services.store.read(topic, state.partition, after=state.last_delivered_offset,
                                        limit=1)
    return max(0, int(time.time() * 1000) - entries[0].timestamp_ms) if entries else None


def _partition_state(state: GroupPartitionState) -> dict[str, Any]:
    oldest_age_ms = None
    if state.oldest_pending_offset is not None:
        oldest_age_ms = max(0, int(time.time() * 1000)
                            - int(state.oldest_pending_offset.split("-")[0]))
    return {"partition": state.partition, "exists": state.exists,
            "last_delivered_offset": state.last_delivered_offset, "pending": state.pending,
            "oldest_pending_offset": state.oldest_pending_offset,
            "oldest_pending_age_ms": oldest_age_ms, "lag": state.lag}


async def seek(request: web.Request) -> web.Response:
    """POST /v1/groups/{group}/seek
    {topic, to: earliest|latest|<partition>:<offset>,...|{"timestamp_ms": t}}."""
    services, group = services_of(request), _group(request)
    doc = await read_json_object(request)
    reject_unknown_fields(doc, SEEK_FIELDS)
    topic = await _topic_field(request, doc, Action.ADMIN, group)
    await require_own_group(services, gatekeeper_of(request), principal_of(request), topic, group,
                            "a seek")
    positions = _seek_positions(doc.get("to"), topic)
    store = puller_of(services).store
    if dry_run(request):
        return json_response(await seek_impact(services, topic, group, positions))
    for partition, start in positions.items():
        await store.seek(topic.name, partition, group, start)
    return json_response({"topic": topic.name, "group": group,
                          "positions": {str(p): s for p, s in sorted(positions.items())}})


PARKED_FIELDS = frozenset({"topic", "partition", "key", "action", "reason"})
PARKED_ACTIONS = ("release", "dead_letter")


async def settle_parked_key(request: web.Request) -> web.Response:
    """POST /v1/groups/{group}/parked {topic, partition, key, action: release|dead_letter,
    reason?}: a key_shared group's parked key goes on now (its message redelivered at once, or
    sent to the dead letters); the gateway holding the partition frees the key."""
    services, group = services_of(request), _group(request)
    doc = await read_json_object(request)
    reject_unknown_fields(doc, PARKED_FIELDS)
    topic = await _topic_field(request, doc, Action.ADMIN, group)
    await require_own_group(services, gatekeeper_of(request), principal_of(request), topic, group,
                            "settling a parked key")
    partition = optional_int(doc, "partition", minimum=0)
    if partition is None or partition >= topic.partitions:
        raise invalid_field("/partition", f"'partition' must be one of {topic.name}'s "
                                          f"0..{topic.partitions - 1}")
    key, action = doc.get("key"), doc.get("action")
    if not isinstance(key, str):
        raise invalid_field("/key", "'key' must be the parked key (a string)")
    if action not in PARKED_ACTIONS:
        raise invalid_field("/action", "'action' must be release or dead_letter")
    try:
        reason = reject_reason(doc.get("reason", "parked key sent to the dead letters"))
    except ValueError as exc:
        raise invalid_field("/reason", str(exc)) from None
    puller = puller_of(services)
    parked = {p.key: p for p in await puller.store.parked(topic.name, partition, group)}
    found = parked.get(key.encode())
    if found is None:
        raise Problem(404, "parked-key-not-found", "Parked key not found",
                      f"group {group!r} has no parked key {key!r} on {topic.name}/{partition}")
    if action == "release":
        await puller.release(topic.name, partition, group, [found.offset])
    else:
        await puller.dead_letter(topic.name, partition, group, [found.offset], reason)
        await puller.store.unpark(topic.name, partition, group, [found.key])
    return json_response({"topic": topic.name, "partition": partition, "key": key,
                          "offset": found.offset, "action": action})


def _seek_positions(to: Any, topic: TopicMetadata) -> dict[int, str]:
    everywhere = range(topic.partitions)
    if to in ("earliest", "latest"):
        return dict.fromkeys(everywhere, str(to))
    if (isinstance(to, dict) and set(to) == {"timestamp_ms"} and isinstance(to["timestamp_ms"], int)
            and to["timestamp_ms"] >= 0):
        # Deliver from the first entry at or after the time: the position is the ID just before it.
        position = predecessor(f"{to['timestamp_ms']}-0") or "earliest"
        return dict.fromkeys(everywhere, position)
    if isinstance(to, str):
        positions: dict[int, str] = {}
        for part in to.split(","):
            partition, sep, offset = part.partition(":")
            if (not sep or not (partition.isascii() and partition.isdigit())
                    or int(partition) >= topic.partitions):
                raise invalid_field("/to", f"{part!r} is not <partition>:<offset> of this topic")
            parse_offset(offset, "/to")
            positions[int(partition)] = offset
        return positions
    raise invalid_field("/to", "'to' must be earliest, latest, '<partition>:<offset>,...' or "
                               "{\"timestamp_ms\": t}")


def add_routes(app: web.Application) -> None:
    """Register the group routes."""
    app.router.add_get("/v1/groups", list_all_groups)
    app.router.add_get("/v1/groups/{group}", describe_group)
    app.router.add_post("/v1/groups/{group}/pull", pull)
    app.router.add_post("/v1/groups/{group}/ack", ack)
    app.router.add_post("/v1/groups/{group}/nack", nack)
    app.router.add_post("/v1/groups/{group}/extend", extend)
    app.router.add_post("/v1/groups/{group}/reject", reject)
    app.router.add_post("/v1/groups/{group}/seek", seek)
    app.router.add_post("/v1/groups/{group}/parked", settle_parked_key)
