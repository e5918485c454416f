"""One producer for many topics: one socket carries every topic's frames (or HTTP posts to each
topic's URL), each (topic, key) keeps its order, one topic's failure stays its own, and the buffer
bound is shared; against a small gateway of several topics on loopback."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import orjson
import pytest
from aiohttp import WSMsgType, web

from streamgate_client import ProblemError, Producer
from streamgate_client.producer import Transport, encode_message

NOT_FOUND = {"type": "https://streamgate.dev/problems/not-found", "status": 404,
             "title": "Not found", "detail": "no such topic"}


@dataclass
class TopicsGateway:
    """The fake's topics: what each stored, in write order (one record per message idempotency
    key), the topic of every frame and post, the connections opened."""

    topics: set[str]
    offer_socket: bool = True
    stored: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    keys: dict[str, dict[str, Any]] = field(default_factory=dict)
    frame_topics: list[str] = field(default_factory=list)
    post_topics: list[str] = field(default_factory=list)
    connections: int = 0
    gate: asyncio.Event | None = None  # when given, answers wait until it is set
    received: asyncio.Event = field(default_factory=asyncio.Event)

    async def publish(self, topic: str, body: dict[str, Any],
                      batch_key: str) -> dict[str, Any] | None:
        """The results of a publish body, or None for a topic that does not exist."""
        self.received.set()
        if self.gate is not None:
            await self.gate.wait()
        if topic not in self.topics:
            return None
        return {"results": [self.write(topic, f"{batch_key}:{i}", message)
                            for i, message in enumerate(body["messages"])]}

    def write(self, topic: str, key: str, message: dict[str, Any]) -> dict[str, Any]:
        if key not in self.keys:
            log = self.stored.setdefault(topic, [])
            log.append(message)
            self.keys[key] = {"partition": 0, "offset": f"{len(log)}-0", "duplicate": False}
            return self.keys[key]
        return {**self.keys[key], "duplicate": True}

    async def frames(self, request: web.Request) -> web.WebSocketResponse:
        """``/v1/publish``: each frame answered in turn, published or a 404 problem."""
        self.connections += 1
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        await ws.send_json({"type": "ready", "max_in_flight": 64, "max_frame_bytes": 1 << 20,
                            "max_in_flight_bytes": 1 << 30})
        async for message in ws:
            if message.type is not WSMsgType.TEXT:
                break
            frame = orjson.loads(message.data)
            self.frame_topics.append(frame["topic"])
            answer = await self.publish(frame["topic"], frame, frame["idempotency_key"])
            await ws.send_json({"type": "published", "id": frame["id"], **answer} if answer else
                               {"type": "problem", "id": frame["id"], "problem": NOT_FOUND})
        return ws

    async def post(self, request: web.Request) -> web.Response:
        """``POST /v1/topics/{topic}/messages``."""
        topic = request.match_info["topic"]
        self.post_topics.append(topic)
        answer = await self.publish(topic, orjson.loads(await request.read()),
                                    request.headers["Idempotency-Key"])
        if answer is None:
            return web.json_response(NOT_FOUND, status=404,
                                     content_type="application/problem+json")
        return web.json_response(answer)

    async def describe(self, request: web.Request) -> web.Response:
        """``GET /v1/topics/{topic}``: three partitions, or 404."""
        topic = request.match_info["topic"]
        if topic not in self.topics:
            return web.json_response(NOT_FOUND, status=404)
        return web.json_response({"name": topic, "partitions": 3})


async def start_gateway(aiohttp_server: Any, gateway: TopicsGateway) -> str:
    routes = [web.post("/v1/topics/{topic}/messages", gateway.post),
              web.get("/v1/topics/{topic}", gateway.describe)]
    if gateway.offer_socket:
        routes.append(web.get("/v1/publish", gateway.frames))
    app = web.Application()
    app.add_routes(routes)
    server = await aiohttp_server(app)
    return str(server.make_url("")).rstrip("/")


def values_by_key(messages: list[dict[str, Any]]) -> dict[str, list[Any]]:
    by_key: dict[str, list[Any]] = {}
    for message in messages:
        by_key.setdefault(message["key"], []).append(message["value"])
    return by_key


async def test_two_topics_interleaved_over_one_socket_keep_each_keys_order(
    aiohttp_server: Any,
) -> None:
    gateway = TopicsGateway({"orders", "payments"})
    url = await start_gateway(aiohttp_server, gateway)
    async with Producer(url, batch_size=7) as producer:
        futures = [await producer.send(n, key=f"k{n % 5}", topic=("orders", "payments")[n % 2])
                   for n in range(400)]
        many = await producer.send_many([{"value": n, "key": "k0"} for n in range(400, 450)],
                                        topic="payments")
        await producer.flush()
    assert all(f.result().offset is not None for f in futures)
    assert len(many) == 50
    assert gateway.connections == 1
    assert gateway.post_topics == []
    assert set(gateway.frame_topics) == {"orders", "payments"}
    orders, payments = values_by_key(gateway.stored["orders"]), values_by_key(
        gateway.stored["payments"])
    assert sorted(n for values in orders.values() for n in values) == list(range(0, 400, 2))
    assert sorted(n for values in payments.values() for n in values) == [
        *range(1, 400, 2), *range(400, 450)]
    for values in [*orders.values(), *payments.values()]:
        assert values == sorted(values)


@pytest.mark.parametrize("transport", ["auto", "http"])
async def test_a_missing_topic_fails_only_its_own_sends(aiohttp_server: Any,
                                                       transport: Transport) -> None:
    gateway = TopicsGateway({"orders"})
    url = await start_gateway(aiohttp_server, gateway)
    async with Producer(url, transport=transport, max_retries=0) as producer:
        futures = [await producer.send(n, key=f"k{n % 3}", topic=("orders", "ghost")[n % 2])
                   for n in range(60)]
        await producer.flush()
        after = await producer.send_and_wait("after", key="k0", topic="orders")
    for n, future in enumerate(futures):
        if n % 2:
            with pytest.raises(ProblemError) as raised:
                future.result()
            assert raised.value.status == 404
        else:
            assert future.result().offset is not None
    *written, last = [m["value"] for m in gateway.stored["orders"]]
    assert (sorted(written), last) == (list(range(0, 60, 2)), "after")
    assert after.offset == "31-0"
    assert "ghost" not in gateway.stored


async def test_a_call_without_a_topic_goes_to_the_default_one(aiohttp_server: Any) -> None:
    gateway = TopicsGateway({"orders", "payments"})
    url = await start_gateway(aiohttp_server, gateway)
    async with Producer(url, "orders") as producer:
        await producer.send_and_wait(1, key="a")
        await producer.send_and_wait(2, key="a", topic="payments")
        await producer.send_many([{"value": 3}])
        await producer.send_encoded([encode_message(4, key="a")], key="a")
        await producer.send_request([encode_message(5)], "replayed-1")
        await producer.send_conditional([{"value": 6, "key": "a"}])
    assert [m["value"] for m in gateway.stored["orders"]] == [1, 3, 4, 5, 6]
    assert [m["value"] for m in gateway.stored["payments"]] == [2]


async def test_every_call_without_any_topic_raises_a_clear_error(aiohttp_server: Any) -> None:
    gateway = TopicsGateway({"orders"})
    url = await start_gateway(aiohttp_server, gateway)
    async with Producer(url) as producer:
        calls = [producer.send(1), producer.send_and_wait(1), producer.send_many([{"value": 1}]),
                 producer.send_encoded([encode_message(1)]),
                 producer.send_request([encode_message(1)], "k"),
                 producer.send_conditional([{"value": 1}])]
        for call in calls:
            with pytest.raises(ValueError, match="no topic"):
                await call
    assert gateway.stored == {}
    assert gateway.connections == 0


async def test_http_posts_go_to_each_topics_own_url(aiohttp_server: Any) -> None:
    gateway = TopicsGateway({"orders", "payments"}, offer_socket=False)
    url = await start_gateway(aiohttp_server, gateway)
    async with Producer(url) as producer:
        await producer.send_and_wait("o", key="a", topic="orders")
        await producer.send_and_wait("p", key="a", topic="payments")
    assert gateway.post_topics == ["orders", "payments"]
    assert [m["value"] for m in gateway.stored["orders"]] == ["o"]
    assert [m["value"] for m in gateway.stored["payments"]] == ["p"]


async def test_the_buffer_bound_is_shared_by_every_topic(aiohttp_server: Any) -> None:
    gateway = TopicsGateway({"orders", "payments"}, gate=asyncio.Event())
    url = await start_gateway(aiohttp_server, gateway)
    async with Producer(url, max_batch_bytes=1000, max_buffer_bytes=1000) as producer:
        first = await producer.send("x" * 1000, topic="orders")
        await gateway.received.wait()  # in flight, unanswered, holding the whole buffer
        blocked = asyncio.ensure_future(producer.send("y", topic="payments"))
        for _ in range(20):
            await asyncio.sleep(0)
        assert not blocked.done()
        assert gateway.gate is not None
        gateway.gate.set()
        await first
        assert (await (await blocked)).offset == "1-0"
