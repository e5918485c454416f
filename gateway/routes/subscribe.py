"""``GET /v1/subscribe``: WebSocket subscriptions in exclusive, shared or broadcast mode.

Parameters are validated before the upgrade (problem+json 4xx). After it, the server sends
``authenticated``, ``assignment``, ``message``/``messages`` and ``error`` frames; the client sends
``auth``, ``ack``, ``nack`` and ``extend`` frames. See docs/websocket.md and gateway/asyncapi.json.
The upgrade hands the connection to a lean WebSocket (gateway.delivery.upgrade) and the handler
returns once the subscription is served (gateway.delivery.subscription): nothing of aiohttp's stays
per connection.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import uuid
from collections.abc import Awaitable, Callable

import orjson
from aiohttp import web

from gateway.auth.acl import Action
from gateway.auth.errors import AuthError, Unauthenticated
from gateway.auth.gatekeeper import Gatekeeper, awaits_auth_frame, gatekeeper_of, principal_of
from gateway.auth.principal import Principal
from gateway.delivery.params import Mode, SubscribeParams, parse_subscribe_params
from gateway.delivery.reauth import SocketCredential
from gateway.delivery.session import Session
from gateway.delivery.subscription import ServedSubscription, close_subscriptions
from gateway.delivery.upgrade import (
    Handshake,
    UpgradedResponse,
    detach_handler,
    handshake,
    upgrade,
)
from gateway.delivery.websocket import LeanWebSocket
from gateway.delivery.wire import authenticated_frame
from gateway.errors import (
    WS_CLOSE_TOO_MANY_CONNECTIONS,
    WS_CLOSE_UNAVAILABLE,
    Problem,
    close_code_for,
    too_many_connections,
    unavailable,
)
from gateway.publish.channel import PublishChannel
from gateway.publish.socket import publish_frame_or_error
from gateway.routes.admission import admit, admit_group, admit_or_refuse
from gateway.routes.schema_reads import pinned_version
from gateway.routes.tenancy import bind_group
from gateway.services import SERVICES, Services, services_of
from gateway.throttle import RateAction
from partitioner.errors import PartitionerError
from partitioner.topics import TopicMetadata
from storage.errors import StorageError

log = logging.getLogger(__name__)

Authorized = tuple[Principal, SubscribeParams, TopicMetadata]


async def subscribe(request: web.Request) -> web.StreamResponse:
    """Upgrade to a WebSocket and start serving the subscription; returns once it is served.

    With credentials in the upgrade request, authorization (403) comes before the topic lookup (404)
    and both before the upgrade. Without, the socket is upgraded first, if fewer than
    ``max_unauthenticated_connections`` sockets await their auth frame (else 503), and the first
    frame must be ``auth``.
    """
    services = services_of(request)
    params = parse_subscribe_params(request.query)
    if params.mode is not Mode.BROADCAST and services.delivery is None:
        raise unavailable("consumer groups are not available on this gateway",
                          services.settings.retry_after_s)
    settings = services.settings
    gatekeeper = gatekeeper_of(request)
    authorized: Authorized | None = None
    if not awaits_auth_frame(request):
        principal = principal_of(request)
        authorized = principal, *await authorize_subscription(services, gatekeeper, principal,
                                                              params)
        if services.connections.full(principal.name):
            raise too_many_connections(too_many(services, principal), settings.retry_after_s)
    # A request that is not a WebSocket handshake is refused before the rate limit charges anything.
    # permessage-deflate only if the client asks
    answer = handshake(request.headers, settings.ws_compression)
    if authorized is not None:
        await admit_or_refuse(services, authorized[0], RateAction.SUBSCRIBE)
    return await serve_upgrade(
        request, services, answer, settings.ws_max_frame_bytes, authorized is None,
        lambda socket: _serve_upgraded(socket, services, gatekeeper, params, authorized))


async def serve_upgrade(request: web.Request, services: Services, answer: Handshake,
                        max_message_bytes: int, by_frame: bool,
                        serve: Callable[[LeanWebSocket], Awaitable[None]]) -> web.StreamResponse:
    """Upgrade (taking one of the slots of sockets awaiting an auth frame when ``by_frame``: 503
    when none is left), ``serve`` the socket (which gives that slot back), and hand the connection
    over; a failure to serve closes the socket with 4503."""
    settings = services.settings
    if by_frame and not services.connections.acquire_unauthenticated():
        raise unavailable(f"{services.connections.unauthenticated} connections already await "
                          "their auth frame on this gateway (max_unauthenticated_connections)",
                          settings.retry_after_s)
    try:
        socket = upgrade(request, answer, max_message_bytes, settings.ws_heartbeat_s)
    except BaseException:
        if by_frame:
            services.connections.release_unauthenticated()
        raise
    try:
        await serve(socket)
    except Exception:
        log.exception("WebSocket setup failed: %s", request.path)
        socket.close(WS_CLOSE_UNAVAILABLE, "internal error")
    except BaseException:
        socket.abort()
        detach_handler(request)
        raise
    return UpgradedResponse()


async def _serve_upgraded(socket: LeanWebSocket, services: Services, gatekeeper: Gatekeeper,
                          params: SubscribeParams, authorized: Authorized | None) -> None:
    """Authenticate by frame if needed (the socket's unauthenticated slot is released whatever the
    outcome), take a connection slot, charge the rate limit, and start serving."""
    by_frame = authorized is None
    if authorized is None:
        try:
            authorized = await _authorize_by_frame(socket, services, gatekeeper, params)
        finally:
            services.connections.release_unauthenticated()
        if authorized is None:
            return
    principal, params, topic = authorized
    if not services.connections.acquire(principal.name):
        socket.close(WS_CLOSE_TOO_MANY_CONNECTIONS, too_many(services, principal))
        return
    try:
        # As with header credentials: the connection cap first, then the subscribe rate limit.
        admitted = not by_frame or await _admitted_after_upgrade(socket, services, principal)
    except BaseException:
        services.connections.release(principal.name)
        raise
    if not admitted:
        services.connections.release(principal.name)
        return
    settings = services.settings
    session = Session(f"{settings.node_id}-{uuid.uuid4().hex[:12]}", topic.name, params,
                      socket.send_texts, settings.slow_client_timeout_s,
                      settings.ws_max_outbox_bytes)
    await _count_in_flight(services, principal, params, session)
    channel = PublishChannel(services, gatekeeper, principal, socket.send_texts)
    served = ServedSubscription(socket, session, services.delivery_ports(),
                                lambda: services.connections.release(principal.name),
                                _credential(gatekeeper, principal, params, session, channel),
                                functools.partial(publish_frame_or_error, channel))
    await served.start(topic)


async def _count_in_flight(services: Services, principal: Principal, params: SubscribeParams,
                     session: Session) -> None:
    """Put a group session's un-acked deliveries under its principal's (or tenant's) in-flight
    quota; broadcast and auto-ack deliveries hold nothing."""
    quota = services.in_flight_quota
    if quota is None or params.mode is Mode.BROADCAST or params.auto_ack:
        return
    window = await quota.known_window(services.quota_rules.subject_for(principal))
    if window is not None:
        session.use_quota(window)


def _credential(gatekeeper: Gatekeeper, principal: Principal, params: SubscribeParams,
                session: Session, channel: PublishChannel) -> SocketCredential:
    """The subscription's credential: a fresh token's claims must still grant its topic and
    group; the frames it publishes are checked for the fresh token's principal."""
    def regrant(fresh: Principal) -> None:
        gatekeeper.require(fresh, Action.SUBSCRIBE, params.topic, params.group)
        channel.use_principal(fresh)

    return SocketCredential(gatekeeper, principal, session.request_close, session.send_control,
                            regrant)


async def _admitted_after_upgrade(socket: LeanWebSocket, services: Services,
                                  principal: Principal) -> bool:
    """Charge the subscribe rate limit of a principal known only after the upgrade; refused -> close
    4429."""
    try:
        decision = await admit(services, principal, RateAction.SUBSCRIBE)
    except StorageError as exc:
        socket.close(close_code_for(exc), exc.message)
        return False
    if not decision.allowed:
        socket.close(WS_CLOSE_TOO_MANY_CONNECTIONS,
                     f"{decision.reason}; retry in {decision.retry_after_s} s")
    return decision.allowed


def too_many(services: Services, principal: Principal) -> str:
    """Why ``principal`` may open no more WebSockets here."""
    return (f"{principal.name!r} already holds "
            f"{services.connections.open_count(principal.name)} WebSockets on "
            f"this gateway (max_connections_per_principal)")


async def authorize_subscription(services: Services, gatekeeper: Gatekeeper,
                                 principal: Principal, params: SubscribeParams
                                 ) -> tuple[SubscribeParams, TopicMetadata]:
    """Check the ACL (403), then find the topic (404) and the schema version pinned (404, 409),
    then the principal's groups cap (403 groups-limit) and the group's filter binding (403); the
    principal's forced filter is ANDed in."""
    gatekeeper.require(principal, Action.SUBSCRIBE, params.topic, params.group)
    forced = gatekeeper.forced_headers(principal)
    params = (dataclasses.replace(params, filter=params.filter.and_headers(forced)) if forced
              else params)
    topic = await services.topic(params.topic)
    if params.schema_version is not None:
        params = dataclasses.replace(
            params, pinned=pinned_version(services, topic, params.schema_version))
    if params.group is not None:
        await admit_group(services, principal, topic.name, params.group)
        await bind_group(services, gatekeeper, principal, topic, params.group)
    return params, topic


async def _authorize_by_frame(socket: LeanWebSocket, services: Services, gatekeeper: Gatekeeper,
                              params: SubscribeParams) -> Authorized | None:
    """Authenticate with the first frame; on failure close with 4401/4403/4404 and return None."""
    try:
        principal = await principal_from_first_frame(socket, gatekeeper,
                                                      services.settings.auth_frame_timeout_s)
        params, topic = await authorize_subscription(services, gatekeeper, principal, params)
    except (AuthError, StorageError, PartitionerError) as exc:
        socket.close(close_code_for(exc), exc.message)  # close_payload cuts it to fit
        return None
    except Problem as exc:  # e.g. a schema_version the topic lacks: 4404, 4409
        socket.close(4000 + exc.status, exc.detail)
        return None
    except ConnectionResetError:  # the client went away
        return None
    await socket.send_texts([orjson.dumps(authenticated_frame(principal.name))])
    return principal, params, topic


async def principal_from_first_frame(socket: LeanWebSocket, gatekeeper: Gatekeeper,
                                      timeout_s: float) -> Principal:
    """The principal of a ``{"type": "auth", "token": <jwt>}`` or ``{"type": "auth", "api_key":
    <key>}`` frame."""
    try:
        message = await socket.receive(timeout_s)
    except TimeoutError:
        raise Unauthenticated(f"no auth frame within {timeout_s:g} s") from None
    try:
        frame = orjson.loads(message) if isinstance(message, str) else None
    except orjson.JSONDecodeError:
        frame = None
    if not isinstance(frame, dict) or frame.get("type") != "auth":
        raise Unauthenticated("the first frame must be "
                              "{\"type\": \"auth\", \"token\" | \"api_key\": ...}")
    token, api_key = frame.get("token"), frame.get("api_key")
    if isinstance(token, str) and token:
        return await gatekeeper.authenticate_token_refreshing(token)
    if isinstance(api_key, str) and api_key:
        return gatekeeper.authenticate_api_key(api_key)
    raise Unauthenticated("the auth frame needs a non-empty 'token' or 'api_key'")


async def close_sessions_on_shutdown(app: web.Application) -> None:
    """Ask every open subscription to close with 1001 so clients reconnect elsewhere and resume."""
    services = app.get(SERVICES)
    if services is not None:
        await close_subscriptions(services.subscriptions)


def add_routes(app: web.Application) -> None:
    """Register the subscription route and the shutdown hook that closes subscriptions."""
    app.router.add_get("/v1/subscribe", subscribe)
    app.on_shutdown.append(close_sessions_on_shutdown)
