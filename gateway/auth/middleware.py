"""The aiohttp side of auth: authenticating every request (``authenticate``, called by the gateway's
middleware) and keeping its principal."""

from __future__ import annotations

from aiohttp import hdrs, web

from gateway.auth.errors import Unauthenticated
from gateway.auth.gatekeeper import Gatekeeper
from gateway.auth.principal import Principal

GATEKEEPER = web.AppKey("gatekeeper", Gatekeeper)
PRINCIPAL = web.RequestKey("principal", Principal)
# WebSocket routes that accept an ``auth`` first frame
FRAME_AUTH_PATHS = frozenset({"/v1/subscribe"})


def gatekeeper_of(request: web.Request) -> Gatekeeper:
    """The gatekeeper of the app serving ``request``."""
    return request.app[GATEKEEPER]


def principal_of(request: web.Request) -> Principal:
    """The authenticated principal of ``request`` (set by ``authenticate``)."""
    try:  # one lookup: ``in`` on a request is collections.abc's, a lookup of its own
        return request[PRINCIPAL]
    except KeyError:
        raise Unauthenticated("credentials required") from None


def awaits_auth_frame(request: web.Request) -> bool:
    """True for a WebSocket upgrade without credentials: the client must send an ``auth`` frame
    first."""
    return PRINCIPAL not in request


def _is_websocket_upgrade(request: web.Request) -> bool:
    return request.headers.get(hdrs.UPGRADE, "").lower() == "websocket"


def authenticate(request: web.Request) -> None:
    """Authenticate a request to a non-public route and keep its principal; 401 (raised) without
    credentials.

    A WebSocket upgrade to a frame-auth route may come without credentials: its first frame carries
    them.
    """
    gatekeeper = gatekeeper_of(request)
    if request.match_info.http_exception is not None or request.path in gatekeeper.public_paths:
        return
    principal = gatekeeper.authenticate_headers(request.headers)
    if principal is not None:
        request[PRINCIPAL] = principal
    elif not (request.path in FRAME_AUTH_PATHS and _is_websocket_upgrade(request)):
        raise Unauthenticated(
            "credentials required: 'Authorization: Bearer <jwt>', 'Authorization: ApiKey "
            "<key>' or 'X-API-Key: <key>'"
        )
