"""A fresh token sent over an open socket: subscriptions and publish sockets outlive their first
token; another principal, a lost grant, an expired token or a flood of auth frames close them."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import aiohttp
import jwt
import pytest
from auth_config import JWT_SECRET_ENV, Client, api_keys, hs256_jwt, rule, secured_client
from processes import until_ready

from gateway.delivery.reauth import AUTH_FRAME_BURST
from gateway.errors import (
    WS_CLOSE_FORBIDDEN,
    WS_CLOSE_TOO_MANY_CONNECTIONS,
    WS_CLOSE_UNAUTHENTICATED,
)
from gateway.settings import GatewaySettings
from tests.jwks_idp import serving_jwks

pytestmark = pytest.mark.integration

Socket = aiohttp.ClientWebSocketResponse
SECRET = "r" * 40
ADMIN_KEY = "sgk_admin-key-for-reauth-tests"
ADMIN = {"Authorization": f"ApiKey {ADMIN_KEY}"}
# ops-bot's grant comes from a claim, so a fresh token of the same principal may lose it
CONFIG = (hs256_jwt() + "leeway_s = 0\n\n" + api_keys({"admin": ADMIN_KEY})
          + rule(["admin", "app", "other"], ["*"], ["publish", "subscribe", "admin"])
          + rule(["claim:team=ops"], ["it-*"], ["publish", "subscribe"]))


def token(sub: str = "app", exp: float | None = None, **claims: Any) -> str:
    body = {"sub": sub, "aud": "streamgate", "exp": int(exp or time.time() + 300), **claims}
    return jwt.encode(body, SECRET, algorithm="HS256")


def bearer(jwt_token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {jwt_token}"}


@pytest.fixture
async def secured(aiohttp_client: Any, gateway_settings: GatewaySettings, tmp_path: Path) -> Client:
    return await secured_client(aiohttp_client, gateway_settings, tmp_path, CONFIG,
                                {JWT_SECRET_ENV: SECRET})


@pytest.fixture
async def topic(secured: Client, topic_name: str) -> str:
    response = await secured.post("/v1/topics", json={"name": topic_name, "partitions": 1},
                                  headers=ADMIN)
    assert response.status == 201, await response.text()
    return topic_name


async def publish(secured: Client, topic: str, value: int) -> None:
    response = await secured.post(f"/v1/topics/{topic}/messages",
                                  json={"messages": [{"value": value}]}, headers=ADMIN)
    assert response.status == 200, await response.text()


async def next_frame(ws: Socket, kind: str) -> dict[str, Any]:
    """The next frame of type ``kind``, skipping the others (assignment, ready)."""
    while True:
        frame: dict[str, Any] = await ws.receive_json(timeout=10)
        if frame["type"] == kind:
            return frame


async def refresh(ws: Socket, exp: float, sub: str = "app", **claims: Any) -> None:
    """Send a fresh token living until ``exp``; it is answered with that expiry."""
    await ws.send_json({"type": "auth", "token": token(sub, exp, **claims)})
    assert await next_frame(ws, "authenticated") == {
        "type": "authenticated", "principal": sub, "expires_at_s": int(exp)}


async def sleep_until(epoch_s: float) -> None:
    await asyncio.sleep(max(0.0, epoch_s - time.time()))


async def closed_with(ws: Socket) -> int | None:
    while True:
        frame = await ws.receive(timeout=10)
        if frame.type is not aiohttp.WSMsgType.TEXT:
            assert frame.type is aiohttp.WSMsgType.CLOSE, frame
            return ws.close_code


async def test_a_subscription_refreshed_twice_outlives_both_tokens(secured: Client,
                                                                   topic: str) -> None:
    expires = int(time.time() + 3)
    async with secured.ws_connect(f"/v1/subscribe?topic={topic}&from=earliest",
                                  headers=bearer(token(exp=expires))) as ws:
        await publish(secured, topic, 0)
        assert (await next_frame(ws, "message"))["value"] == 0
        for value in (1, 2):
            await sleep_until(expires - 1)
            previous, expires = expires, int(time.time() + 3)
            await refresh(ws, expires)
            await sleep_until(previous + 0.5)  # the token it opened or last refreshed with expired
            await publish(secured, topic, value)
            assert (await next_frame(ws, "message"))["value"] == value
        assert not ws.closed


async def test_a_publish_socket_refreshed_by_frame_outlives_its_first_token(
        secured: Client, topic: str) -> None:
    expires = int(time.time() + 3)
    async with secured.ws_connect("/v1/publish") as ws:
        await ws.send_json({"type": "auth", "token": token(exp=expires)})
        assert (await next_frame(ws, "authenticated"))["principal"] == "app"
        await next_frame(ws, "ready")
        await sleep_until(expires - 1)
        await refresh(ws, time.time() + 3)
        await sleep_until(expires + 0.5)
        await ws.send_json({"type": "publish", "id": "1", "topic": topic,
                            "messages": [{"value": 1}]})
        assert (await next_frame(ws, "published"))["id"] == "1"


@pytest.mark.parametrize("path", ["/v1/subscribe?topic={topic}", "/v1/publish"])
@pytest.mark.parametrize(("fresh", "code"), [
    ({"sub": "other"}, WS_CLOSE_FORBIDDEN),
    ({"exp": 1_000_000_000}, WS_CLOSE_UNAUTHENTICATED),
    ({"sub": "app", "signed_with": "x" * 40}, WS_CLOSE_UNAUTHENTICATED),
])
async def test_a_refresh_of_another_principal_or_an_invalid_token_closes_the_socket(
        secured: Client, topic: str, path: str, fresh: dict[str, Any], code: int) -> None:
    claims = {"sub": "app", "aud": "streamgate", "exp": int(time.time() + 300), **fresh}
    secret = claims.pop("signed_with", SECRET)
    async with secured.ws_connect(path.format(topic=topic), headers=bearer(token())) as ws:
        await ws.send_json({"type": "auth",
                            "token": jwt.encode(claims, secret, algorithm="HS256")})
        assert await closed_with(ws) == code


async def test_a_refresh_whose_claims_no_longer_grant_the_topic_closes_4403(
        secured: Client, topic: str) -> None:
    async with secured.ws_connect(f"/v1/subscribe?topic={topic}",
                                  headers=bearer(token("ops-bot", team="ops"))) as ws:
        await refresh(ws, time.time() + 300, "ops-bot", team="ops")
        await ws.send_json({"type": "auth", "token": token("ops-bot", team="sales")})
        assert await closed_with(ws) == WS_CLOSE_FORBIDDEN


@pytest.mark.parametrize("path", ["/v1/subscribe?topic={topic}", "/v1/publish"])
async def test_a_flood_of_auth_frames_closes_the_socket_with_4429(
        secured: Client, topic: str, path: str) -> None:
    fresh = token()
    async with secured.ws_connect(path.format(topic=topic), headers=bearer(fresh)) as ws:
        for _ in range(AUTH_FRAME_BURST + 1):
            await ws.send_json({"type": "auth", "token": fresh})
        answers = 0
        while (frame := await ws.receive(timeout=10)).type is aiohttp.WSMsgType.TEXT:
            answers += frame.json()["type"] == "authenticated"
    assert (answers, ws.close_code) == (AUTH_FRAME_BURST, WS_CLOSE_TOO_MANY_CONNECTIONS)


@pytest.mark.parametrize("path", ["/v1/subscribe?topic={topic}", "/v1/publish"])
async def test_an_api_key_socket_refuses_a_later_auth_frame_and_stays_open(
        secured: Client, topic: str, path: str) -> None:
    async with secured.ws_connect(path.format(topic=topic), headers=ADMIN) as ws:
        await ws.send_json({"type": "auth", "token": token()})
        error = await next_frame(ws, "error")
        await ws.send_json({"type": "publish", "id": "1", "topic": topic,
                            "messages": [{"value": 1}]})
        assert (await next_frame(ws, "published"))["id"] == "1"
    assert error["code"] == "bad-frame"


async def test_a_fresh_token_signed_by_a_rotated_key_waits_for_the_jwks_refresh(
        aiohttp_client: Any, gateway_settings: GatewaySettings, tmp_path: Path,
        topic_name: str) -> None:
    async with serving_jwks("a") as idp:
        config = (f'[jwt]\nalgorithms = ["ES256"]\njwks_url = "{idp.url}"\n'
                  "jwks_min_refresh_s = 0\n\n" + rule(["app"], ["*"], ["admin", "subscribe"]))
        gateway = await secured_client(aiohttp_client, gateway_settings, tmp_path, config)
        await until_ready(gateway)
        created = await gateway.post("/v1/topics", json={"name": topic_name, "partitions": 1},
                                     headers=bearer(idp.token("a", "app")))
        assert created.status == 201, await created.text()
        async with gateway.ws_connect(f"/v1/subscribe?topic={topic_name}",
                                      headers=bearer(idp.token("a", "app"))) as ws:
            idp.publish("a", "b")  # the IdP adds a key; the gateway has not read it yet
            await ws.send_json({"type": "auth", "token": idp.token("b", "app")})
            authenticated = await next_frame(ws, "authenticated")
    assert authenticated["principal"] == "app"
