"""Publishing over ``/v1/publish`` on the real cluster and etcd: frames answered by id with what
HTTP answers, many in flight written in the order they came, bad frames refused with nothing
written, the in-flight and size limits."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestClient

from gateway.app import create_app
from gateway.settings import GatewaySettings

Client = TestClient[Any, Any]
Socket = aiohttp.ClientWebSocketResponse
PROBLEMS = "https://streamgate.dev/problems/"


async def gateway(aiohttp_client: Any, settings: GatewaySettings, topic: str,
                  partitions: int = 1, **changes: Any) -> Client:
    client: Client = await aiohttp_client(create_app(dataclasses.replace(settings, **changes)))
    created = await client.post("/v1/topics", json={"name": topic, "partitions": partitions})
    assert created.status == 201, await created.text()
    return client


@pytest.fixture
async def client(aiohttp_client: Any, gateway_settings: GatewaySettings,
                 topic_name: str) -> Client:
    return await gateway(aiohttp_client, gateway_settings, topic_name)


async def ready(ws: Socket) -> dict[str, Any]:
    frame: dict[str, Any] = await ws.receive_json(timeout=5)
    assert frame["type"] == "ready", frame
    return frame


async def answers(ws: Socket, count: int) -> dict[str, dict[str, Any]]:
    """The next ``count`` answers by id."""
    got: dict[str, dict[str, Any]] = {}
    while len(got) < count:
        frame = await ws.receive_json(timeout=10)
        got[frame["id"]] = frame
    return got


async def stored(client: Client, topic: str, partition: int = 0) -> list[dict[str, Any]]:
    response = await client.get(f"/v1/topics/{topic}/partitions/{partition}/messages",
                                params={"limit": "1000"})
    assert response.status == 200
    messages: list[dict[str, Any]] = (await response.json())["messages"]
    return messages


async def test_publish_frames_are_answered_by_id_with_what_http_answers(
        client: Client, topic_name: str) -> None:
    async with client.ws_connect("/v1/publish") as ws:
        limits = await ready(ws)
        assert limits["max_in_flight"] == 256
        assert limits["max_frame_bytes"] == limits["max_in_flight_bytes"] // 2
        await ws.send_json({"type": "publish", "id": "one", "topic": topic_name, "acks": "all",
                            "messages": [{"key": "k", "value": {"n": 1},
                                          "headers": {"h": "1"}}],
                            "idempotency_key": "batch-1"})
        await ws.send_json({"type": "publish", "id": "two", "topic": topic_name, "acks": "0",
                            "messages": [{"value": "x"}, {"value": "y"}]})
        got = await answers(ws, 2)
        # the same batch again under its idempotency key: a duplicate, not a second write
        await ws.send_json({"type": "publish", "id": "again", "topic": topic_name,
                            "messages": [{"key": "k", "value": {"n": 1}, "headers": {"h": "1"}}],
                            "idempotency_key": "batch-1"})
        again = (await answers(ws, 1))["again"]
    (result,) = got["one"]["results"]
    assert got["one"]["type"] == "published"
    assert (result["partition"], result["duplicate"]) == (0, False)
    assert got["two"] == {"type": "published", "id": "two", "accepted": 2}
    assert again["results"] == [{**result, "duplicate": True}]
    for _ in range(50):  # acks=0 batches are written in the background
        messages = await stored(client, topic_name)
        if len(messages) == 3:
            break
        await asyncio.sleep(0.05)
    # acks=0 batches join their own queue: no order between them and acknowledged writes
    assert [(m["value"], m["headers"]) for m in messages if m["offset"] == result["offset"]] \
        == [({"n": 1}, {"h": "1"})]
    assert sorted(str(m["value"]) for m in messages) == ["x", "y", "{'n': 1}"]


async def test_frames_in_flight_for_one_key_are_written_in_the_order_they_came(
        client: Client, topic_name: str) -> None:
    count = 200
    async with client.ws_connect("/v1/publish") as ws:
        await ready(ws)
        for n in range(count):
            await ws.send_json({"type": "publish", "id": str(n), "topic": topic_name,
                                "messages": [{"key": "same", "value": n}]})
        got = await answers(ws, count)
    offsets = [got[str(n)]["results"][0]["offset"] for n in range(count)]
    assert offsets == sorted(offsets, key=lambda o: tuple(map(int, o.split("-"))))
    assert [m["value"] for m in await stored(client, topic_name)] == list(range(count))


@pytest.mark.parametrize(("frame", "code"), [
    ("not json", "bad-frame"),
    ('{"type": "ack", "messages": []}', "bad-frame"),
    ('{"type": "publish", "topic": "t", "messages": [{"value": 1}]}', "bad-frame"),
    ('{"type": "publish", "id": "", "topic": "t", "messages": [{"value": 1}]}', "bad-frame"),
    ('{"type": "publish", "id": "x", "messages": [{"value": 1}]}', "bad-frame"),
])
async def test_a_frame_that_cannot_be_answered_by_id_gets_an_error_frame(
        client: Client, topic_name: str, frame: str, code: str) -> None:
    async with client.ws_connect("/v1/publish") as ws:
        await ready(ws)
        await ws.send_str(frame)
        error = await ws.receive_json(timeout=5)
        assert (error["type"], error["code"]) == ("error", code)
        # the socket goes on
        await ws.send_json({"type": "publish", "id": "ok", "topic": topic_name,
                            "messages": [{"value": 1}]})
        assert (await ws.receive_json(timeout=5))["type"] == "published"
    assert len(await stored(client, topic_name)) == 1


@pytest.mark.parametrize(("fields", "status", "slug", "pointer"), [
    ({"topic": "it-no-such-topic", "messages": [{"value": 1}]}, 404, "topic-not-found", None),
    ({"messages": []}, 422, "invalid-field", "/messages"),
    ({"messages": [{"value": 1}, {"key": 5, "value": 2}]}, 422, "invalid-field",
     "/messages/1/key"),
    ({"messages": [{"value": 1}], "colour": "red"}, 422, "invalid-field", "/colour"),
    ({"messages": [{"value": 1}], "acks": "2"}, 422, "invalid-field", "/acks"),
    ({"messages": [{"value": 1}], "idempotency_key": ""}, 422, "invalid-field",
     "/idempotency_key"),
])
async def test_a_bad_publish_gets_the_problem_http_would_answer_and_writes_nothing(
        client: Client, topic_name: str, fields: dict[str, Any], status: int, slug: str,
        pointer: str | None) -> None:
    async with client.ws_connect("/v1/publish") as ws:
        await ready(ws)
        await ws.send_json({"type": "publish", "id": "bad", "topic": topic_name, **fields})
        answer = await ws.receive_json(timeout=5)
    assert (answer["type"], answer["id"]) == ("problem", "bad")
    problem = answer["problem"]
    assert (problem["status"], problem["type"]) == (status, PROBLEMS + slug), problem
    assert problem.get("pointer") == pointer
    assert "retry_after_s" not in answer
    assert await stored(client, topic_name) == []


async def test_frames_past_the_in_flight_limit_are_refused_with_429_and_not_written(
        aiohttp_client: Any, gateway_settings: GatewaySettings, topic_name: str) -> None:
    client = await gateway(aiohttp_client, gateway_settings, topic_name,
                           ws_publish_max_in_flight=1)
    count = 50
    async with client.ws_connect("/v1/publish") as ws:
        assert (await ready(ws))["max_in_flight"] == 1
        frames = [f'{{"type":"publish","id":"{n}","topic":"{topic_name}",'
                  f'"messages":[{{"value":{n}}}]}}' for n in range(count)]
        await asyncio.gather(*(ws.send_str(frame) for frame in frames))
        got = await answers(ws, count)
    refused = {n for n, a in got.items() if a["type"] == "problem"}
    assert refused, "every frame was taken: none was in flight when the next came"
    for n in refused:
        assert got[n]["problem"]["status"] == 429
        assert got[n]["problem"]["type"] == PROBLEMS + "too-many-in-flight"
        assert got[n]["retry_after_s"] == 1
    written = sorted(m["value"] for m in await stored(client, topic_name))
    assert written == sorted(int(n) for n in got if n not in refused)


async def test_a_frame_over_the_size_limit_closes_the_socket_with_1009(
        aiohttp_client: Any, gateway_settings: GatewaySettings, topic_name: str) -> None:
    client = await gateway(aiohttp_client, gateway_settings, topic_name,
                           max_batch_bytes=64 * 1024)
    async with client.ws_connect("/v1/publish", max_msg_size=0) as ws:
        limit = (await ready(ws))["max_frame_bytes"]
        # past the limit by more than a frame's envelope could be
        await ws.send_json({"type": "publish", "id": "big", "topic": topic_name,
                            "messages": [{"value": "x" * (2 * limit)}]})
        closed = await ws.receive(timeout=5)
    assert (closed.type, closed.data) == (aiohttp.WSMsgType.CLOSE, 1009)
    assert await stored(client, topic_name) == []


async def test_a_body_over_the_batch_limit_inside_the_frame_limit_is_413(
        aiohttp_client: Any, gateway_settings: GatewaySettings, topic_name: str) -> None:
    client = await gateway(aiohttp_client, gateway_settings, topic_name,
                           max_batch_bytes=64 * 1024)
    async with client.ws_connect("/v1/publish") as ws:
        await ready(ws)
        await ws.send_json({"type": "publish", "id": "big", "topic": topic_name,
                            "messages": [{"value": "x" * 40_000}, {"value": "y" * 40_000}]})
        answer = await ws.receive_json(timeout=5)
    assert answer["problem"]["status"] == 413
    assert await stored(client, topic_name) == []


async def test_a_subscription_socket_publishes_too_and_receives_what_it_published(
        client: Client, topic_name: str) -> None:
    async with client.ws_connect("/v1/subscribe",
                                 params={"topic": topic_name, "mode": "broadcast"}) as ws:
        await ws.send_json({"type": "publish", "id": "mine", "topic": topic_name,
                            "messages": [{"key": "k", "value": "hello"}]})
        seen: dict[str, dict[str, Any]] = {}
        while {"published", "message"} - set(seen):
            frame = await ws.receive_json(timeout=10)
            seen[frame["type"]] = frame
        await ws.send_json({"type": "publish", "id": "lost", "topic": topic_name,
                            "messages": [{"key": 5, "value": "no"}]})
        refused = await ws.receive_json(timeout=10)
    (result,) = seen["published"]["results"]
    assert seen["published"]["id"] == "mine"
    assert (seen["message"]["offset"], seen["message"]["value"]) == (result["offset"], "hello")
    assert (refused["type"], refused["id"]) == ("problem", "lost")
    assert refused["problem"]["status"] == 422
