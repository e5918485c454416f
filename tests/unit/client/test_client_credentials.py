"""Token providers: one call shared by concurrent requests, a refused token replaced once, a JWT
replaced before its ``exp``, a failing provider asked again; against a small gateway on loopback."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import jwt
import orjson
import pytest
from aiohttp import WSMsgType, web
from aiohttp.test_utils import TestServer

from streamgate_client import (
    Admin,
    ConnectionFailed,
    Consumer,
    ProblemError,
    Producer,
    SubscriptionClosed,
)
from streamgate_client.credentials import refresh_due_s


@dataclass
class Provider:
    """Hands out ``tokens`` in turn (the last one again when they run out), counting calls; a
    token that is an exception is raised instead."""

    tokens: list[str | Exception]
    calls: int = 0
    pause_s: float = 0.0  # an identity provider's round trip

    async def __call__(self) -> str:
        self.calls += 1
        await asyncio.sleep(self.pause_s)
        token = self.tokens[min(self.calls, len(self.tokens)) - 1]
        if isinstance(token, Exception):
            raise token
        return token


@dataclass
class Gateway:
    """Refuses the tokens in ``refused`` (401 on HTTP and at the upgrade) and records the bearer
    of every request; sockets opened with a token in ``expiring`` close with 4401 after their
    first frame."""

    refused: set[str] = field(default_factory=set)
    expiring: set[str] = field(default_factory=set)
    bearers: list[str | None] = field(default_factory=list)
    upgrades: list[str | None] = field(default_factory=list)
    written: list[str] = field(default_factory=list)  # idempotency keys of what was written

    def bearer(self, request: web.Request) -> str | None:
        header = request.headers.get("Authorization", "")
        return header.removeprefix("Bearer ") if header.startswith("Bearer ") else None

    def check(self, request: web.Request) -> str | None:
        token = self.bearer(request)
        if token in self.refused:
            raise web.HTTPUnauthorized(text='{"status": 401, "detail": "token expired"}',
                                       content_type="application/problem+json")
        return token

    def write(self, key: str) -> dict[str, Any]:
        duplicate = key in self.written
        if not duplicate:
            self.written.append(key)
        return {"partition": 0, "offset": f"{self.written.index(key) + 1}-0",
                "duplicate": duplicate}


async def start(aiohttp_server: Any, gateway: Gateway) -> str:
    async def topics(request: web.Request) -> web.Response:
        gateway.bearers.append(gateway.bearer(request))
        gateway.check(request)
        return web.json_response({"topics": []})

    async def describe(request: web.Request) -> web.Response:
        return web.json_response({"name": "t", "partitions": 1, "partition_details": []})

    async def publish(request: web.Request) -> web.Response:
        gateway.bearers.append(gateway.bearer(request))
        gateway.check(request)
        body = orjson.loads(await request.read())
        key = request.headers["Idempotency-Key"]
        return web.json_response({"results": [gateway.write(f"{key}:{i}")
                                              for i in range(len(body["messages"]))]})

    app = web.Application()
    app.router.add_get("/v1/topics", topics)
    app.router.add_get("/v1/topics/{topic}", describe)
    app.router.add_post("/v1/topics/{topic}/messages", publish)
    app.router.add_get("/v1/publish", partial(publish_socket, gateway))
    app.router.add_get("/v1/subscribe", partial(subscribe_socket, gateway))
    server: TestServer = await aiohttp_server(app)
    return str(server.make_url("")).rstrip("/")


async def upgraded(gateway: Gateway, request: web.Request) -> tuple[web.WebSocketResponse, bool]:
    """The socket, and whether its token expires once it has done one thing."""
    gateway.upgrades.append(gateway.bearer(request))
    token = gateway.check(request)
    ws = web.WebSocketResponse()
    await ws.prepare(request)
    return ws, token in gateway.expiring


async def publish_socket(gateway: Gateway, request: web.Request) -> web.WebSocketResponse:
    ws, expiring = await upgraded(gateway, request)
    await ws.send_json({"type": "ready", "max_in_flight": 16, "max_frame_bytes": 1 << 20})
    async for message in ws:
        if message.type is not WSMsgType.TEXT:
            break
        frame = orjson.loads(message.data)
        results = [gateway.write(f"{frame['idempotency_key']}:{i}")
                   for i in range(len(frame["messages"]))]
        if expiring:  # written, but the answer is lost to the expiry
            await ws.close(code=4401, message=b"token expired")
            break
        await ws.send_json({"type": "published", "id": frame["id"], "results": results})
    return ws


async def subscribe_socket(gateway: Gateway, request: web.Request) -> web.WebSocketResponse:
    """Broadcast from the ``from`` cursor of partition 0: messages ``1-0``, ``2-0``, ..."""
    ws, expiring = await upgraded(gateway, request)
    start = request.query.get("from", "earliest")
    after = 0 if start == "earliest" else int(start.partition(":")[2].split("-")[0])
    for n in range(after + 1, after + 4):
        await ws.send_json({"type": "message", "topic": "t", "partition": 0, "offset": f"{n}-0",
                            "value": n})
        if expiring:
            await ws.close(code=4401, message=b"token expired")
            return ws
    await ws.receive()  # open until the client goes
    return ws


def a_jwt(exp_in_s: float, life_s: float) -> str:
    now = time.time()
    return jwt.encode({"exp": int(now + exp_in_s), "iat": int(now + exp_in_s - life_s)},
                      "k" * 32, algorithm="HS256")


async def test_concurrent_requests_share_one_provider_call(aiohttp_server: Any) -> None:
    gateway = Gateway()
    url = await start(aiohttp_server, gateway)
    provider = Provider(["t1"], pause_s=0.05)
    async with Admin(url, token=provider) as admin:
        await asyncio.gather(*(admin.list_topics() for _ in range(20)))
        await admin.list_topics()
    assert provider.calls == 1
    assert gateway.bearers == ["t1"] * 21


async def test_a_refused_token_is_replaced_once_and_the_request_retried(
        aiohttp_server: Any) -> None:
    gateway = Gateway(refused={"t1"})
    url = await start(aiohttp_server, gateway)
    provider = Provider(["t1", "t2"])
    async with Admin(url, token=provider) as admin:
        await admin.list_topics()
        await admin.list_topics()
    assert provider.calls == 2
    assert gateway.bearers == ["t1", "t2", "t2"]


async def test_a_token_refused_twice_fails_after_one_retry(aiohttp_server: Any) -> None:
    gateway = Gateway(refused={"t1", "t2"})
    url = await start(aiohttp_server, gateway)
    provider = Provider(["t1", "t2", "t3"])
    async with Admin(url, token=provider) as admin:
        with pytest.raises(ProblemError) as raised:
            await admin.list_topics()
    assert raised.value.status == 401
    assert gateway.bearers == ["t1", "t2"]


async def test_a_fixed_token_refused_is_not_retried(aiohttp_server: Any) -> None:
    gateway = Gateway(refused={"fixed"})
    url = await start(aiohttp_server, gateway)
    async with Admin(url, token="fixed") as admin:
        with pytest.raises(ProblemError) as raised:
            await admin.list_topics()
    assert raised.value.status == 401
    assert gateway.bearers == ["fixed"]


async def test_a_jwt_near_its_exp_is_replaced_before_use(aiohttp_server: Any) -> None:
    gateway = Gateway()
    url = await start(aiohttp_server, gateway)
    near, fresh = a_jwt(exp_in_s=20, life_s=3600), a_jwt(exp_in_s=3600, life_s=3600)
    provider = Provider([near, fresh])
    async with Admin(url, token=provider) as admin:
        for _ in range(3):
            await admin.list_topics()
    assert gateway.bearers == [near, fresh, fresh]
    assert provider.calls == 2


async def test_a_provider_that_raises_is_asked_again_next_time(aiohttp_server: Any) -> None:
    gateway = Gateway()
    url = await start(aiohttp_server, gateway)
    provider = Provider([RuntimeError("identity provider down"), "t2"])
    async with Admin(url, token=provider) as admin:
        with pytest.raises(ConnectionFailed, match="identity provider down") as raised:
            await admin.list_topics()
        await admin.list_topics()
    assert isinstance(raised.value.__cause__, RuntimeError)
    assert gateway.bearers == ["t2"]
    assert provider.calls == 2


def test_the_refresh_margin_is_thirty_seconds_or_a_tenth_of_the_life() -> None:
    now = time.time()
    hour = jwt.encode({"exp": int(now) + 3600, "iat": int(now)}, "k" * 32, algorithm="HS256")
    short = jwt.encode({"exp": int(now) + 3, "iat": int(now)}, "k" * 32, algorithm="HS256")
    no_iat = jwt.encode({"exp": int(now) + 100}, "k" * 32, algorithm="HS256")
    assert refresh_due_s(hour, now) == int(now) + 3600 - 30
    assert refresh_due_s(short, now) == pytest.approx(int(now) + 3 - 0.3)
    assert refresh_due_s(no_iat, now) == pytest.approx(int(now) + 100 - (int(now) + 100 - now) / 10)
    assert refresh_due_s("opaque-token", now) == float("inf")
    assert refresh_due_s("a.bm90IGpzb24.c", now) == float("inf")


async def test_producer_retries_a_refused_post_once_with_a_fresh_token(
        aiohttp_server: Any) -> None:
    gateway = Gateway(refused={"t1"})
    url = await start(aiohttp_server, gateway)
    provider = Provider(["t1", "t2"])
    async with Producer(url, "t", token=provider, transport="http", max_retries=0) as producer:
        result = await producer.send_and_wait({"n": 1})
    assert (result.offset, result.duplicate) == ("1-0", False)
    assert gateway.bearers == ["t1", "t2"]
    assert (provider.calls, gateway.written) == (2, [gateway.written[0]])


async def test_producer_resends_once_over_a_new_socket_after_a_4401(aiohttp_server: Any) -> None:
    gateway = Gateway(expiring={"t1"})
    url = await start(aiohttp_server, gateway)
    provider = Provider(["t1", "t2"])
    async with Producer(url, "t", token=provider, transport="websocket",
                        max_retries=0) as producer:
        result = await producer.send_and_wait({"n": 1})
        again = await producer.send_and_wait({"n": 2})
    assert gateway.upgrades == ["t1", "t2"]
    assert (result.offset, result.duplicate) == ("1-0", True)  # written before the close
    assert (again.offset, len(gateway.written)) == ("2-0", 2)


async def test_producer_with_a_fixed_token_fails_on_a_4401(aiohttp_server: Any) -> None:
    gateway = Gateway(expiring={"fixed"})
    url = await start(aiohttp_server, gateway)
    async with Producer(url, "t", token="fixed", transport="websocket", max_retries=3) as producer:
        with pytest.raises(ProblemError) as raised:
            await producer.send_and_wait({"n": 1})
    assert raised.value.status == 401
    assert gateway.upgrades == ["fixed"]


async def test_consumer_reconnects_with_a_fresh_token_after_a_4401(aiohttp_server: Any) -> None:
    gateway = Gateway(expiring={"t1", "t2"})
    url = await start(aiohttp_server, gateway)
    provider = Provider(["t1", "t2", "t3"])
    values = []
    async with Consumer(url, "t", from_="earliest", token=provider, max_reconnects=0) as consumer:
        async for message in consumer:
            values.append(message.value)
            if len(values) == 5:
                break
    assert values == [1, 2, 3, 4, 5]
    assert gateway.upgrades == ["t1", "t2", "t3"]
    assert consumer.connections == 3


async def test_consumer_retries_a_refused_upgrade_once_with_a_fresh_token(
        aiohttp_server: Any) -> None:
    gateway = Gateway(refused={"t1"})
    url = await start(aiohttp_server, gateway)
    provider = Provider(["t1", "t2"])
    async with Consumer(url, "t", from_="earliest", token=provider, max_reconnects=0) as consumer:
        first = await anext(consumer)
    assert first.value == 1
    # the refused upgrade, the plain GET that learns why, then the fresh token
    assert (gateway.upgrades, provider.calls) == (["t1", "t1", "t2"], 2)


async def test_consumer_with_a_fixed_token_ends_on_a_4401(aiohttp_server: Any) -> None:
    gateway = Gateway(expiring={"fixed"})
    url = await start(aiohttp_server, gateway)
    async with Consumer(url, "t", from_="earliest", token="fixed") as consumer:
        assert (await anext(consumer)).value == 1
        with pytest.raises(SubscriptionClosed) as raised:
            await anext(consumer)
    assert raised.value.code == 4401
