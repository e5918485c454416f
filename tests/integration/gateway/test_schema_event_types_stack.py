"""Event types on the real cluster and etcd: a version mapping CloudEvents types to subschemas
checks each event against its type's schema (structured, binary, plain), refuses unknown types at
the header, writes nothing of a refused batch, and compares each type on registration."""

from __future__ import annotations

from typing import Any

import pytest
from aiohttp.test_utils import TestClient
from test_schema_validation import schema_seen

Client = TestClient[Any, Any]
STRUCTURED = "application/cloudevents+json"
BATCH = "application/cloudevents-batch+json"
CREATED, PAID = "com.example.order.created", "com.example.order.paid"
ORDERS: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$defs": {
        "created": {"type": "object", "required": ["total"],
                    "properties": {"total": {"type": "integer"}}},
        "paid": {"type": "object", "required": ["paid_at"],
                 "properties": {"paid_at": {"type": "string"}}},
    },
    "type": "object", "required": ["id"],
}
TYPES = {CREATED: "/$defs/created", PAID: "/$defs/paid"}


def an_event(number: int, event_type: str, data: Any) -> dict[str, Any]:
    return {"specversion": "1.0", "id": f"e-{number}", "source": "/shop", "type": event_type,
            "data": data}


async def register(client: Client, topic: str, status: int, schema: Any = ORDERS,
                   **fields: Any) -> dict[str, Any]:
    response = await client.post(f"/v1/topics/{topic}/schemas",
                                 json={"schema": schema, **fields})
    assert response.status == status, await response.text()
    doc: dict[str, Any] = await response.json(content_type=None)
    return doc


@pytest.fixture
async def client(gateway: Client, topic_name: str) -> Client:
    """The shared gateway with a one-partition topic whose schema maps two event types."""
    created = await gateway.post("/v1/topics", json={"name": topic_name, "partitions": 1})
    assert created.status == 201, await created.text()
    await register(gateway, topic_name, 201, event_types=TYPES)
    await schema_seen(gateway, topic_name)
    return gateway


async def stored_values(client: Client, topic: str) -> list[Any]:
    response = await client.get(f"/v1/topics/{topic}/partitions/0/messages",
                                params={"limit": "100"})
    assert response.status == 200, await response.text()
    return [message["value"] for message in (await response.json())["messages"]]


async def publish_events(client: Client, topic: str, body: Any, content_type: str) -> Any:
    return await client.post(f"/v1/topics/{topic}/messages", json=body,
                             headers={"Content-Type": content_type})


async def publish_binary(client: Client, topic: str, event_type: str, data: bytes) -> Any:
    return await client.post(f"/v1/topics/{topic}/messages", data=data, headers={
        "ce-specversion": "1.0", "ce-id": "b-1", "ce-source": "/shop", "ce-type": event_type,
        "Content-Type": "application/json"})


async def test_a_version_answers_its_event_types(client: Client, topic_name: str) -> None:
    latest = await (await client.get(f"/v1/topics/{topic_name}/schemas/latest")).json()
    assert latest["event_types"] == TYPES


async def test_a_structured_event_is_checked_against_its_types_schema(
        client: Client, topic_name: str) -> None:
    good = await publish_events(client, topic_name, an_event(1, CREATED, {"total": 3}),
                                STRUCTURED)
    assert good.status == 200, await good.text()
    wrong = await publish_events(client, topic_name, an_event(2, CREATED, {"paid_at": "now"}),
                                 STRUCTURED)
    assert wrong.status == 422, await wrong.text()
    problem = await wrong.json(content_type=None)
    assert (problem["type"].rsplit("/", 1)[1], problem["pointer"]) == ("schema-mismatch",
                                                                       "/data")
    assert await stored_values(client, topic_name) == [{"total": 3}]


async def test_a_binary_event_is_checked_against_its_types_schema(
        client: Client, topic_name: str) -> None:
    good = await publish_binary(client, topic_name, PAID, b'{"paid_at": "today"}')
    assert good.status == 200, await good.text()
    wrong = await publish_binary(client, topic_name, PAID, b'{"paid_at": 7}')
    assert wrong.status == 422, await wrong.text()
    assert (await wrong.json(content_type=None))["pointer"] == "/data/paid_at"
    assert await stored_values(client, topic_name) == [{"paid_at": "today"}]


async def test_an_unknown_type_refuses_its_batch_naming_the_header_and_writes_nothing(
        client: Client, topic_name: str) -> None:
    batch = [an_event(1, CREATED, {"total": 1}), an_event(2, "com.example.refund", {})]
    response = await publish_events(client, topic_name, batch, BATCH)
    assert response.status == 422, await response.text()
    problem = await response.json(content_type=None)
    assert problem["pointer"] == "/1/type"
    assert "ce-type" in problem["detail"]
    assert "com.example.refund" in problem["detail"]
    binary = await publish_binary(client, topic_name, "com.example.refund", b"{}")
    assert (await binary.json(content_type=None))["pointer"] == "ce-type"
    plain = await client.post(f"/v1/topics/{topic_name}/messages", json={"messages": [
        {"value": {"id": "a"}}, {"value": {}, "headers": {"ce-type": "nope"}}]})
    assert (await plain.json())["pointer"] == "/messages/1/headers/ce-type"
    assert await stored_values(client, topic_name) == []


async def test_a_plain_message_without_a_type_is_checked_against_the_root(
        client: Client, topic_name: str) -> None:
    refused = await client.post(f"/v1/topics/{topic_name}/messages",
                                json={"messages": [{"value": {"total": 1}}]})
    assert refused.status == 422
    assert (await refused.json())["pointer"] == "/messages/0/value"
    accepted = await client.post(f"/v1/topics/{topic_name}/messages", json={"messages": [
        {"value": {"id": "a"}}, {"value": {"total": 2}, "headers": {"ce-type": CREATED}}]})
    assert accepted.status == 200, await accepted.text()
    assert await stored_values(client, topic_name) == [{"id": "a"}, {"total": 2}]


async def test_removing_a_type_under_backward_is_refused_naming_the_change(
        client: Client, topic_name: str) -> None:
    problem = await register(client, topic_name, 409, event_types={CREATED: TYPES[CREATED]})
    assert [(c["path"], c["change"]) for c in problem["changes"]] == [
        (f"/event_types/{PAID}", "event_type_removed")]


async def test_narrowing_a_types_field_is_refused_at_its_path_under_the_type(
        client: Client, topic_name: str) -> None:
    narrowed = {**ORDERS, "$defs": {**ORDERS["$defs"], "created": {
        "type": "object", "required": ["total"],
        "properties": {"total": {"type": "integer", "maximum": 100}}}}}
    problem = await register(client, topic_name, 409, narrowed, event_types=TYPES)
    assert [(c["path"], c["change"]) for c in problem["changes"]] == [
        (f"/event_types/{CREATED}/properties/total/maximum", "max_decreased")]


async def test_adding_a_type_under_backward_registers_the_next_version(
        client: Client, topic_name: str) -> None:
    schema = {**ORDERS, "$defs": {**ORDERS["$defs"], "refunded": {"type": "object"}}}
    wider = {**TYPES, "com.example.order.refunded": "/$defs/refunded"}
    version = await register(client, topic_name, 201, schema, event_types=wider)
    assert (version["version"], version["event_types"]) == (2, wider)
    again = await register(client, topic_name, 200, schema, event_types=wider)
    assert again["version"] == 2
