"""Reading at a schema version on the real cluster and etcd: values published under each version
replayed (and read by key) in the shape asked for, with their version header; a value that cannot
be converted comes back as written with a schema_error; bad migrations refused at their pointer."""

from __future__ import annotations

from typing import Any

import pytest
from aiohttp.test_utils import TestClient

Client = TestClient[Any, Any]
STR, INT = {"type": "string"}, {"type": "integer"}
VERSION = "sg-schema-version"


def obj(required: list[str], **properties: Any) -> dict[str, Any]:
    return {"type": "object", "required": required, "properties": properties,
            "additionalProperties": False}


# v2 renames qty to quantity and adds a currency (defaulted up, dropped down); v3 has no downgrade
V1 = obj(["id", "qty"], id=STR, qty=INT)
V2 = obj(["id", "quantity"], id=STR, quantity=INT, currency=STR)
V3 = obj(["id", "quantity"], id=STR, quantity=INT, currency=STR, note=STR)
V2_MIGRATIONS = {"upgrade": [{"op": "rename", "from": "/qty", "to": "/quantity"},
                             {"op": "default", "path": "/currency", "value": "EUR"}],
                 "downgrade": [{"op": "rename", "from": "/quantity", "to": "/qty"},
                               {"op": "drop", "path": "/currency"}]}
V3_MIGRATIONS = {"upgrade": [{"op": "default", "path": "/note", "value": ""}]}


async def register(client: Client, topic: str, schema: dict[str, Any], **fields: Any) -> Any:
    response = await client.post(f"/v1/topics/{topic}/schemas",
                                 json={"schema": schema, "compatibility": "none", **fields})
    assert response.status == 201, await response.text()
    return await response.json()


async def publish(client: Client, topic: str, *values: dict[str, Any]) -> None:
    response = await client.post(f"/v1/topics/{topic}/messages", json={
        "messages": [{"key": "k", "value": value} for value in values]})
    assert response.status == 200, await response.text()


async def read(client: Client, url: str, **params: str) -> list[dict[str, Any]]:
    response = await client.get(url, params={"limit": "100", **params})
    assert response.status == 200, await response.text()
    messages: list[dict[str, Any]] = (await response.json())["messages"]
    return messages


def shapes(messages: list[dict[str, Any]]) -> list[tuple[Any, str, Any]]:
    return [(m["value"], m["headers"][VERSION], m.get("schema_error")) for m in messages]


@pytest.fixture
async def topic(gateway: Client, topic_name: str) -> str:
    """A topic with messages under v1 and v2 (v2 migrates both ways)."""
    created = await gateway.post("/v1/topics", json={"name": topic_name, "partitions": 1,
                                                     "key_index": True})
    assert created.status == 201, await created.text()
    await register(gateway, topic_name, V1)
    await publish(gateway, topic_name, {"id": "a", "qty": 1})
    second = await register(gateway, topic_name, V2, migrations=V2_MIGRATIONS)
    assert second["migrations"] == V2_MIGRATIONS
    await publish(gateway, topic_name, {"id": "b", "quantity": 2, "currency": "USD"})
    return topic_name


async def test_replay_and_key_history_at_a_version_show_every_value_in_its_shape(
        gateway: Client, topic: str) -> None:
    replay = f"/v1/topics/{topic}/partitions/0/messages"
    history = f"/v1/topics/{topic}/history"
    at_v1 = [({"id": "a", "qty": 1}, "1", None), ({"id": "b", "qty": 2}, "1", None)]
    at_v2 = [({"id": "a", "quantity": 1, "currency": "EUR"}, "2", None),
             ({"id": "b", "quantity": 2, "currency": "USD"}, "2", None)]
    assert shapes(await read(gateway, replay, schema_version="1")) == at_v1
    assert shapes(await read(gateway, replay, schema_version="2")) == at_v2
    assert shapes(await read(gateway, history, key="k", schema_version="1")) == at_v1
    assert shapes(await read(gateway, history, key="k", schema_version="2")) == at_v2
    as_written = await read(gateway, replay)
    assert [m["value"] for m in as_written] == [{"id": "a", "qty": 1},
                                                {"id": "b", "quantity": 2, "currency": "USD"}]


async def test_a_value_without_a_downgrade_comes_back_as_written_with_why(
        gateway: Client, topic: str) -> None:
    await register(gateway, topic, V3, migrations=V3_MIGRATIONS)
    await publish(gateway, topic, {"id": "c", "quantity": 3, "note": "n"})
    messages = await read(gateway, f"/v1/topics/{topic}/partitions/0/messages",
                          schema_version="2")
    assert [m["value"] for m in messages[:2]] == [
        {"id": "a", "quantity": 1, "currency": "EUR"},
        {"id": "b", "quantity": 2, "currency": "USD"}]
    last = messages[2]
    assert (last["value"], last["headers"][VERSION]) == ({"id": "c", "quantity": 3, "note": "n"},
                                                         "3")
    assert "declares no downgrade" in last["schema_error"]


async def test_an_unknown_version_is_404_and_a_topic_without_schemas_409(
        gateway: Client, topic: str, topic_name: str) -> None:
    missing = await gateway.get(f"/v1/topics/{topic}/partitions/0/messages",
                                params={"schema_version": "9"})
    assert missing.status == 404
    assert (await missing.json())["type"].endswith("schema-version-not-found")
    other = f"{topic_name}-plain"
    assert (await gateway.post("/v1/topics", json={"name": other, "partitions": 1})).status == 201
    plain = await gateway.get(f"/v1/topics/{other}/partitions/0/messages",
                              params={"schema_version": "1"})
    assert plain.status == 409
    bad = await gateway.get(f"/v1/topics/{topic}/partitions/0/messages",
                            params={"schema_version": "one"})
    assert bad.status == 422


@pytest.mark.parametrize(("migrations", "pointer"), [
    ({"upgrade": [{"op": "exec", "code": "rm"}]}, "/migrations/upgrade/0/op"),
    ({"downgrade": [{"op": "drop", "path": "nope"}]}, "/migrations/downgrade/0/path"),
    ({"upgrade": [{"op": "drop", "path": "/a"}] * 65}, "/migrations/upgrade"),
])
async def test_a_bad_migration_is_refused_at_its_pointer_and_nothing_registered(
        gateway: Client, topic: str, migrations: dict[str, Any], pointer: str) -> None:
    response = await gateway.post(f"/v1/topics/{topic}/schemas",
                                  json={"schema": V3, "migrations": migrations})
    assert response.status == 422
    assert (await response.json())["pointer"] == pointer
    listed = await (await gateway.get(f"/v1/topics/{topic}/schemas")).json()
    assert [v["version"] for v in listed["versions"]] == [1, 2]


async def test_the_first_version_takes_no_migrations(gateway: Client, topic_name: str) -> None:
    assert (await gateway.post("/v1/topics", json={"name": topic_name,
                                                   "partitions": 1})).status == 201
    response = await gateway.post(f"/v1/topics/{topic_name}/schemas",
                                  json={"schema": V1, "migrations": V2_MIGRATIONS})
    assert response.status == 422
    assert (await response.json())["pointer"] == "/migrations"
