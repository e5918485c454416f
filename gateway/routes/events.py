"""``GET /v1/topics/{topic}/events``: a broadcast subscription as Server-Sent Events, resumable
with ``Last-Event-ID`` (docs/sse.md); the same checks as the WebSocket subscribe before any byte."""

from __future__ import annotations

import asyncio
import dataclasses
import time
import uuid

import orjson
from aiohttp import web
from multidict import MultiDict, MultiMapping

from gateway.auth.gatekeeper import Gatekeeper, gatekeeper_of, principal_of
from gateway.auth.principal import Principal
from gateway.delivery.broadcast import resolve_start
from gateway.delivery.expiry import BroadcastCounts
from gateway.delivery.hub import DeliveryHub
from gateway.delivery.modes import tell_of_gaps
from gateway.delivery.params import SubscribeParams, parse_subscribe_params
from gateway.delivery.session import CloseRequest, Session
from gateway.delivery.sse import CLIENT_GONE, SseStream, sse_event, stream_start
from gateway.delivery.subscription import close_for
from gateway.delivery.tail import BroadcastFollow
from gateway.delivery.wire import error_frame
from gateway.errors import (
    WS_CLOSE_FORBIDDEN,
    WS_CLOSE_GOING_AWAY,
    WS_CLOSE_SLOW_CONSUMER,
    WS_CLOSE_TOPIC_GONE,
    WS_CLOSE_UNAUTHENTICATED,
    invalid_field,
    too_many_connections,
    unavailable,
)
from gateway.offsets import predecessor
from gateway.routes.admission import admit_or_refuse
from gateway.routes.event_tokens import query_token_principal
from gateway.routes.subscribe import authorize_subscription
from gateway.services import Services, services_of
from gateway.throttle import RateAction
from partitioner.topics import TopicMetadata

LAST_EVENT_ID = "Last-Event-ID"
# a new EventSource cannot set headers: the query carries the cursor it resumes from
LAST_EVENT_ID_QUERY = "last_event_id"
STREAM_HEADERS = {"Content-Type": "text/event-stream; charset=utf-8",
                  "Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
# the WebSocket's close codes that end an event stream, as the ``code`` of its last error event
# (a stream is closed 4401 only when the credential it was opened with expires)
ERROR_CODES = {WS_CLOSE_TOPIC_GONE: "topic-not-found",
               WS_CLOSE_UNAUTHENTICATED: "credentials-expired", WS_CLOSE_FORBIDDEN: "forbidden"}
# ends with no error event: the browser reconnects (shutdown), or nobody is left to read it
QUIET_ENDS = (WS_CLOSE_GOING_AWAY, CLIENT_GONE, WS_CLOSE_SLOW_CONSUMER)


def events_principal(request: web.Request) -> Principal:
    """Who opens the stream: the event token in ``?access_token=`` (401 unless valid for this
    topic and unexpired), else credentials from the request's headers (401 without)."""
    return (query_token_principal(request, request.match_info["topic"])
            or principal_of(request))


def last_event_id(request: web.Request) -> str | None:
    """The cursor a reconnecting client resumes from: the ``Last-Event-ID`` header (a browser's
    own reconnect), else ``?last_event_id=`` (a new EventSource, e.g. with a fresh token)."""
    return request.headers.get(LAST_EVENT_ID) or request.query.get(LAST_EVENT_ID_QUERY)


def end_at_credential_expiry(gatekeeper: Gatekeeper, principal: Principal,
                             session: Session) -> asyncio.TimerHandle | None:
    """End the stream when the credential it was opened with expires (a JWT's ``exp``, an event
    token's bound credential): the client gets fresh credentials and resumes with its cursor."""
    deadline_s = gatekeeper.session_deadline_s(principal)
    if deadline_s is None:
        return None
    return asyncio.get_running_loop().call_later(
        max(0.0, deadline_s - time.time()), session.request_close, WS_CLOSE_UNAUTHENTICATED,
        "credentials expired: get a new event token and resume with last_event_id")


def parse_events_params(topic: str, query: MultiMapping[str],
                        last_event_id: str | None) -> tuple[SubscribeParams, list[int] | None]:
    """The broadcast subscription a stream asks for (the WebSocket's parameters and 422s; a
    ``Last-Event-ID`` is its ``from``) and its partitions subset (None: every partition)."""
    for name in ("group", "mode"):
        if name in query:
            raise invalid_field(f"/{name}", "an event stream is a broadcast subscription: "
                                            f"it takes no '{name}'")
    wanted: MultiDict[str] = MultiDict(query)
    wanted.popall("batch", None)  # one event per message whatever the query says
    wanted["topic"] = topic
    if last_event_id:
        wanted["from"] = last_event_id
    params = parse_subscribe_params(wanted)
    subset = _partitions(query.get("partitions"))
    if subset is not None and params.start == "cursor":
        params = dataclasses.replace(params, cursor={p: o for p, o in params.cursor.items()
                                                     if p in subset})
    return params, subset


def _partitions(raw: str | None) -> list[int] | None:
    """``partitions=<p>[,<p>...]``: distinct partition numbers, sorted."""
    if raw is None:
        return None
    parts = raw.split(",")
    if not all(part.isascii() and part.isdigit() and len(part) <= 6 for part in parts):
        raise invalid_field("/partitions", "'partitions' must be <partition>[,<partition>...]")
    return sorted({int(part) for part in parts})


def _check_subset(subset: list[int] | None, topic: TopicMetadata) -> list[int]:
    if subset is None:
        return list(range(topic.partitions))
    if subset[-1] >= topic.partitions:
        raise invalid_field("/partitions", f"topic {topic.name!r} has {topic.partitions} "
                                           f"partitions (0 to {topic.partitions - 1})")
    return subset


async def events(request: web.Request) -> web.StreamResponse:
    """Authorize (401/403/404), take a connection slot (429) and charge the subscribe rate limit,
    pin the start positions (503 if the store is down), then stream until the client leaves, the
    gateway drains or the client is too slow."""
    services = services_of(request)
    settings = services.settings
    principal = events_principal(request)
    params, subset = parse_events_params(request.match_info["topic"], request.query,
                                         last_event_id(request))
    gatekeeper = gatekeeper_of(request)
    params, topic = await authorize_subscription(services, gatekeeper, principal, params)
    partitions = _check_subset(subset, topic)
    hub = services.delivery
    if hub is None:
        raise unavailable("broadcast tails are not available on this gateway",
                          settings.retry_after_s)
    if services.connections.full(principal.name):
        raise too_many_connections(_too_many(services, principal), settings.retry_after_s)
    rate_headers = await admit_or_refuse(services, principal, RateAction.SUBSCRIBE)
    if not services.connections.acquire(principal.name):
        raise too_many_connections(_too_many(services, principal), settings.retry_after_s)
    response = web.StreamResponse(headers={**STREAM_HEADERS, **rate_headers})
    response.force_close()  # the connection ends with the stream: nothing follows it
    open_streams = services.metrics.event_streams
    open_streams.inc()

    def released() -> None:
        services.connections.release(principal.name)
        open_streams.dec()

    stream = SseStream(response.write, released)
    session = Session(f"{settings.node_id}-{uuid.uuid4().hex[:12]}", topic.name, params,
                      stream.send, settings.slow_client_timeout_s, settings.ws_max_outbox_bytes)
    stream.serve(session, None)
    close = CloseRequest(CLIENT_GONE, "")
    expiry = end_at_credential_expiry(gatekeeper, principal, session)
    try:
        positions = await _start_positions(services, session, topic.partitions, partitions)
        await response.prepare(request)
        await response.write(stream_start())
        services.subscriptions.add(stream)
        await _follow(services, hub, stream, session, positions, whole=subset is None)
        close = await stream.serve_until_closed(settings.sse_heartbeat_s,
                                                lambda: _connected(request))
    finally:
        if expiry is not None:
            expiry.cancel()
        services.subscriptions.discard(stream)
        finish = None
        if response.prepared and close.code != CLIENT_GONE:
            finish = (response.write_eof, lambda: _cut(request))
        await stream.aclose(_last_words(session, close), finish)
    return response


async def _start_positions(services: Services, session: Session, count: int,
                           partitions: list[int]) -> dict[int, str | None]:
    """The offset each followed partition is read after (None: from its first retained entry)."""
    everywhere = await resolve_start(services.store, session, count)
    return {partition: everywhere[partition] for partition in partitions}


async def _follow(services: Services, hub: DeliveryHub, stream: SseStream, session: Session,
                  positions: dict[int, str | None], whole: bool) -> None:
    """Tell of gaps, then follow the partitions through the shared tails (also partitions added
    later when the stream takes the whole topic); a failure ends the stream with an error."""
    session.cursor.update({p: o for p, o in positions.items() if o is not None})
    session.cursor.update(_before_the_time(session.params.from_time_ms, positions))
    try:
        if session.params.start == "cursor":
            await tell_of_gaps(session, hub.store, positions)
        follow = BroadcastFollow(hub.tails, services.store, session, positions,
                                 BroadcastCounts.of(services.metrics, session.topic),
                                 services.cache if whole else None,
                                 on_error=lambda exc: close_for(session, exc))
    except Exception as exc:
        close_for(session, exc)
        return
    stream.serve(session, follow)


def _before_the_time(from_time_ms: int | None,
                     positions: dict[int, str | None]) -> dict[int, str]:
    """A stream from a time resumes each partition it has read nothing of yet from that time,
    not from the partition's start: the cursor its ids carry holds the offset right before it."""
    if not from_time_ms:
        return {}
    before = predecessor(f"{from_time_ms}-0")
    if before is None:
        return {}
    return {partition: before for partition, at in positions.items() if at is None}


def _too_many(services: Services, principal: Principal) -> str:
    return (f"{principal.name!r} already holds {services.connections.open_count(principal.name)} "
            "subscriptions (WebSockets and event streams) on this gateway "
            "(max_connections_per_principal)")


def _last_words(session: Session, close: CloseRequest) -> bytes:
    """The error event ending a stream that failed (none for a shutdown or a slow client, which
    had theirs)."""
    if close.code in QUIET_ENDS:
        return b""
    return error_event(ERROR_CODES.get(close.code, "unavailable"), close.reason,
                       session.resume_cursor())


def error_event(code: str, detail: str, cursor: str) -> bytes:
    """The ``error`` event that ends a stream: what failed and where to resume."""
    return sse_event(b"error", orjson.dumps(error_frame(code, detail, cursor=cursor)))


def _connected(request: web.Request) -> bool:
    transport = request.transport
    return transport is not None and not transport.is_closing()


def _cut(request: web.Request) -> None:
    transport = request.transport
    if transport is not None:
        transport.abort()


def add_routes(app: web.Application) -> None:
    """Register the event stream route."""
    app.router.add_get("/v1/topics/{topic}/events", events)
