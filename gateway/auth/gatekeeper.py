"""The gatekeeper: authenticates credentials and answers authorization questions for the route
handlers; ``authenticate`` runs it on every request and keeps the request's principal."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from contextlib import AsyncExitStack
from pathlib import Path

from aiohttp import hdrs, web
from prometheus_client import CollectorRegistry

from gateway.auth.acl import Acl, Action, selector_claim
from gateway.auth.config import AuthConfig, load_auth_config
from gateway.auth.errors import AuthConfigError, Forbidden, Unauthenticated, UnknownKeyId
from gateway.auth.keys import ApiKeyTable
from gateway.auth.limits import LimitOverrides
from gateway.auth.principal import ANONYMOUS, Principal
from gateway.auth.tokens import looks_like_jwt
from gateway.settings import GatewaySettings

log = logging.getLogger(__name__)

AUTH_MODES = ("required", "none")
OPERATIONAL_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})
# the API descriptions (gateway.routes.health.API_DOCUMENTS)
ALWAYS_PUBLIC_PATHS = frozenset({"/openapi.json", "/asyncapi.json", "/console"})
# the web console's files (gateway.routes.console): its API calls carry the user's credentials
ALWAYS_PUBLIC_PREFIXES = ("/console/",)
READ_ACTIONS = (Action.SUBSCRIBE, Action.ADMIN)
ReadinessCheck = Callable[[], Awaitable[None]]


class Gatekeeper:
    """Who is calling (authentication) and what they may do (authorization), for one gateway
    process."""

    def __init__(self, config: AuthConfig | None, public_paths: Iterable[str] = ()) -> None:
        self.required = config is not None
        self._keys = config.api_keys if config is not None else ApiKeyTable(())
        self._jwt = config.jwt if config is not None else None
        self.acl = config.acl if config is not None else Acl.open()
        self.limit_overrides = config.limits if config is not None else LimitOverrides()
        self.quota_entries = config.quotas if config is not None else ()
        self.public_paths = frozenset(public_paths) | ALWAYS_PUBLIC_PATHS
        self.selector_claims = self._selector_claims()

    def _selector_claims(self) -> frozenset[str]:
        """The JWT claims some principal selector matches on: all a stand-in for a principal's
        credentials (an event token) must carry to be treated as that principal."""
        selectors = (*self.acl.selectors(), *self.limit_overrides.selectors(),
                     *(selector for entry in self.quota_entries for selector in entry.principals))
        return frozenset(claim for claim in map(selector_claim, selectors) if claim is not None)

    async def keep_keys_fresh(self, stack: AsyncExitStack,
                              registry: CollectorRegistry) -> list[tuple[str, ReadinessCheck]]:
        """Start reading the JWKS URL, if the config names one, until ``stack`` closes; its
        metrics go on ``registry``; the readiness checks it adds."""
        remote = self._jwt.remote_keys if self._jwt is not None else None
        if remote is None:
            return []
        await stack.enter_async_context(remote)
        registry.register(remote.collector())
        return [("jwks", remote.check_ready)]

    async def refresh_keys(self) -> None:
        """After UnknownKeyId: wait (bounded) for the JWKS URL to be read again."""
        if self._jwt is not None:
            await self._jwt.refresh_keys()

    # --- authentication ---------------------------------------------------------------------------
    def authenticate_headers(self, headers: Mapping[str, str]) -> Principal | None:
        """The principal proven by ``Authorization``/``X-API-Key``; None when no credentials were
        sent."""
        if not self.required:
            return ANONYMOUS
        api_key = headers.get("X-API-Key")
        authorization = headers.get("Authorization")
        if authorization:
            scheme, _, credentials = authorization.strip().partition(" ")
            credentials = credentials.strip()
            if scheme.lower() == "bearer" and credentials:
                return self.authenticate_token(credentials)
            if scheme.lower() == "apikey" and credentials:
                return self.authenticate_api_key(credentials)
            raise Unauthenticated("Authorization must be 'Bearer <jwt>' or 'ApiKey <key>'",
                                  credentials_given=True)
        if api_key:
            return self.authenticate_api_key(api_key.strip())
        return None

    async def authenticate_token_refreshing(self, token: str) -> Principal:
        """A JWT bearer token's principal, reading the JWKS URL again (bounded) first when the
        token names a key id it lacked."""
        try:
            return self.authenticate_token(token)
        except UnknownKeyId:
            await self.refresh_keys()
        return self.authenticate_token(token)

    def authenticate_token(self, token: str) -> Principal:
        """A JWT bearer token's principal; UnknownKeyId when the JWKS URL may hold its key."""
        if not self.required:
            return ANONYMOUS
        if self._jwt is None or not looks_like_jwt(token):
            raise Unauthenticated("bearer token not accepted", credentials_given=True)
        return self._jwt.verify(token)

    def authenticate_api_key(self, key: str) -> Principal:
        """An API key's principal."""
        if not self.required:
            return ANONYMOUS
        name = self._keys.principal_for(key)
        if name is None:
            raise Unauthenticated("unknown API key", credentials_given=True)
        return Principal(name, "api_key")

    def session_deadline_s(self, principal: Principal) -> float | None:
        """When a subscription of ``principal`` must end: its token's ``exp`` plus the leeway (epoch
        s)."""
        if principal.expires_at_s is None:
            return None
        return principal.expires_at_s + (self._jwt.leeway_s if self._jwt is not None else 0.0)

    # --- authorization ----------------------------------------------------------------------------
    def require(self, principal: Principal, action: Action, topic: str,
                group: str | None = None) -> None:
        """Forbidden unless ``principal`` may do ``action`` on ``topic`` (through ``group``)."""
        if not self.acl.allows(principal, action, topic, group):
            where = f"topic {topic!r}" + (f" with group {group!r}" if group is not None else "")
            raise Forbidden(f"{principal.name!r} may not {action.value} on {where}")

    def require_somewhere(self, principal: Principal, action: Action) -> None:
        """Forbidden unless ``principal`` may do ``action`` on some topic."""
        if not self.acl.allows_somewhere(principal, action):
            raise Forbidden(f"{principal.name!r} may not {action.value} on any topic")

    def require_any(self, principal: Principal, topic: str,
                    actions: Iterable[Action] = tuple(Action), group: str | None = None) -> None:
        """Forbidden unless ``principal`` may do at least one of ``actions`` on ``topic``."""
        if not self.acl.allows_any(principal, topic, actions, group):
            raise Forbidden(f"{principal.name!r} has no access to topic {topic!r}")

    def may_see(self, principal: Principal, topic: str, actions: Iterable[Action] = tuple(Action),
                group: str | None = None) -> bool:
        """Whether ``topic`` (and ``group``) may appear in a listing for ``principal``."""
        return self.acl.allows_any(principal, topic, actions, group)

    def forced_header_names(self) -> frozenset[str]:
        """Every header name a forced filter sets (a tenant's messages carry its values)."""
        return self.acl.forced_header_names()

    def forced_headers(self, principal: Principal) -> dict[str, str]:
        """Headers every message ``principal`` reads or writes must carry ({} when unfiltered)."""
        try:
            return self.acl.forced_headers(principal)
        except ValueError as exc:
            raise Forbidden(str(exc)) from None

    def require_unfiltered(self, principal: Principal, action: str, reach: str) -> None:
        """Forbidden when ``principal`` reads and writes through a forced header filter: ``action``
        reaches ``reach``, every tenant's messages and not only its own."""
        if self.forced_headers(principal):
            raise Forbidden(f"{principal.name!r} works through a forced header filter; {action} "
                            f"reaches {reach}, not only its own: ask a principal without a filter")

    def stamp(self, principal: Principal, headers_of_messages: Iterable[dict[str, str]]) -> None:
        """Set the forced headers on messages that lack them; Forbidden when a message carries
        another value."""
        forced = self.forced_headers(principal)
        if not forced:  # most principals: nothing to stamp, no pass over the messages
            return
        for index, headers in enumerate(headers_of_messages):
            for name, value in forced.items():
                if headers.setdefault(name, value) != value:
                    raise Forbidden(f"message {index}: header {name!r} must be {value!r} for "
                                    f"{principal.name!r}")


def gatekeeper_from_settings(settings: GatewaySettings, env: Mapping[str, str]) -> Gatekeeper:
    """Build the gatekeeper the settings ask for; AuthConfigError when they do not make sense."""
    if settings.auth_mode not in AUTH_MODES:
        raise AuthConfigError(f"STREAMGATE_AUTH_MODE={settings.auth_mode!r}: expected one of "
                              f"{AUTH_MODES}")
    unknown = set(settings.auth_public_paths) - OPERATIONAL_PATHS
    if unknown:
        raise AuthConfigError(f"STREAMGATE_AUTH_PUBLIC_PATHS: only {sorted(OPERATIONAL_PATHS)} may "
                              f"be public, not {sorted(unknown)}")
    if settings.auth_mode == "none":
        log.warning("AUTHENTICATION IS OFF: auth_mode=none (STREAMGATE_AUTH_MODE); every request "
                    "is served as %r with full access. Never run like this where the gateway is "
                    "reachable by others.",
                    ANONYMOUS.name)
        return Gatekeeper(None, OPERATIONAL_PATHS)
    if not settings.auth_config_path:
        raise AuthConfigError("auth_mode=required needs STREAMGATE_AUTH_CONFIG_PATH (the auth TOML "
                              "file); set STREAMGATE_AUTH_MODE=none only for local development")
    config = load_auth_config(Path(settings.auth_config_path), env)
    log.info("auth required: %d API keys, JWT %s, %d rate-limit overrides, public paths %s",
             len(config.api_keys), "on" if config.jwt is not None else "off", len(config.limits),
             sorted(settings.auth_public_paths))
    return Gatekeeper(config, settings.auth_public_paths)


GATEKEEPER = web.AppKey("gatekeeper", Gatekeeper)
PRINCIPAL = web.RequestKey("principal", Principal)
# WebSocket routes that accept an ``auth`` first frame
FRAME_AUTH_PATHS = frozenset({"/v1/subscribe", "/v1/publish"})
# routes a browser's EventSource opens: an event token in the query may stand for credentials
QUERY_TOKEN_ROUTES = frozenset({"/v1/topics/{topic}/events"})
QUERY_TOKEN = "access_token"


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


def _carries_query_token(request: web.Request) -> bool:
    """True for a request to a route that accepts an event token in its query, carrying one: the
    route checks it (``gateway.routes.event_tokens``)."""
    resource = request.match_info.route.resource
    return (resource is not None and resource.canonical in QUERY_TOKEN_ROUTES
            and QUERY_TOKEN in request.query)


def authenticate(request: web.Request) -> Awaitable[None] | None:
    """Authenticate a request to a non-public route and keep its principal; 401 (raised) without
    credentials.

    None when done, the usual case, with no await; an awaitable to finish it when the request's
    token names a key id the JWKS URL may have published since it was read.
    A WebSocket upgrade to a frame-auth route may come without credentials: its first frame carries
    them.
    """
    gatekeeper = gatekeeper_of(request)
    path = request.path
    if (request.match_info.http_exception is not None or path in gatekeeper.public_paths
            or path.startswith(ALWAYS_PUBLIC_PREFIXES)):
        return None
    try:
        principal = gatekeeper.authenticate_headers(request.headers)
    except UnknownKeyId:
        return _authenticate_after_refresh(request, gatekeeper)
    _keep_principal(request, principal)
    return None


async def _authenticate_after_refresh(request: web.Request, gatekeeper: Gatekeeper) -> None:
    await gatekeeper.refresh_keys()
    _keep_principal(request, gatekeeper.authenticate_headers(request.headers))


def _keep_principal(request: web.Request, principal: Principal | None) -> None:
    if principal is not None:
        request[PRINCIPAL] = principal
    elif not ((request.path in FRAME_AUTH_PATHS and _is_websocket_upgrade(request))
              or _carries_query_token(request)):
        raise Unauthenticated(
            "credentials required: 'Authorization: Bearer <jwt>', 'Authorization: ApiKey "
            "<key>' or 'X-API-Key: <key>'"
        )
