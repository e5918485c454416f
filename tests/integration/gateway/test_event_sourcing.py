"""Conditional appends and key history over HTTP on the real cluster and etcd."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
from typing import Any

from aiohttp.test_utils import TestClient

from gateway.app import create_app

Client = TestClient[Any, Any]


async def create(gateway: Client, topic: str, partitions: int = 2, key_index: bool = True,
                 compact: bool = False) -> None:
    response = await gateway.post("/v1/topics", json={"name": topic, "partitions": partitions,
                                                      "key_index": key_index, "compact": compact})
    assert response.status == 201, await response.text()


async def publish(gateway: Client, topic: str, body: dict[str, Any]) -> tuple[int, Any]:
    response = await gateway.post(f"/v1/topics/{topic}/messages", json=body)
    return response.status, await response.json()


async def history(gateway: Client, topic: str, **params: str) -> tuple[int, Any]:
    response = await gateway.get(f"/v1/topics/{topic}/history", params=params)
    return response.status, await response.json()


async def test_an_aggregate_appends_only_on_the_position_it_read(
        gateway: Client, topic_name: str) -> None:
    await create(gateway, topic_name)
    status, body = await publish(gateway, topic_name, {"messages": [
        {"key": "cart-1", "value": {"added": "apple"}, "expected_offset": "none"}]})
    assert status == 200, body
    opened = body["results"][0]["offset"]
    status, conflict = await publish(gateway, topic_name, {"acks": "all", "messages": [
        {"key": "cart-1", "value": {"added": "pear"}, "expected_offset": "none"}]})
    assert status == 409
    assert conflict["type"].endswith("/unexpected-offset")
    assert conflict["pointer"] == "/messages/0/expected_offset"
    assert (conflict["index"], conflict["expected"], conflict["current"]) == (0, "none", opened)
    status, body = await publish(gateway, topic_name, {"acks": "all", "messages": [
        {"key": "cart-1", "value": {"added": "pear"}, "expected_offset": opened},
        {"key": "cart-1", "value": {"checked_out": True}}]})
    assert status == 200, body
    _, page = await history(gateway, topic_name, key="cart-1")
    assert [m["value"] for m in page["messages"]] == [
        {"added": "apple"}, {"added": "pear"}, {"checked_out": True}]
    assert page["next_offset"] > page["messages"][-1]["offset"]


async def test_one_of_concurrent_writers_wins(gateway: Client, topic_name: str) -> None:
    await create(gateway, topic_name, partitions=1)
    answers = await asyncio.gather(*(publish(gateway, topic_name, {"messages": [
        {"key": "seat-12", "value": f"buyer-{i}", "expected_offset": "none"}]})
        for i in range(16)))
    statuses = sorted(status for status, _ in answers)
    assert statuses == [200] + [409] * 15
    _, page = await history(gateway, topic_name, key="seat-12")
    assert len(page["messages"]) == 1


async def test_an_expected_last_offset_guards_a_whole_partition(
        gateway: Client, topic_name: str) -> None:
    await create(gateway, topic_name, partitions=3, key_index=False)
    body = {"expected_last_offset": "none", "messages": [{"value": 1, "partition": 2},
                                                         {"value": 2, "partition": 2}]}
    status, written = await publish(gateway, topic_name, body)
    assert status == 200, written
    status, conflict = await publish(gateway, topic_name, body)
    assert status == 409
    assert conflict["pointer"] == "/expected_last_offset"
    assert conflict["current"] == written["results"][1]["offset"]
    page = await (await gateway.get(f"/v1/topics/{topic_name}/partitions/2/messages")).json()
    assert [m["value"] for m in page["messages"]] == [1, 2]


async def test_history_pages_newest_first_until_exhausted(gateway: Client, topic_name: str) -> None:
    await create(gateway, topic_name)
    await publish(gateway, topic_name, {"messages": [
        {"key": "k" if i % 2 else "other", "value": i} for i in range(20)]})
    seen, start = [], None
    while True:
        params = {"key": "k", "order": "desc", "limit": "4"}
        if start is not None:
            params["from"] = start
        status, page = await history(gateway, topic_name, **params)
        assert status == 200, page
        seen += [m["value"] for m in page["messages"]]
        start = page["next_offset"]
        if start is None:
            break
    assert seen == list(range(19, 0, -2))


async def test_a_key_awkward_in_a_url_reads_by_base64(gateway: Client, topic_name: str) -> None:
    await create(gateway, topic_name)
    key = "\x00ÿ\n/?&=%"
    status, _ = await publish(gateway, topic_name, {"messages": [{"key": key, "value": 1}]})
    assert status == 200
    _, page = await history(gateway, topic_name, key_b64=base64.b64encode(key.encode()).decode())
    assert [m["value"] for m in page["messages"]] == [1]


async def test_uncheckable_conditions_are_refused_whole(gateway: Client, topic_name: str) -> None:
    await create(gateway, topic_name, partitions=4)
    plain = f"{topic_name}-plain"
    await create(gateway, plain, key_index=False)
    refused = {
        "/messages/0/expected_offset": (topic_name, {"messages": [
            {"value": 1, "expected_offset": "none"}]}),
        "/messages/1/expected_offset": (topic_name, {"messages": [
            {"key": "a", "value": 1}, {"key": "a", "value": 2, "expected_offset": "none"}]}),
        "/acks": (topic_name, {"acks": "0", "messages": [
            {"key": "a", "value": 1, "expected_offset": "none"}]}),
        "/messages": (topic_name, {"expected_last_offset": "none", "messages": [
            {"value": 1, "partition": 0}, {"value": 2, "partition": 1}]}),
        "/expected_last_offset": (topic_name, {"expected_last_offset": "soon", "messages": [
            {"value": 1}]}),
        "/messages/1": (topic_name, {"messages": [{"key": "a", "value": 1},
                                                  {"key": "a", "value": 2, "delay_ms": 500}]}),
    }
    for pointer, (topic, body) in refused.items():
        status, problem = await publish(gateway, topic, body)
        assert (status, problem.get("pointer")) == (422, pointer), problem
    status, problem = await publish(gateway, plain, {"messages": [
        {"key": "a", "value": 1, "expected_offset": "none"}]})
    assert (status, problem["pointer"]) == (422, "/messages/0/expected_offset")
    status, problem = await history(gateway, plain, key="a")
    assert (status, problem["pointer"]) == (422, "/key")
    status, problem = await history(gateway, topic_name, key="a", key_b64="YQ==")
    assert status == 422
    patched = await gateway.patch(f"/v1/topics/{plain}", json={"key_index": True})
    assert patched.status == 422
    for partition in range(4):
        page = await (await gateway.get(
            f"/v1/topics/{topic_name}/partitions/{partition}/messages")).json()
        assert page["messages"] == []


async def test_read_model_rebuilds_from_snapshot_then_follows(
        gateway: Client, topic_name: str) -> None:
    await create(gateway, topic_name, partitions=1, compact=True)
    await publish(gateway, topic_name, {"messages": [
        {"key": f"user-{i % 30}", "value": {"v": i}} for i in range(90)]})
    await publish(gateway, topic_name, {"messages": [{"key": "user-3", "value": None}]})
    model: dict[str, Any] = {}
    after, as_of = None, None
    while True:
        params = {"limit": "7"} | ({} if as_of is None else {"as_of": as_of, "after": after})
        page = await (await gateway.get(f"/v1/topics/{topic_name}/partitions/0/snapshot",
                                        params=params)).json()
        as_of = page["as_of"]
        model |= {m["key"]: m["value"] for m in page["messages"]}
        after = page["after"]
        if after is None:
            break
        # written while the snapshot is read: not in it, delivered after it
        await publish(gateway, topic_name, {"messages": [
            {"key": "user-0", "value": {"v": 1000 + len(model)}}]})
    assert len(model) == 29
    assert "user-3" not in model
    assert model["user-0"] == {"v": 60}
    async with gateway.ws_connect(f"/v1/subscribe?topic={topic_name}&from=0:{as_of}") as ws:
        followed = []
        while len(followed) < 4:
            frame = await ws.receive_json(timeout=10)
            if frame["type"] == "message":
                followed.append(frame["value"]["v"])
    assert followed == sorted(followed)
    assert followed[0] > 1000


async def test_a_compacted_topic_is_compacted_by_its_partitions_owner(
        aiohttp_client: Any, gateway_settings: Any, topic_name: str) -> None:
    fast: Client = await aiohttp_client(create_app(dataclasses.replace(
        gateway_settings, retention_interval_s=0.3)))
    created = await fast.post("/v1/topics", json={"name": topic_name, "partitions": 1,
                                                  "compact": True, "retention_ms": 1})
    body = await created.json()
    assert (created.status, body["key_index"], body["compact"]) == (201, True, True)
    await publish(fast, topic_name, {"messages": [
        {"key": f"k{i % 5}", "value": i} for i in range(50)] + [{"key": "k4", "value": None}]})
    values: list[Any] = []
    for _ in range(100):
        page = await (await fast.get(f"/v1/topics/{topic_name}/partitions/0/messages")).json()
        values = [m["value"] for m in page["messages"]]
        if values == [45, 46, 47, 48]:
            break
        await asyncio.sleep(0.1)
    assert values == [45, 46, 47, 48]
    refused = await fast.post("/v1/topics", json={"name": f"{topic_name}-x", "partitions": 1,
                                                  "compact": True, "max_length": 10})
    assert refused.status == 422
