"""Validation at the door on the real cluster and etcd: a topic with a registered schema refuses a
batch with one bad message (nothing written), stamps each good message with its schema version,
and answers a WebSocket publish frame with the same refusal."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from gateway.app import create_app
from gateway.services import SERVICES
from gateway.settings import GatewaySettings

Client = TestClient[Any, Any]
PROBLEMS = "https://streamgate.dev/problems/"
ORDER = {"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object",
         "required": ["id", "total"],
         "properties": {"id": {"type": "string"}, "total": {"type": "integer", "minimum": 0},
                        "status": {"enum": ["new", "paid"]}}}
GOOD = [{"id": f"o{n}", "total": n, "status": "new"} for n in range(5)]
WAIT_S = 10.0


@pytest.fixture
async def client(aiohttp_client: Any, gateway_settings: GatewaySettings,
                 topic_name: str) -> Client:
    client: Client = await aiohttp_client(create_app(gateway_settings))
    await create_with_schema(client, topic_name, 1)
    return client


async def create_with_schema(client: Client, topic: str, partitions: int) -> None:
    """Create ``topic`` with ``ORDER`` as its schema, once this gateway's mirror holds it."""
    created = await client.post("/v1/topics", json={"name": topic, "partitions": partitions})
    assert created.status == 201, await created.text()
    registered = await client.post(f"/v1/topics/{topic}/schemas", json={"schema": ORDER})
    assert registered.status in (200, 201), await registered.text()
    await schema_seen(client, topic)


async def schema_seen(client: Client, topic: str) -> None:
    """Wait until this gateway's mirror holds the topic's schema (it is fed by the watch)."""
    services = client.app[SERVICES]
    deadline = asyncio.get_running_loop().time() + WAIT_S
    while True:
        metadata = services.cache.get(topic)
        if metadata is not None and services.schemas is not None \
                and services.schemas.latest(topic, metadata.created_at_ms) is not None:
            return
        assert asyncio.get_running_loop().time() < deadline, "the schema never reached the mirror"
        await asyncio.sleep(0.05)


async def stored(client: Client, topic: str) -> list[dict[str, Any]]:
    response = await client.get(f"/v1/topics/{topic}/partitions/0/messages",
                                params={"limit": "100"})
    assert response.status == 200, await response.text()
    messages: list[dict[str, Any]] = (await response.json())["messages"]
    return messages


def with_a_bad_total() -> list[dict[str, Any]]:
    values = [dict(value) for value in GOOD]
    values[3]["total"] = "ten"
    return [{"value": value} for value in values]


async def test_a_batch_with_one_bad_message_is_refused_at_its_path_and_nothing_is_written(
        client: Client, topic_name: str) -> None:
    response = await client.post(f"/v1/topics/{topic_name}/messages",
                                 json={"messages": with_a_bad_total()})
    assert response.status == 422
    assert response.content_type == "application/problem+json"
    problem = await response.json()
    assert problem["type"] == PROBLEMS + "schema-mismatch"
    assert problem["pointer"] == "/messages/3/value/total"
    assert problem["schema_version"] == 1
    assert "integer" in problem["schema_error"]
    assert await stored(client, topic_name) == []


async def test_each_message_of_a_good_batch_replays_with_its_schema_version(
        client: Client, topic_name: str) -> None:
    response = await client.post(f"/v1/topics/{topic_name}/messages",
                                 json={"messages": [{"value": value} for value in GOOD]})
    assert response.status == 200, await response.text()
    messages = await stored(client, topic_name)
    assert [m["value"] for m in messages] == GOOD
    assert [m["headers"] for m in messages] == [{"sg-schema-version": "1"}] * len(GOOD)


async def test_binary_values_and_a_forged_version_header_are_refused(
        client: Client, topic_name: str) -> None:
    binary = await client.post(f"/v1/topics/{topic_name}/messages",
                               json={"messages": [{"value": GOOD[0]}, {"value_b64": "AAE="}]})
    assert binary.status == 422
    assert (await binary.json())["pointer"] == "/messages/1/value_b64"
    forged = await client.post(f"/v1/topics/{topic_name}/messages", json={"messages": [
        {"value": GOOD[0], "headers": {"sg-schema-version": "9"}}]})
    assert forged.status == 422
    assert (await forged.json())["pointer"] == "/messages/0/headers/sg-schema-version"
    assert await stored(client, topic_name) == []


async def test_a_websocket_publish_frame_gets_the_same_refusal(
        client: Client, topic_name: str) -> None:
    async with client.ws_connect("/v1/publish") as ws:
        ready = await ws.receive_json(timeout=5)
        assert ready["type"] == "ready"
        await ws.send_json({"type": "publish", "id": "bad", "topic": topic_name,
                            "messages": with_a_bad_total()})
        answer = await ws.receive_json(timeout=5)
    assert (answer["type"], answer["id"]) == ("problem", "bad")
    problem = answer["problem"]
    assert (problem["status"], problem["type"]) == (422, PROBLEMS + "schema-mismatch")
    assert problem["pointer"] == "/messages/3/value/total"
    assert await stored(client, topic_name) == []
