"""``GET /v1/publish``: a WebSocket for publishing, many frames in flight over one connection,
each through the same publish flow as ``POST /v1/topics/{topic}/messages``.

Credentials as for subscriptions: on the upgrade request, or an ``auth`` frame first. Once
authenticated the gateway sends a ``ready`` frame with the in-flight limits; then ``publish`` frames
are answered by ``published`` or ``problem`` frames carrying their id, and a later ``auth`` frame
with a fresh token moves a JWT socket's expiry (docs/websocket.md, gateway/asyncapi.json).
"""

from __future__ import annotations

import contextlib
from typing import Any

import orjson
from aiohttp import web

from gateway.auth.acl import Action
from gateway.auth.errors import AuthError
from gateway.auth.gatekeeper import Gatekeeper, awaits_auth_frame, gatekeeper_of, principal_of
from gateway.auth.principal import Principal
from gateway.delivery.reauth import SocketCredential
from gateway.delivery.upgrade import handshake
from gateway.delivery.websocket import LeanWebSocket
from gateway.delivery.wire import authenticated_frame
from gateway.errors import (
    WS_CLOSE_TOO_MANY_CONNECTIONS,
    close_code_for,
    too_many_connections,
)
from gateway.publish.channel import PublishChannel
from gateway.publish.frames import ENVELOPE_BYTES
from gateway.publish.socket import PublishSocket
from gateway.routes.subscribe import principal_from_first_frame, serve_upgrade, too_many
from gateway.services import Services, services_of


async def publish_socket(request: web.Request) -> web.StreamResponse:
    """Upgrade to a publishing WebSocket and serve it; returns once it is handed over."""
    services, gatekeeper = services_of(request), gatekeeper_of(request)
    settings = services.settings
    principal = None if awaits_auth_frame(request) else principal_of(request)
    if principal is not None:
        # each frame's topic is checked as it comes; a principal who may publish nowhere
        # is refused before the upgrade
        gatekeeper.require_somewhere(principal, Action.PUBLISH)
        if services.connections.full(principal.name):
            raise too_many_connections(too_many(services, principal), settings.retry_after_s)
    answer = handshake(request.headers, settings.ws_compression)
    return await serve_upgrade(request, services, answer,
                               settings.max_batch_bytes + ENVELOPE_BYTES, principal is None,
                               lambda socket: _serve(socket, services, gatekeeper, principal))


async def _serve(socket: LeanWebSocket, services: Services, gatekeeper: Gatekeeper,
                 principal: Principal | None) -> None:
    """Authenticate by frame if needed, take a connection slot, say ``ready`` and serve."""
    if principal is None:
        try:
            principal = await _principal_by_frame(socket, services, gatekeeper)
        finally:
            services.connections.release_unauthenticated()
        if principal is None:
            return
    if not services.connections.acquire(principal.name):
        socket.close(WS_CLOSE_TOO_MANY_CONNECTIONS, too_many(services, principal))
        return
    name = principal.name
    channel = PublishChannel(services, gatekeeper, principal, socket.send_texts)
    served = PublishSocket(socket, channel, lambda: services.connections.release(name),
                           _credential(socket, gatekeeper, principal, channel),
                           services.subscriptions, services.metrics.websocket_connections)
    # a client gone already: the cleanup its close starts releases the slot
    with contextlib.suppress(ConnectionResetError):
        await socket.send_texts([orjson.dumps(channel.ready_frame())])
    socket.serve(served)


def _credential(socket: LeanWebSocket, gatekeeper: Gatekeeper, principal: Principal,
                channel: PublishChannel) -> SocketCredential:
    """The socket's credential: a fresh token's claims must still let it publish somewhere, and
    the frames after it are checked for them."""
    def regrant(fresh: Principal) -> None:
        gatekeeper.require_somewhere(fresh, Action.PUBLISH)
        channel.use_principal(fresh)

    def reply(frame: dict[str, Any]) -> None:
        channel.send_soon(orjson.dumps(frame))

    def close(code: int, reason: str) -> None:
        channel.send_soon(_close(socket, code, reason))  # after the answers queued before it

    return SocketCredential(gatekeeper, principal, close, reply, regrant)


async def _close(socket: LeanWebSocket, code: int, reason: str) -> None:
    socket.close(code, reason)


async def _principal_by_frame(socket: LeanWebSocket, services: Services,
                              gatekeeper: Gatekeeper) -> Principal | None:
    """The principal of the first frame; on failure the socket closes with 4401 and None."""
    try:
        principal = await principal_from_first_frame(socket, gatekeeper,
                                                     services.settings.auth_frame_timeout_s)
        gatekeeper.require_somewhere(principal, Action.PUBLISH)
    except AuthError as exc:
        socket.close(close_code_for(exc), exc.message)
        return None
    except ConnectionResetError:  # the client went away
        return None
    await socket.send_texts([orjson.dumps(authenticated_frame(principal.name))])
    return principal


def add_routes(app: web.Application) -> None:
    """Register the publishing WebSocket's route."""
    app.router.add_get("/v1/publish", publish_socket)
