"""CloudEvents 1.0 on the real cluster and etcd: structured, batched and binary publishes replay as
the same events; a retried event is stored once; invalid events are refused with a pointer and
nothing written; a schema topic checks an event's data; pull answers events whose receipts ack."""

from __future__ import annotations

from typing import Any

import pytest
from aiohttp.test_utils import TestClient
from test_schema_validation import schema_seen

Client = TestClient[Any, Any]
STRUCTURED = "application/cloudevents+json"
BATCH = "application/cloudevents-batch+json"
ORDER_SCHEMA = {"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object",
                "required": ["total"], "properties": {"total": {"type": "integer"}}}


def an_event(number: int, **attributes: Any) -> dict[str, Any]:
    return {"specversion": "1.0", "id": f"order-{number}", "source": "/shop/orders",
            "type": "com.example.order.created", "time": "2024-05-01T12:00:00Z",
            "subject": f"orders/{number}", "datacontenttype": "application/json",
            "data": {"total": number}, **attributes}


@pytest.fixture
async def client(gateway: Client, topic_name: str) -> Client:
    """The shared gateway, with a one-partition topic to publish to."""
    created = await gateway.post("/v1/topics", json={"name": topic_name, "partitions": 1})
    assert created.status == 201, await created.text()
    return gateway


async def publish(client: Client, topic: str, body: Any, content_type: str) -> Any:
    return await client.post(f"/v1/topics/{topic}/messages", json=body,
                             headers={"Content-Type": content_type})


async def replayed_events(client: Client, topic: str) -> list[dict[str, Any]]:
    response = await client.get(f"/v1/topics/{topic}/partitions/0/messages",
                                params={"limit": "100"}, headers={"Accept": BATCH})
    assert response.status == 200, await response.text()
    assert response.content_type == BATCH
    assert "SG-Next-Offset" in response.headers
    events: list[dict[str, Any]] = await response.json(content_type=BATCH)
    return events


def without_position(event: dict[str, Any]) -> dict[str, Any]:
    return {name: value for name, value in event.items() if name not in ("sgpartition",
                                                                         "sgoffset")}


async def test_a_structured_event_replays_as_the_same_event(client: Client,
                                                            topic_name: str) -> None:
    event = an_event(1, tenantcode="acme", retries=3, urgent=True)
    response = await publish(client, topic_name, event, STRUCTURED)
    assert response.status == 200, await response.text()
    [replayed] = await replayed_events(client, topic_name)
    assert without_position(replayed) == {**event, "retries": "3", "urgent": "true"}


async def test_a_batch_of_events_replays_in_order_with_keys_and_binary_data(
        client: Client, topic_name: str) -> None:
    events = [an_event(1, partitionkey="customer-7"),
              {**{k: v for k, v in an_event(2).items() if k not in ("data", "datacontenttype")},
               "datacontenttype": "application/octet-stream", "data_base64": "AAEC/w=="}]
    response = await publish(client, topic_name, events, BATCH)
    assert response.status == 200, await response.text()
    assert [r["duplicate"] for r in (await response.json())["results"]] == [False, False]
    assert [without_position(e) for e in await replayed_events(client, topic_name)] == events
    plain = await client.get(f"/v1/topics/{topic_name}/partitions/0/messages")
    first = (await plain.json())["messages"][0]
    assert first["key"] == "customer-7"
    assert first["headers"]["ce-id"] == "order-1"


async def test_a_binary_mode_event_replays_with_its_header_attributes(client: Client,
                                                                       topic_name: str) -> None:
    headers = {"ce-specversion": "1.0", "ce-id": "b-1", "ce-source": "urn:example:sensor",
               "ce-type": "com.example.reading", "ce-subject": "caf%C3%A9 %25 full",
               "ce-partitionkey": "sensor-9", "Content-Type": "application/json"}
    response = await client.post(f"/v1/topics/{topic_name}/messages", data=b'{"celsius": 21.5}',
                                 headers=headers)
    assert response.status == 200, await response.text()
    [event] = await replayed_events(client, topic_name)
    assert without_position(event) == {
        "specversion": "1.0", "id": "b-1", "source": "urn:example:sensor",
        "type": "com.example.reading", "subject": "café % full", "partitionkey": "sensor-9",
        "datacontenttype": "application/json", "data": {"celsius": 21.5}}


async def test_an_event_sent_again_with_the_same_source_and_id_is_stored_once(
        client: Client, topic_name: str) -> None:
    first = await publish(client, topic_name, an_event(5), STRUCTURED)
    again = await publish(client, topic_name, an_event(5, data={"total": 999}), STRUCTURED)
    assert first.status == again.status == 200
    original, retried = (await first.json())["results"][0], (await again.json())["results"][0]
    assert retried == {**original, "duplicate": True}
    assert [e["data"] for e in await replayed_events(client, topic_name)] == [{"total": 5}]


@pytest.mark.parametrize(("event", "pointer"), [
    ({k: v for k, v in an_event(2).items() if k != "id"}, "/1/id"),
    (an_event(2, specversion="0.3"), "/1/specversion"),
    (an_event(2, **{"Bad_Name": "x"}), "/1/Bad_Name"),
    (an_event(2, data_base64="AAEC"), "/1"),
    (an_event(2, ratio=0.5), "/1/ratio"),
])
async def test_an_invalid_event_refuses_its_batch_with_a_pointer_and_writes_nothing(
        client: Client, topic_name: str, event: dict[str, Any], pointer: str) -> None:
    response = await publish(client, topic_name, [an_event(1), event], BATCH)
    assert response.status == 422, await response.text()
    assert (await response.json(content_type=None))["pointer"] == pointer
    assert await replayed_events(client, topic_name) == []


async def test_a_binary_event_without_its_type_is_refused_naming_the_header(
        client: Client, topic_name: str) -> None:
    response = await client.post(f"/v1/topics/{topic_name}/messages", data=b"{}", headers={
        "ce-specversion": "1.0", "ce-id": "x", "ce-source": "/s",
        "Content-Type": "application/json"})
    assert response.status == 422
    assert (await response.json(content_type=None))["pointer"] == "ce-type"
    assert await replayed_events(client, topic_name) == []


async def test_a_schema_topic_refuses_an_event_whose_data_does_not_match(
        client: Client, topic_name: str) -> None:
    registered = await client.post(f"/v1/topics/{topic_name}/schemas",
                                   json={"schema": ORDER_SCHEMA})
    assert registered.status in (200, 201), await registered.text()
    await schema_seen(client, topic_name)
    response = await publish(client, topic_name, [an_event(1), an_event(2, data={"total": "x"})],
                             BATCH)
    assert response.status == 422, await response.text()
    problem = await response.json(content_type=None)
    assert problem["pointer"] == "/1/data/total"
    assert await replayed_events(client, topic_name) == []
    accepted = await publish(client, topic_name, an_event(3), STRUCTURED)
    assert accepted.status == 200, await accepted.text()


async def test_a_pull_in_cloudevents_form_hands_out_receipts_that_ack(
        client: Client, topic_name: str) -> None:
    await publish(client, topic_name, [an_event(1), an_event(2)], BATCH)
    plain = await client.post(f"/v1/topics/{topic_name}/messages",
                              json={"messages": [{"key": "k", "value": {"total": 3}}]})
    assert plain.status == 200
    pulled = await client.post("/v1/groups/ce-readers/pull", headers={"Accept": BATCH},
                               json={"topic": topic_name, "max_messages": 10})
    assert pulled.status == 200, await pulled.text()
    assert pulled.content_type == BATCH
    assert pulled.headers["SG-Paused"] == "false"
    events = await pulled.json(content_type=BATCH)
    assert [e["id"] for e in events[:2]] == ["order-1", "order-2"]
    made = events[2]
    assert made["type"] == "streamgate.message"
    assert made["id"] == made["sgoffset"]
    assert made["source"] == f"/v1/topics/{topic_name}/partitions/0"
    assert made["partitionkey"] == "k"
    assert made["data"] == {"total": 3}
    assert all(e["sgdeliverycount"] == 1 and e["sgtopic"] == topic_name for e in events)
    acked = await client.post("/v1/groups/ce-readers/ack",
                              json={"receipts": [e["sgreceipt"] for e in events]})
    assert acked.status == 200, await acked.text()
    again = await client.post("/v1/groups/ce-readers/pull", headers={"Accept": BATCH},
                              json={"topic": topic_name, "max_messages": 10})
    assert await again.json(content_type=BATCH) == []
