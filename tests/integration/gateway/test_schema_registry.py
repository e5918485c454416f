"""The schema registry on the real cluster and etcd: register, list, get, the 409 naming a change,
idempotent re-registration, hostile schemas refused, two gateways racing and mirroring."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from gateway.app import create_app
from gateway.settings import GatewaySettings

Client = TestClient[Any, Any]

CLOSED: dict[str, Any] = {"type": "object", "properties": {"id": {"type": "string"}},
          "additionalProperties": False}


def closed_with(**extra: Any) -> dict[str, Any]:
    return {**CLOSED, "properties": {**CLOSED["properties"], **extra}}


@pytest.fixture
def second_gateway(aiohttp_client: Any,
                   gateway_settings: GatewaySettings) -> Callable[[], Any]:
    async def start() -> Client:
        settings = dataclasses.replace(gateway_settings, node_id="second")
        client: Client = await aiohttp_client(create_app(settings))
        return client
    return start


async def create_topic(client: Client, name: str) -> None:
    response = await client.post("/v1/topics", json={"name": name, "partitions": 1})
    assert response.status == 201, await response.text()


async def register(client: Client, topic: str, schema: Any, status: int,
                   **fields: Any) -> dict[str, Any]:
    response = await client.post(f"/v1/topics/{topic}/schemas",
                                 json={"schema": schema, **fields})
    assert response.status == status, await response.text()
    doc: dict[str, Any] = await response.json()
    return doc


async def wait_for(client: Client, url: str, check: Callable[[Any], bool]) -> Any:
    deadline = asyncio.get_running_loop().time() + 20
    while True:
        response = await client.get(url)
        doc = await response.json()
        if response.status == 200 and check(doc):
            return doc
        assert asyncio.get_running_loop().time() < deadline, doc
        await asyncio.sleep(0.05)


async def test_a_registered_schema_is_listed_and_read_by_number_and_as_latest(
        gateway: Client, topic_name: str, caplog: pytest.LogCaptureFixture) -> None:
    await create_topic(gateway, topic_name)
    with caplog.at_level(logging.INFO, logger="streamgate.audit"):
        first = await register(gateway, topic_name, CLOSED, 201)
    assert (first["version"], first["compatibility"]) == (1, "backward")
    assert any("schema version 1" in r.getMessage() for r in caplog.records)
    second = await register(gateway, topic_name, closed_with(note={"type": "string"}), 201,
                            compatibility="backward_transitive")
    listed = await (await gateway.get(f"/v1/topics/{topic_name}/schemas")).json()
    assert [(v["version"], v["compatibility"]) for v in listed["versions"]] == [
        (1, "backward"), (2, "backward_transitive")]
    latest = await (await gateway.get(f"/v1/topics/{topic_name}/schemas/latest")).json()
    assert latest == second
    one = await (await gateway.get(f"/v1/topics/{topic_name}/schemas/1")).json()
    assert one["schema"] == CLOSED
    missing = await gateway.get(f"/v1/topics/{topic_name}/schemas/9")
    assert missing.status == 404


async def test_an_incompatible_schema_is_refused_with_409_naming_the_change(
        gateway: Client, topic_name: str) -> None:
    await create_topic(gateway, topic_name)
    await register(gateway, topic_name, closed_with(note={"type": "string"}), 201)
    problem = await register(gateway, topic_name, CLOSED, 409)
    assert problem["type"].endswith("/schema-incompatible")
    assert problem["changes"] == [{"path": "/properties/note", "change": "property_removed",
                                   "detail": problem["changes"][0]["detail"]}]
    listed = await (await gateway.get(f"/v1/topics/{topic_name}/schemas")).json()
    assert len(listed["versions"]) == 1


async def test_registering_the_latest_schema_again_answers_200_with_that_version(
        gateway: Client, topic_name: str) -> None:
    await create_topic(gateway, topic_name)
    first = await register(gateway, topic_name, CLOSED, 201)
    again = await register(gateway, topic_name, dict(reversed(list(CLOSED.items()))), 200)
    assert again == first


async def test_a_second_gateway_sees_a_registered_version_through_the_watch(
        gateway: Client, second_gateway: Callable[[], Any], topic_name: str) -> None:
    other = await second_gateway()
    await create_topic(gateway, topic_name)
    await register(gateway, topic_name, CLOSED, 201)
    seen = await wait_for(other, f"/v1/topics/{topic_name}/schemas/latest",
                          lambda doc: doc["version"] == 1)
    assert seen["schema"] == CLOSED


async def test_two_gateways_registering_at_once_get_successive_versions(
        gateway: Client, second_gateway: Callable[[], Any], topic_name: str) -> None:
    other = await second_gateway()
    await create_topic(gateway, topic_name)
    await register(gateway, topic_name, CLOSED, 201)
    await wait_for(other, f"/v1/topics/{topic_name}/schemas", lambda doc: doc.get("versions"))
    one, two = await asyncio.gather(
        register(gateway, topic_name, {**CLOSED, "description": "from one"}, 201),
        register(other, topic_name, {**CLOSED, "description": "from the other"}, 201))
    assert sorted([one["version"], two["version"]]) == [2, 3]
    listed = await wait_for(gateway, f"/v1/topics/{topic_name}/schemas",
                            lambda doc: len(doc["versions"]) == 3)
    assert [v["version"] for v in listed["versions"]] == [1, 2, 3]
    assert {v["fingerprint"] for v in listed["versions"]} == {
        one["fingerprint"], two["fingerprint"], listed["versions"][0]["fingerprint"]}


def nested_items(depth: int) -> dict[str, Any]:
    schema: dict[str, Any] = {}
    for _ in range(depth):
        schema = {"items": schema}
    return schema


HOSTILE = {
    "over_64_kib": ({"description": "x" * (65 * 1024)}, "/schema"),
    "nested_deeper_than_32": (nested_items(40), "/schema/items/items"),
    "enum_over_1000": ({"enum": list(range(1001))}, "/schema/enum"),
    "over_256_patterns": ({"properties": {f"p{i}": {"pattern": "^a"} for i in range(257)}},
                          "/schema/properties"),
    "remote_ref": ({"$ref": "http://127.0.0.1:9/never-fetched.json"}, "/schema/$ref"),
    "unknown_dollar_schema": ({"$schema": "http://json-schema.org/draft-07/schema#"},
                              "/schema/$schema"),
    "lookahead_pattern": ({"pattern": "(?=a)a"}, "/schema"),
    "backreference_pattern": ({"pattern": r"(a)\1"}, "/schema"),
    "catastrophic_pattern_unsupported": ({"pattern": r"^(a+)+\1$"}, "/schema"),
    "invalid_regex": ({"pattern": "(unclosed"}, "/schema"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
async def test_a_hostile_schema_is_refused_with_422_pointing_into_it(
        gateway: Client, topic_name: str, case: str) -> None:
    schema, pointer = HOSTILE[case]
    await create_topic(gateway, topic_name)
    problem = await register(gateway, topic_name, schema, 422)
    assert problem["pointer"].startswith(pointer), problem
    listed = await (await gateway.get(f"/v1/topics/{topic_name}/schemas")).json()
    assert listed["versions"] == []


WITH_DEFS: dict[str, Any] = {"$defs": {"c": {"type": "object"}}}
HOSTILE_EVENT_TYPES = {
    "pointer_outside_defs": ({"com.example.a": "/properties/id"}, "/event_types/com.example.a"),
    "pointer_to_nothing": ({"com.example.a": "/$defs/missing"}, "/event_types/com.example.a"),
    # short names: the map's count is refused, not the body's size
    "ten_thousand_types": ({f"t{i}": "/$defs/c" for i in range(10_000)}, "/event_types"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_EVENT_TYPES))
async def test_a_hostile_event_type_map_is_refused_with_422_pointing_into_it(
        gateway: Client, topic_name: str, case: str) -> None:
    event_types, pointer = HOSTILE_EVENT_TYPES[case]
    await create_topic(gateway, topic_name)
    problem = await register(gateway, topic_name, WITH_DEFS, 422, event_types=event_types)
    assert problem["pointer"] == pointer, problem
    listed = await (await gateway.get(f"/v1/topics/{topic_name}/schemas")).json()
    assert listed["versions"] == []


async def test_a_deleted_and_recreated_topic_starts_without_a_schema(
        gateway: Client, topic_name: str) -> None:
    await create_topic(gateway, topic_name)
    await register(gateway, topic_name, CLOSED, 201)
    assert (await gateway.delete(f"/v1/topics/{topic_name}")).status == 204
    await create_topic(gateway, topic_name)
    listed = await (await gateway.get(f"/v1/topics/{topic_name}/schemas")).json()
    assert listed["versions"] == []
    assert (await gateway.get(f"/v1/topics/{topic_name}/schemas/latest")).status == 404
    first = await register(gateway, topic_name, closed_with(x={"type": "integer"}), 201)
    assert first["version"] == 1
