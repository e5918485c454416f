"""A socket's token refresh timer: a due token replaced by an auth frame, armed again only once the
gateway answered, stopped by a provider with nothing fresh and by the socket's close."""

from __future__ import annotations

import asyncio
import time

import jwt
import orjson

from streamgate_client.credentials import Credentials, auth_headers
from streamgate_client.token_refresh import SocketTokenRefresh


def token(exp_in_s: float, sub: str = "app") -> str:
    now = time.time()
    return jwt.encode({"sub": sub, "iat": int(now), "exp": int(now + exp_in_s)}, "k" * 32,
                      algorithm="HS256")


class Provider:
    """Hands out its tokens in turn, the last one again when they run out."""

    def __init__(self, *tokens: str) -> None:
        self.tokens = list(tokens)
        self.calls = 0

    def __call__(self) -> str:
        self.calls += 1
        return self.tokens[min(self.calls, len(self.tokens)) - 1]


async def settled() -> None:
    for _ in range(10):
        await asyncio.sleep(0)


async def test_a_due_token_is_replaced_over_the_socket_and_armed_again_once_answered() -> None:
    due, fresh = token(-1), token(600)
    credentials = Credentials(token=Provider(due, fresh))
    held = await credentials.headers()
    sent: list[bytes] = []
    refresh = SocketTokenRefresh(credentials, held, sent.append)
    await settled()
    assert [orjson.loads(frame) for frame in sent] == [{"type": "auth", "token": fresh}]
    assert (refresh.auth, refresh.refreshes) == (held, 0)  # not before the gateway answers
    refresh.authenticated({"type": "authenticated", "principal": "app"})
    await settled()
    assert (refresh.auth, refresh.refreshes, len(sent)) == (auth_headers(token=fresh), 1, 1)
    refresh.cancel()


async def test_a_provider_with_nothing_fresh_sends_nothing() -> None:
    stale = token(-1)
    credentials = Credentials(token=Provider(stale))
    sent: list[bytes] = []
    refresh = SocketTokenRefresh(credentials, await credentials.headers(), sent.append)
    await settled()
    assert sent == []
    assert refresh.refreshes == 0


async def test_a_fixed_token_or_an_api_key_arms_no_timer() -> None:
    for credentials in (Credentials(token=token(-1)), Credentials(api_key="sgk_x")):
        sent: list[bytes] = []
        SocketTokenRefresh(credentials, await credentials.headers(), sent.append)
        await settled()
        assert sent == []


async def test_a_closed_socket_sends_no_fresh_token() -> None:
    credentials = Credentials(token=Provider(token(-1), token(600)))
    sent: list[bytes] = []
    refresh = SocketTokenRefresh(credentials, await credentials.headers(), sent.append)
    refresh.cancel()
    await settled()
    assert sent == []
