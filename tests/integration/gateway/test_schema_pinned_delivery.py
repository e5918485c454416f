"""Groups, pulls and broadcast subscriptions pinned to a schema version on the real cluster and
etcd: every value delivered in the pinned shape with its version header; one that cannot be
converted goes to the dead letters (groups) or becomes an error frame (broadcast), never out as
written."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestClient
from group_readings import group_partitions
from test_schema_migrations import V1, V2, V2_MIGRATIONS, V3, V3_MIGRATIONS, publish, register

Client = TestClient[Any, Any]
VERSION = "sg-schema-version"
DEADLINE_S = 20.0
A_V1 = {"id": "a", "qty": 1}
B_V2 = {"id": "b", "quantity": 2, "currency": "USD"}
C_V3 = {"id": "c", "quantity": 3, "note": "n"}
AT_V1 = [({"id": "a", "qty": 1}, "1"), ({"id": "b", "qty": 2}, "1")]
AT_V2 = [({"id": "a", "quantity": 1, "currency": "EUR"}, "2"), (B_V2, "2")]


@pytest.fixture
async def topic(gateway: Client, topic_name: str) -> str:
    """A topic with one message under v1 and one under v2 (v2 migrates both ways)."""
    created = await gateway.post("/v1/topics", json={"name": topic_name, "partitions": 1})
    assert created.status == 201, await created.text()
    await register(gateway, topic_name, V1)
    await publish(gateway, topic_name, A_V1)
    await register(gateway, topic_name, V2, migrations=V2_MIGRATIONS)
    await publish(gateway, topic_name, B_V2)
    return topic_name


async def subscribe(gateway: Client, topic: str, **params: str) -> aiohttp.ClientWebSocketResponse:
    return await gateway.ws_connect("/v1/subscribe", params={"topic": topic, **params})


async def frames(ws: aiohttp.ClientWebSocketResponse, count: int,
                 ack: bool = True) -> list[dict[str, Any]]:
    """The next ``count`` message and error frames (a group's messages acked as they come)."""
    received: list[dict[str, Any]] = []

    async def take() -> None:
        while len(received) < count:
            doc = await ws.receive_json()
            if doc["type"] == "message":
                received.append(doc)
                if ack:
                    await ws.send_json({"type": "ack", "messages": [
                        {"partition": doc["partition"], "offset": doc["offset"]}]})
            elif doc["type"] == "error":
                received.append(doc)

    await asyncio.wait_for(take(), DEADLINE_S)
    return received


def shapes(messages: list[dict[str, Any]]) -> list[tuple[Any, str]]:
    return [(m["value"], m["headers"][VERSION]) for m in messages]


async def pull(gateway: Client, group: str, topic: str, **fields: Any) -> Any:
    response = await gateway.post(f"/v1/groups/{group}/pull", json={
        "topic": topic, "max_messages": 10, "wait_ms": 1000, **fields})
    return response


async def until(condition: Callable[[], Awaitable[bool]]) -> None:
    """Wait (up to DEADLINE_S) until ``condition`` holds."""
    deadline = time.monotonic() + DEADLINE_S
    while not await condition():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.05)


async def dead_letters(gateway: Client, topic: str, count: int) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []

    async def enough() -> bool:
        response = await gateway.get(f"/v1/topics/{topic}.dlq/partitions/0/messages")
        if response.status == 200:
            found[:] = (await response.json())["messages"]
        return len(found) >= count

    await until(enough)
    return found


async def test_groups_pinned_to_each_version_receive_every_message_in_its_shape(
        gateway: Client, topic: str) -> None:
    old = await subscribe(gateway, topic, group="old-readers", schema_version="1")
    new = await subscribe(gateway, topic, group="new-readers", mode="shared", schema_version="2")
    assert shapes(await frames(old, 2)) == AT_V1
    assert shapes(await frames(new, 2)) == AT_V2
    await publish(gateway, topic, B_V2)
    assert shapes(await frames(old, 1)) == AT_V1[1:]
    await old.close()
    await new.close()


async def test_a_pull_pinned_to_a_version_gets_every_message_in_its_shape(
        gateway: Client, topic: str) -> None:
    at_v1 = await (await pull(gateway, "pull-old", topic, schema_version=1)).json()
    at_v2 = await (await pull(gateway, "pull-new", topic, schema_version=2)).json()
    assert shapes(at_v1["messages"]) == AT_V1
    assert shapes(at_v2["messages"]) == AT_V2
    unpinned = await (await pull(gateway, "pull-any", topic)).json()
    assert [m["value"] for m in unpinned["messages"]] == [A_V1, B_V2]


async def test_a_message_that_cannot_be_converted_is_dead_lettered_and_acked_for_the_group(
        gateway: Client, topic: str) -> None:
    await register(gateway, topic, V3, migrations=V3_MIGRATIONS)
    await publish(gateway, topic, C_V3)
    ws = await subscribe(gateway, topic, group="v2-readers", schema_version="2")
    assert shapes(await frames(ws, 2)) == AT_V2
    letters = await dead_letters(gateway, topic, 1)
    assert [m["value"] for m in letters] == [C_V3]
    reason = letters[0]["headers"]["sg-dlq-reason"]
    assert "schema version 2" in reason
    assert "declares no downgrade" in reason
    assert letters[0]["headers"]["sg-dlq-group"] == "v2-readers"

    async def settled() -> bool:
        states = await group_partitions(gateway, "v2-readers", topic)
        return [(s["pending"], s["lag"]) for s in states] == [(0, 0)]

    await until(settled)
    await ws.close()
    pulled = await (await pull(gateway, "v2-pullers", topic, schema_version=2)).json()
    assert shapes(pulled["messages"]) == AT_V2
    letters = await dead_letters(gateway, topic, 2)
    assert [m["headers"]["sg-dlq-group"] for m in letters] == ["v2-readers", "v2-pullers"]
    [state] = await group_partitions(gateway, "v2-pullers", topic)
    assert state["pending"] == 2  # the two delivered await their acks; the dead letter none


async def test_a_pinned_broadcast_gets_an_error_frame_for_what_it_cannot_read(
        gateway: Client, topic: str) -> None:
    await register(gateway, topic, V3, migrations=V3_MIGRATIONS)
    await publish(gateway, topic, C_V3)
    ws = await subscribe(gateway, topic, schema_version="2", **{"from": "earliest"})
    received = await frames(ws, 3, ack=False)
    await ws.close()
    assert shapes(received[:2]) == AT_V2
    error = received[2]
    assert (error["type"], error["code"], error["partition"]) == (
        "error", "schema-conversion-failed", 0)
    assert error["offset"] > received[1]["offset"]
    assert "declares no downgrade" in error["detail"]
    assert "value" not in error


async def test_members_of_a_group_must_pin_the_same_version(gateway: Client, topic: str) -> None:
    first = await subscribe(gateway, topic, group="g", mode="shared", schema_version="1")
    await frames(first, 2)
    other = await subscribe(gateway, topic, group="g", mode="shared", schema_version="2")
    closing = await asyncio.wait_for(other.receive(), DEADLINE_S)
    while closing.type is aiohttp.WSMsgType.TEXT:  # the assignment comes first
        closing = await asyncio.wait_for(other.receive(), DEADLINE_S)
    assert (closing.type, closing.data) == (aiohttp.WSMsgType.CLOSE, 4409)
    assert "schema_version" in str(closing.extra)
    await first.close()


@pytest.mark.parametrize(("version", "status", "slug"), [
    ("9", 404, "schema-version-not-found"), ("0", 422, "invalid"), ("x", 422, "invalid")])
async def test_an_unknown_or_bad_pinned_version_is_refused_before_the_upgrade(
        gateway: Client, topic: str, version: str, status: int, slug: str) -> None:
    with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
        await subscribe(gateway, topic, group="g", schema_version=version)
    assert refused.value.status == status
    response = await pull(gateway, "g", topic, schema_version=int(version)
                          if version.isdigit() else version)
    assert response.status == status
    assert slug in (await response.json())["type"]


async def test_pinning_a_topic_without_schemas_is_a_conflict(gateway: Client,
                                                             topic_name: str) -> None:
    assert (await gateway.post("/v1/topics", json={"name": topic_name,
                                                   "partitions": 1})).status == 201
    with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
        await subscribe(gateway, topic_name, schema_version="1")
    assert refused.value.status == 409
    response = await pull(gateway, "g", topic_name, schema_version=1)
    assert response.status == 409
