"""How the Python client proves who it is: an API key, a fixed JWT, or a token provider whose JWT is
refreshed shortly before it expires and whenever the gateway refuses it; and how a gateway refusing
a TLS client certificate shows."""

from __future__ import annotations

import asyncio
import base64
import binascii
import inspect
import math
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import orjson

from streamgate_client.errors import ClientError, ConnectionFailed, ProblemError, request_body

TokenProvider = Callable[[], str | Awaitable[str]]
# a provider's JWT is asked for again when less than this is left of it, or a tenth of its life
REFRESH_MARGIN_S = 30.0
REFRESH_MARGIN_SHARE = 0.1


def auth_headers(api_key: str | None = None, token: str | None = None) -> dict[str, str]:
    """The ``Authorization`` header for a token (preferred) or an API key; {} when neither is
    given."""
    if token:
        return {"Authorization": f"Bearer {token}"}
    if api_key:
        return {"Authorization": f"ApiKey {api_key}"}
    return {}


def tls_hint(url: str, error: BaseException) -> str:
    """What a connection dropped before any answer may mean over TLS (the client does not learn
    why: with TLS 1.3 the server checks the client's certificate after the handshake)."""
    if isinstance(error, aiohttp.ServerDisconnectedError) and url.startswith(("https:", "wss:")):
        return ("; a gateway that requires client certificates drops connections without a valid "
                "one (pass ssl= an SSLContext with load_cert_chain)")
    return ""


def refresh_due_s(token: str, now_s: float) -> float:
    """When a JWT should be replaced (epoch seconds): its ``exp`` less the refresh margin; infinity
    for a token that is not a JWT with an ``exp`` (used until the gateway refuses it). The payload
    is read, not verified: only the gateway can tell whether the token is good."""
    claims = _payload(token)
    exp = claims.get("exp")
    if not isinstance(exp, int | float) or isinstance(exp, bool):
        return math.inf
    iat = claims.get("iat")
    issued = iat if isinstance(iat, int | float) and not isinstance(iat, bool) else now_s
    life_s = max(0.0, exp - min(issued, exp))
    return exp - min(REFRESH_MARGIN_S, REFRESH_MARGIN_SHARE * life_s)


def bearer_token(headers: dict[str, str]) -> str | None:
    """The JWT an ``Authorization: Bearer`` header carries; None for an API key or no header."""
    scheme, _, token = headers.get("Authorization", "").partition(" ")
    return token if scheme == "Bearer" and token else None


def _payload(token: str) -> dict[str, object]:
    parts = token.split(".")
    if len(parts) != 3:
        return {}
    try:
        claims = orjson.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except (binascii.Error, ValueError):
        return {}
    return claims if isinstance(claims, dict) else {}


class Credentials:
    """The ``Authorization`` header of one client. ``token`` is a JWT or a provider of them
    (``Callable[[], str | Awaitable[str]]``, preferred over ``api_key``). A provider's token is
    cached and shared: it is asked again (once for all concurrent callers) when the cached JWT
    nears its ``exp`` or after ``forget`` (the gateway refused it). A provider that raises is
    asked again next time; each caller waiting on it gets ``ConnectionFailed`` from its error."""

    def __init__(self, api_key: str | None = None,
                 token: str | TokenProvider | None = None) -> None:
        self._provider = token if callable(token) else None
        self._headers: dict[str, str] | None = (
            None if self._provider is not None
            else auth_headers(api_key, token if isinstance(token, str) else None))
        self._refresh_at_s = math.inf
        self._asking: asyncio.Task[dict[str, str]] | None = None

    @property
    def refreshable(self) -> bool:
        """Whether a refused token can be replaced by asking the provider."""
        return self._provider is not None

    def cached(self) -> dict[str, str] | None:
        """The headers to send now, without waiting; None when the provider must be asked."""
        headers = self._headers
        if headers is not None and (self._refresh_at_s == math.inf
                                    or time.time() < self._refresh_at_s):
            return headers
        return None

    async def headers(self) -> dict[str, str]:
        """The headers to send now, asking the provider first when its token is missing or due."""
        headers = self.cached()
        if headers is not None:
            return headers
        if self._asking is None:
            self._asking = asyncio.ensure_future(self._ask())
        try:
            return await asyncio.shield(self._asking)
        except ClientError:
            raise
        except Exception as exc:
            raise ConnectionFailed(f"the token provider failed: {type(exc).__name__}: {exc}"
                                   ) from exc

    def fresh_token_may_fix(self, error: BaseException) -> bool:
        """Whether ``error`` is the gateway refusing a provider's token (a 401, or a socket closed
        with 4401), which a fresh token may fix."""
        return (self._provider is not None and isinstance(error, ProblemError)
                and error.status == 401)

    def forget(self, refused: dict[str, str]) -> None:
        """The gateway refused these headers: the next use asks the provider (unless another
        caller has replaced them already)."""
        if self._provider is not None and self._headers == refused:
            self._headers = None

    async def _ask(self) -> dict[str, str]:
        assert self._provider is not None
        try:
            token = self._provider()
            if inspect.isawaitable(token):
                token = await token
            if not isinstance(token, str) or not token:
                raise TypeError(f"the token provider returned {type(token).__name__}, not a token")
            self._refresh_at_s = refresh_due_s(token, time.time())
            self._headers = auth_headers(token=token)
            return self._headers
        finally:
            self._asking = None


async def authorized_body(credentials: Credentials, session: aiohttp.ClientSession, method: str,
                          url: str, *, headers: dict[str, str] | None = None,
                          refresh_once: bool = True, **options: Any) -> bytes:
    """``request_body`` with the credentials' header added to ``headers``. A 401 makes the
    credentials forget the token it carried; with a provider (and ``refresh_once``) the request
    is sent once more with a fresh one."""
    auth = credentials.cached()
    if auth is None:
        auth = await credentials.headers()
    try:
        return await request_body(session, method, url, headers={**auth, **(headers or {})},
                                  **options)
    except ProblemError as exc:
        if exc.status == 401:
            credentials.forget(auth)
        if not (refresh_once and credentials.fresh_token_may_fix(exc)):
            raise
    except ConnectionFailed as exc:
        hint = "" if exc.__cause__ is None else tls_hint(url, exc.__cause__)
        if not hint:
            raise
        raise ConnectionFailed(f"{exc}{hint}") from exc.__cause__
    return await authorized_body(credentials, session, method, url, headers=headers,
                                 refresh_once=False, **options)
