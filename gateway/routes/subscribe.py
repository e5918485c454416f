"""``GET /v1/subscribe``: WebSocket subscriptions in exclusive, shared or broadcast mode.

Parameters are validated before the upgrade (problem+json 4xx). After it, the server sends ``message``,
``assignment`` and ``error`` frames; the client sends ``ack``, ``nack`` and ``extend`` frames. See docs/api.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
import uuid
from collections.abc import Awaitable, Coroutine, Iterable
from typing import Any

import orjson
from aiohttp import WSMsgType, web

from gateway.auth.acl import Action
from gateway.auth.errors import AuthError, Unauthenticated
from gateway.auth.gatekeeper import Gatekeeper
from gateway.auth.middleware import awaits_auth_frame, gatekeeper_of, principal_of
from gateway.auth.principal import Principal
from gateway.delivery.broadcast import follow_partition, resolve_start
from gateway.delivery.group_reader import GroupConfig
from gateway.delivery.hub import DeliveryHub, GroupConflict
from gateway.delivery.params import Mode, SubscribeParams, parse_subscribe_params
from gateway.delivery.session import CLOSE_REASON_MAX_BYTES, MessageRef, Session
from gateway.delivery.tail import BroadcastFollow
from gateway.delivery.wire import coalescing_sender
from gateway.errors import (
    WS_CLOSE_GOING_AWAY,
    WS_CLOSE_GROUP_CONFLICT,
    WS_CLOSE_SLOW_CONSUMER,
    WS_CLOSE_TOO_MANY_CONNECTIONS,
    WS_CLOSE_UNAUTHENTICATED,
    WS_CLOSE_UNAVAILABLE,
    close_code_for,
    too_many_connections,
    unavailable,
)
from gateway.routes.admission import admit, admit_or_refuse
from gateway.services import SERVICES, Services, services_of
from gateway.throttle import RateAction
from partitioner.errors import MembershipLost, PartitionerError
from partitioner.membership import GroupMember
from partitioner.topics import TopicMetadata
from storage.errors import StorageError

log = logging.getLogger(__name__)

SETTLE_ACTIONS = ("ack", "nack", "extend")
TASK_STOP_TIMEOUT_S = 5.0
MAX_REFS_PER_FRAME = 10_000
RECEIVE_END = frozenset((WSMsgType.CLOSE, WSMsgType.CLOSING, WSMsgType.CLOSED, WSMsgType.ERROR))


async def subscribe(request: web.Request) -> web.StreamResponse:
    """Upgrade to a WebSocket and serve the subscription until either side closes.

    With credentials in the upgrade request, authorization (403) comes before the topic lookup (404) and both
    before the upgrade. Without, the socket is upgraded first and the first frame must be ``auth``.
    """
    services = services_of(request)
    params = parse_subscribe_params(request.query)
    if params.mode is not Mode.BROADCAST and services.delivery is None:
        raise unavailable("consumer groups are not available on this gateway", services.settings.retry_after_s)
    settings = services.settings
    gatekeeper = gatekeeper_of(request)
    authorized: tuple[Principal, SubscribeParams, TopicMetadata] | None = None
    if not awaits_auth_frame(request):
        principal = principal_of(request)
        authorized = principal, *await _authorize(services, gatekeeper, principal, params)
        if services.connections.full(principal.name):
            raise too_many_connections(_too_many(services, principal), settings.retry_after_s)
        await admit_or_refuse(services, principal, RateAction.SUBSCRIBE)
    ws = web.WebSocketResponse(heartbeat=settings.ws_heartbeat_s, max_msg_size=settings.ws_max_frame_bytes,
                               compress=settings.ws_compression)  # permessage-deflate only if the client asks
    await ws.prepare(request)
    by_frame = authorized is None
    if authorized is None:
        authorized = await _authorize_by_frame(ws, services, gatekeeper, params)
        if authorized is None:
            return ws
    principal, params, topic = authorized
    with services.connections.hold(principal.name) as held:
        if not held:
            await ws.close(code=WS_CLOSE_TOO_MANY_CONNECTIONS, message=_too_many(services, principal).encode())
            return ws
        # As with header credentials: the connection cap first, then the subscribe rate limit.
        if by_frame and not await _admitted_after_upgrade(ws, services, principal):
            return ws
        await _serve_session(request, ws, services, gatekeeper, principal, params, topic)
    return ws


async def _admitted_after_upgrade(ws: web.WebSocketResponse, services: Services, principal: Principal) -> bool:
    """Charge the subscribe rate limit of a principal known only after the upgrade; refused -> close 4429."""
    try:
        decision = await admit(services, principal, RateAction.SUBSCRIBE)
    except StorageError as exc:
        await ws.close(code=close_code_for(exc), message=exc.message.encode()[:CLOSE_REASON_MAX_BYTES])
        return False
    if not decision.allowed:
        reason = f"{decision.reason}; retry in {decision.retry_after_s} s"
        await ws.close(code=WS_CLOSE_TOO_MANY_CONNECTIONS, message=reason.encode()[:CLOSE_REASON_MAX_BYTES])
    return decision.allowed


def _too_many(services: Services, principal: Principal) -> str:
    return (f"{principal.name!r} already holds {services.connections.open_count(principal.name)} subscriptions on "
            f"this gateway (max_connections_per_principal)")


async def _serve_session(request: web.Request, ws: web.WebSocketResponse, services: Services, gatekeeper: Gatekeeper,
                         principal: Principal, params: SubscribeParams, topic: TopicMetadata) -> None:
    settings = services.settings
    session_id = f"{settings.node_id}-{uuid.uuid4().hex[:12]}"
    async with Session(session_id, topic.name, params, coalescing_sender(ws, request),
                       settings.slow_client_timeout_s) as session:
        services.sessions.add(session)
        expiry = _close_at_expiry(session, gatekeeper.session_deadline_s(principal))
        connections = services.metrics.websocket_connections.labels(params.mode.value)
        connections.inc()
        try:
            await _serve(ws, session, services, topic)
        finally:
            connections.dec()
            if expiry is not None:
                expiry.cancel()
            services.sessions.discard(session)
            if session.closing.done() and session.closing.result().code == WS_CLOSE_SLOW_CONSUMER:
                services.metrics.websocket_slow_closes.labels(params.mode.value).inc()


async def _authorize(services: Services, gatekeeper: Gatekeeper, principal: Principal,
                     params: SubscribeParams) -> tuple[SubscribeParams, TopicMetadata]:
    """Check the ACL (403), then find the topic (404); the principal's forced filter is ANDed in."""
    gatekeeper.require(principal, Action.SUBSCRIBE, params.topic, params.group)
    forced = gatekeeper.forced_headers(principal)
    params = dataclasses.replace(params, filter=params.filter.and_headers(forced)) if forced else params
    return params, await services.topic(params.topic)


async def _authorize_by_frame(ws: web.WebSocketResponse, services: Services, gatekeeper: Gatekeeper,
                              params: SubscribeParams) -> tuple[Principal, SubscribeParams, TopicMetadata] | None:
    """Authenticate with the first frame; on failure close with 4401/4403/4404 and return None."""
    try:
        principal = await _principal_from_first_frame(ws, gatekeeper, services.settings.auth_frame_timeout_s)
        params, topic = await _authorize(services, gatekeeper, principal, params)
    except (AuthError, StorageError, PartitionerError) as exc:
        with contextlib.suppress(Exception):
            await ws.close(code=close_code_for(exc), message=exc.message.encode()[:CLOSE_REASON_MAX_BYTES])
        return None
    await ws.send_str(orjson.dumps({"type": "authenticated", "principal": principal.name}).decode())
    return principal, params, topic


async def _principal_from_first_frame(ws: web.WebSocketResponse, gatekeeper: Gatekeeper,
                                      timeout_s: float) -> Principal:
    """The principal of a ``{"type": "auth", "token": <jwt>}`` or ``{"type": "auth", "api_key": <key>}`` frame."""
    try:
        message = await ws.receive(timeout=timeout_s)
    except TimeoutError:
        raise Unauthenticated(f"no auth frame within {timeout_s:g} s") from None
    try:
        frame = orjson.loads(message.data) if message.type is WSMsgType.TEXT else None
    except orjson.JSONDecodeError:
        frame = None
    if not isinstance(frame, dict) or frame.get("type") != "auth":
        raise Unauthenticated("the first frame must be {\"type\": \"auth\", \"token\" | \"api_key\": ...}")
    token, api_key = frame.get("token"), frame.get("api_key")
    if isinstance(token, str) and token:
        return gatekeeper.authenticate_token(token)
    if isinstance(api_key, str) and api_key:
        return gatekeeper.authenticate_api_key(api_key)
    raise Unauthenticated("the auth frame needs a non-empty 'token' or 'api_key'")


def _close_at_expiry(session: Session, deadline_s: float | None) -> asyncio.TimerHandle | None:
    """Close the session with 4401 when its token expires."""
    if deadline_s is None:
        return None
    return asyncio.get_running_loop().call_later(max(0.0, deadline_s - time.time()), session.request_close,
                                                 WS_CLOSE_UNAUTHENTICATED, "token expired")


async def close_sessions_on_shutdown(app: web.Application) -> None:
    """Ask every open subscription to close with 1001 so clients reconnect elsewhere and resume."""
    services = app.get(SERVICES)
    if services is None:
        return
    for session in list(services.sessions):
        session.request_close(WS_CLOSE_GOING_AWAY, "gateway shutting down")


async def _serve(ws: web.WebSocketResponse, session: Session, services: Services, topic: TopicMetadata) -> None:
    hub = services.delivery
    if session.params.mode is Mode.BROADCAST and hub is not None:  # no task of its own while idle
        try:
            follow = await _start_broadcast(session, services, hub, topic)
        except Exception as exc:  # as a runner failing would be: the close code tells the client
            _close_for(session, exc)
        else:
            try:
                await _receive_until_stopped(ws, session, services, None)
            finally:
                await follow.aclose()
    else:
        runner = asyncio.create_task(_runner(session, services, topic), name=f"subscription-{session.id}")
        try:
            await _receive_until_stopped(ws, session, services, runner)
        finally:
            runner.cancel()
            # Bounded: a task stuck in a backend call must not keep the handler (and shutdown) waiting.
            await asyncio.wait([runner], timeout=TASK_STOP_TIMEOUT_S)
        if runner.done() and not runner.cancelled() and runner.exception() is not None:
            _close_for(session, runner.exception())
    if not ws.closed:
        request = session.closing.result() if session.closing.done() else None
        code, reason = (request.code, request.reason) if request else (WS_CLOSE_GOING_AWAY, "")
        with contextlib.suppress(Exception):
            await asyncio.wait_for(ws.close(code=code, message=reason.encode()), 5)


def _close_for(session: Session, exc: BaseException | None) -> None:
    if exc is None:
        return
    if isinstance(exc, GroupConflict):
        session.request_close(WS_CLOSE_GROUP_CONFLICT, str(exc))
    elif isinstance(exc, StorageError | PartitionerError):
        session.request_close(close_code_for(exc), f"{type(exc).__name__}: {exc}")
    else:
        log.error("subscription %s failed", session.id, exc_info=exc)
        session.request_close(WS_CLOSE_UNAVAILABLE, "internal error")


def _runner(session: Session, services: Services, topic: TopicMetadata) -> Coroutine[Any, Any, None]:
    """The coroutine serving the session's mode (broadcast directly: one coroutine frame less per subscription)."""
    if session.params.mode is Mode.BROADCAST:
        return _run_broadcast(session, services, topic)
    return _run_group(session, services, topic)


async def _run_group(session: Session, services: Services, topic: TopicMetadata) -> None:
    params = session.params
    if services.delivery is None or params.group is None:
        raise PartitionerError("group subscriptions need a group and a delivery hub")
    config = GroupConfig(params.ack_timeout_ms, params.max_deliveries, params.filter,
                         _group_start(params), params.auto_ack, params.mode is Mode.EXCLUSIVE)
    services.note_group_policy(topic.name, params.group, params.ack_timeout_ms, params.max_deliveries)
    if params.mode is Mode.SHARED:
        await _run_shared(session, services, services.delivery, params.group, config, topic)
    else:
        await _run_exclusive(session, services, params.group, config, topic)


def _group_start(params: SubscribeParams) -> str:
    if params.start == "cursor":
        # A group has one position per partition; a cursor names them, the lowest is used where absent.
        return min(params.cursor.values())
    return params.start


async def _start_broadcast(session: Session, services: Services, hub: DeliveryHub,
                           topic: TopicMetadata) -> BroadcastFollow:
    """Pin the start positions, send the assignment, and follow every partition through the shared tails."""
    positions = await resolve_start(services.store, session, topic.partitions)
    session.cursor.update({p: o for p, o in positions.items() if o is not None})
    _send_assignment(session, range(topic.partitions))
    delivered = services.metrics.deliveries.labels(session.topic, "", "broadcast")
    return BroadcastFollow(hub.tails, services.store, session, positions, delivered, services.cache,
                           on_growth=lambda count: _send_assignment(session, range(count)),
                           on_error=lambda exc: _close_for(session, exc))


async def _run_broadcast(session: Session, services: Services, topic: TopicMetadata) -> None:
    """Broadcast without a delivery hub (no shared tails): one reader per partition."""
    positions = await resolve_start(services.store, session, topic.partitions)
    session.cursor.update({p: o for p, o in positions.items() if o is not None})
    _send_assignment(session, range(topic.partitions))
    await asyncio.gather(*(follow_partition(services.store, session, p, after, services.metrics)
                           for p, after in positions.items()))


def _send_assignment(session: Session, partitions: Iterable[int], generation: int = 0) -> None:
    session.send_control({"type": "assignment", "generation": generation, "partitions": list(partitions)})


async def _run_shared(session: Session, services: Services, hub: DeliveryHub, group: str, config: GroupConfig,
                      topic: TopicMetadata) -> None:
    """Serve every partition of the topic, also those added while the subscription lasts (until cancelled)."""
    partitions: list[int] = []
    grown = asyncio.Event()
    unwatch = services.cache.watch_growth(topic.name, lambda _count: grown.set())
    try:
        while True:
            current = services.cache.get(topic.name)  # read after the watch is set: no growth slips between
            count = max(topic.partitions, current.partitions if current is not None else 0)
            if count > len(partitions):
                for partition in range(len(partitions), count):
                    await hub.attach(session, partition, group, config)
                    partitions.append(partition)
                _send_assignment(session, partitions)
            await grown.wait()
            grown.clear()
    finally:
        unwatch()
        await _detach_all(hub, session, partitions, group)


async def _run_exclusive(session: Session, services: Services, group: str, config: GroupConfig,
                         topic: TopicMetadata) -> None:
    hub, settings = services.delivery, services.settings
    if hub is None or services.etcd is None:
        raise PartitionerError("exclusive groups need etcd and a delivery hub")

    def partition_count() -> int:
        current = services.cache.get(topic.name)
        return current.partitions if current is not None else topic.partitions

    serving: set[int] = set()
    async with GroupMember(services.etcd, topic=topic.name, group=group, member_id=session.id,
                           node=settings.node_id, partition_count=partition_count, prefix=settings.etcd_prefix,
                           lease_ttl_s=settings.member_lease_ttl_s) as member:
        lost = asyncio.ensure_future(member.wait_lost())
        try:
            while True:
                assignment = await _first(member.next_assignment(), lost, member)
                wanted = set(assignment.partitions)
                for partition in sorted(serving - wanted):
                    await hub.detach(session, partition, group)
                for partition in sorted(wanted - serving):
                    await hub.attach(session, partition, group, config)
                serving = wanted
                _send_assignment(session, sorted(serving), assignment.generation)
                await member.confirm(assignment.generation)
        finally:
            lost.cancel()
            await _detach_all(hub, session, sorted(serving), group)


async def _first(awaitable: Awaitable[Any], lost: asyncio.Future[Any], member: GroupMember) -> Any:
    """The result of ``awaitable`` unless the membership is lost first."""
    task = asyncio.ensure_future(awaitable)
    try:
        await asyncio.wait([task, lost], return_when=asyncio.FIRST_COMPLETED)
    finally:
        if not task.done():
            task.cancel()
    if task.cancelled():
        raise MembershipLost(member.topic, member.group, member.member_id)
    return task.result()


async def _detach_all(hub: DeliveryHub, session: Session, partitions: list[int], group: str) -> None:
    for partition in partitions:
        with contextlib.suppress(StorageError):
            await hub.detach(session, partition, group)


async def _receive_until_stopped(ws: web.WebSocketResponse, session: Session, services: Services,
                                 runner: asyncio.Task[None] | None) -> None:
    """Handle client frames in the handler's own task until the socket closes, the runner ends or a close is asked.

    No receiver task per subscription (issue 8: memory per idle connection): the runner ending or a close request
    cancels this task once, and that one cancellation is absorbed here; any other cancellation propagates.
    ``ws.receive`` is awaited here directly: one coroutine frame less per idle subscription than a helper.
    """
    handler = asyncio.current_task()
    assert handler is not None
    receiving, stopped = True, False

    def stop(_: object) -> None:
        nonlocal receiving, stopped
        if receiving:  # a callback already scheduled when the loop ended must not cancel what follows it
            receiving, stopped = False, True
            handler.cancel()

    if runner is not None:
        runner.add_done_callback(stop)
    session.closing.add_done_callback(stop)
    try:
        while True:
            message = await ws.receive()
            if message.type is WSMsgType.TEXT:
                await _handle_frame(message.data, session, services)
            elif message.type is WSMsgType.BINARY:
                session.send_control(_error("bad-frame", "frames must be JSON text"))
            elif message.type in RECEIVE_END:
                return
    except asyncio.CancelledError:
        if not stopped or handler.uncancel() > 0:
            raise
    except Exception:  # a receive error just ends the subscription
        log.debug("subscription %s: receive failed", session.id, exc_info=True)
    finally:
        receiving = False
        if runner is not None:
            runner.remove_done_callback(stop)
        session.closing.remove_done_callback(stop)


async def _handle_frame(text: str, session: Session, services: Services) -> None:
    try:
        frame = orjson.loads(text)
        action, refs, delay_ms = _parse_settle(frame)
    except (orjson.JSONDecodeError, ValueError) as exc:
        session.send_control(_error("bad-frame", str(exc)))
        return
    if services.delivery is None or session.params.mode is Mode.BROADCAST:
        session.send_control(_error("bad-frame", f"{action} is only meaningful in a group subscription"))
        return
    try:
        await services.delivery.settle(session, refs, action, delay_ms)
    except StorageError as exc:
        session.send_control(_error("unavailable", f"{action} failed, retry: {exc.message}"))


def _parse_settle(frame: Any) -> tuple[str, list[MessageRef], int]:
    if not isinstance(frame, dict) or frame.get("type") not in SETTLE_ACTIONS:
        raise ValueError("expected {\"type\": \"ack\"|\"nack\"|\"extend\", \"messages\": [...]}")
    raw = frame.get("messages")
    if not isinstance(raw, list) or not raw or len(raw) > MAX_REFS_PER_FRAME:
        raise ValueError(f"'messages' must be a list of 1 to {MAX_REFS_PER_FRAME} {{partition, offset}}")
    refs: list[MessageRef] = []
    for item in raw:
        if not isinstance(item, dict) or not isinstance(item.get("partition"), int) \
                or not isinstance(item.get("offset"), str):
            raise ValueError("each message must be {\"partition\": int, \"offset\": str}")
        refs.append((item["partition"], item["offset"]))
    delay_ms = frame.get("delay_ms", 0)
    if not isinstance(delay_ms, int) or isinstance(delay_ms, bool) or not 0 <= delay_ms <= 86_400_000:
        raise ValueError("'delay_ms' must be an integer between 0 and 86400000")
    return str(frame["type"]), refs, delay_ms


def _error(code: str, detail: str) -> dict[str, Any]:
    return {"type": "error", "code": code, "detail": detail}


def add_routes(app: web.Application) -> None:
    """Register the subscription route and the shutdown hook that closes subscriptions."""
    app.router.add_get("/v1/subscribe", subscribe)
    app.on_shutdown.append(close_sessions_on_shutdown)
