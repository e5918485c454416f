"""Tenants' key spaces, with auth on and two tenants under forced filters: on a topic shared by
both, each tenant's keys are its own for compaction, snapshots and their cursors, key history and
conditional appends; a topic stored before key spaces refuses filtered principals' key state and
serves unfiltered ones as before (docs/security.md, "Key spaces")."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import time
import uuid
from pathlib import Path
from typing import Any

import jwt
import pytest
from aiohttp.test_utils import TestClient
from auth_config import api_keys, hs256_jwt, rule, secured_client, tenant_filters

from gateway.services import SERVICES
from gateway.settings import GatewaySettings

Client = TestClient[Any, Any]
SECRET = "k" * 40
ADMIN = {"X-API-Key": "sgk_tenant-key-spaces-admin"}
# an unfiltered admin, and two tenants that publish and read the same topics
CONFIG = "".join([
    hs256_jwt(), api_keys({"admin": ADMIN["X-API-Key"]}),
    rule(["admin"], ["*"], ["publish", "subscribe", "admin"]),
    rule([f"claim:tenant={t}" for t in "ab"], ["it-*"], ["publish", "subscribe"]),
    tenant_filters("a", "b"),
])


DAY_S = 24 * 3600  # tokens made at import: they outlive a whole run


def as_tenant(tenant: str) -> dict[str, str]:
    claims = {"sub": f"app-{tenant}", "tenant": tenant, "aud": "streamgate",
              "exp": int(time.time() + DAY_S)}
    return {"Authorization": f"Bearer {jwt.encode(claims, SECRET, algorithm='HS256')}"}


A, B = as_tenant("a"), as_tenant("b")


@pytest.fixture
async def secured(aiohttp_client: Any, gateway_settings: GatewaySettings, tmp_path: Path) -> Client:
    return await secured_client(aiohttp_client, gateway_settings, tmp_path, CONFIG,
                                {"TEST_JWT_SECRET": SECRET}, retention_interval_s=0.3)


async def new_topic(client: Client, **settings: Any) -> str:
    name = f"it-{uuid.uuid4().hex[:10]}"
    created = await client.post("/v1/topics", json={"name": name, "partitions": 1, **settings},
                                headers=ADMIN)
    assert created.status == 201, await created.text()
    return name


async def publish(client: Client, topic: str, who: dict[str, str],
                  *messages: dict[str, Any]) -> list[str]:
    response = await client.post(f"/v1/topics/{topic}/messages",
                                 json={"messages": list(messages)}, headers=who)
    assert response.status == 200, await response.text()
    return [r["offset"] for r in (await response.json())["results"]]


async def snapshot(client: Client, topic: str, who: dict[str, str],
                   after: str | None = None) -> tuple[dict[str, Any], list[str]]:
    """A whole snapshot read one key a page: its values by key, and the cursors it gave."""
    params: dict[str, str] = {"limit": "1"} | ({} if after is None else {"after": after})
    values: dict[str, Any] = {}
    cursors: list[str] = []
    while True:
        response = await client.get(f"/v1/topics/{topic}/partitions/0/snapshot", params=params,
                                    headers=who)
        assert response.status == 200, await response.text()
        page = await response.json()
        values.update((m["key"], m["value"]) for m in page["messages"])
        if page["after"] is None:
            return values, cursors
        cursors.append(page["after"])
        params = {"limit": "1", "as_of": page["as_of"], "after": page["after"]}


async def replayed(client: Client, topic: str) -> list[tuple[str, Any]]:
    page = await (await client.get(f"/v1/topics/{topic}/partitions/0/messages",
                                   headers=ADMIN)).json()
    return [(m["key"], m["value"]) for m in page["messages"]]


async def history(client: Client, topic: str, who: dict[str, str], key: str,
                  **params: str) -> dict[str, Any]:
    response = await client.get(f"/v1/topics/{topic}/history",
                                params={"key": key, "partition": "0", **params}, headers=who)
    assert response.status == 200, await response.text()
    body: dict[str, Any] = await response.json()
    return body


async def test_another_tenant_neither_replaces_nor_compacts_away_a_tenants_keys(
        secured: Client) -> None:
    topic = await new_topic(secured, compact=True, retention_ms=1)  # a lag of 1 ms
    await publish(secured, topic, A, {"key": "k1", "value": "a1"}, {"key": "k2", "value": "a2"})
    await publish(secured, topic, B, {"key": "k1", "value": "b1"}, {"key": "k2", "value": None})
    assert (await snapshot(secured, topic, A))[0] == {"k1": "a1", "k2": "a2"}
    assert (await snapshot(secured, topic, B))[0] == {"k1": "b1"}
    kept = [("k1", "a1"), ("k2", "a2"), ("k1", "b1")]
    for _ in range(100):  # until the owner's compaction took b's lone tombstone
        if await replayed(secured, topic) == kept:
            break
        await asyncio.sleep(0.1)
    assert await replayed(secured, topic) == kept
    assert (await snapshot(secured, topic, A))[0] == {"k1": "a1", "k2": "a2"}


async def test_acks0_batches_of_two_tenants_keep_their_keys_apart(secured: Client) -> None:
    topic = await new_topic(secured, compact=True)
    for who, value in ((A, "a"), (B, "b"), (A, "a2")):
        response = await secured.post(f"/v1/topics/{topic}/messages", headers=who, json={
            "acks": "0", "messages": [{"key": "k", "value": value}]})
        assert response.status == 202, await response.text()
    for _ in range(100):  # until the background writer wrote all three
        if len(await replayed(secured, topic)) == 3:
            break
        await asyncio.sleep(0.05)
    assert (await snapshot(secured, topic, A))[0] == {"k": "a2"}
    assert (await snapshot(secured, topic, B))[0] == {"k": "b"}


async def test_another_tenants_key_history_reads_as_a_key_nobody_wrote(secured: Client) -> None:
    topic = await new_topic(secured, key_index=True)
    for value in range(3):
        await publish(secured, topic, A, {"key": "ka", "value": value})
    assert [m["value"] for m in (await history(secured, topic, A, "ka"))["messages"]] == [0, 1, 2]
    for params in ({}, {"order": "desc", "limit": "1"}, {"order": "desc"},
                   {"from": "0-1"}, {"from_time_ms": "1"}):
        theirs = await history(secured, topic, B, "ka", **params)
        nobodys = await history(secured, topic, B, "never-written", **params)
        assert theirs == nobodys, params
        assert theirs["messages"] == []


async def test_a_conditional_append_expects_the_position_of_the_writers_own_key(
        secured: Client) -> None:
    topic = await new_topic(secured, key_index=True)
    [a_offset] = await publish(secured, topic, A, {"key": "ka", "value": 1})
    refused = await secured.post(f"/v1/topics/{topic}/messages", headers=B, json={
        "messages": [{"key": "ka", "value": 2, "expected_offset": a_offset}]})
    assert refused.status == 409
    assert (await refused.json())["current"] == "none"
    [b_offset] = await publish(secured, topic, B,
                               {"key": "ka", "value": 2, "expected_offset": "none"})
    again = await secured.post(f"/v1/topics/{topic}/messages", headers=B, json={
        "messages": [{"key": "ka", "value": 3, "expected_offset": "none"}]})
    assert (again.status, (await again.json())["current"]) == (409, b_offset)
    await publish(secured, topic, A, {"key": "ka", "value": 4, "expected_offset": a_offset})
    # a partition's position counts every tenant's messages: still not for a filtered writer
    last = await secured.post(f"/v1/topics/{topic}/messages", headers=B, json={
        "expected_last_offset": "none", "messages": [{"value": 5}]})
    assert last.status == 403


async def test_snapshot_cursors_never_name_another_tenants_keys(secured: Client) -> None:
    topic = await new_topic(secured, compact=True)
    await publish(secured, topic, A, *[{"key": f"a-secret-{i}", "value": i} for i in range(3)])
    await publish(secured, topic, B, {"key": "b-0", "value": 0}, {"key": "b-1", "value": 1})
    values, cursors = await snapshot(secured, topic, B)
    assert values == {"b-0": 0, "b-1": 1}
    assert all(b"secret" not in base64.urlsafe_b64decode(c) and "secret" not in c
               for c in cursors)
    forged = base64.urlsafe_b64encode(b"a-secret-0").decode()
    assert (await snapshot(secured, topic, B, after=forged))[0] == {"b-0": 0, "b-1": 1}
    assert (await snapshot(secured, topic, A))[0] == {f"a-secret-{i}": i for i in range(3)}


async def topic_before_key_spaces(client: Client, **settings: Any) -> str:
    """A topic as stored before key spaces existed (its metadata without them)."""
    topic = await new_topic(client, **settings)
    app = client.app
    assert app is not None
    services = app[SERVICES]
    old = dataclasses.replace(await services.registry.get(topic), key_spaces=False)
    services.cache.remember(await services.registry.update(old))
    return topic


async def test_a_topic_from_before_key_spaces_refuses_tenants_key_state(secured: Client) -> None:
    topic = await topic_before_key_spaces(secured, compact=True)
    url = f"/v1/topics/{topic}"
    refusals = [
        secured.post(f"{url}/messages", headers=A, json={"messages": [{"key": "k", "value": 1}]}),
        secured.post(f"{url}/messages", headers=A, json={
            "messages": [{"key": "k", "value": 1, "expected_offset": "none"}]}),
        secured.get(f"{url}/history", params={"key": "k"}, headers=A),
        secured.get(f"{url}/partitions/0/snapshot", headers=A),
    ]
    for refusal in refusals:
        response = await refusal
        body = await response.json()
        assert (response.status, body["type"].rsplit("/", 1)[-1]) == (409, "key-spaces-required")
        assert "recreate" in body["detail"]
    await publish(secured, topic, A, {"value": "keyless"})
    await publish(secured, topic, ADMIN, {"key": "k", "value": "admin"})
    assert [m["value"] for m in (await history(secured, topic, ADMIN, "k"))["messages"]] == [
        "admin"]
    assert (await snapshot(secured, topic, ADMIN))[0] == {"k": "admin"}


async def test_a_redriven_letter_goes_back_to_its_tenants_key_space(secured: Client) -> None:
    topic = await new_topic(secured, key_index=True)
    await publish(secured, topic, A, {"key": "cart", "value": "a1"})
    await publish(secured, topic, B, {"key": "cart", "value": "b1"})
    pulled = await secured.post("/v1/groups/ops/pull", json={"topic": topic, "max_messages": 10},
                                headers=ADMIN)
    receipts = [m["receipt"] for m in (await pulled.json())["messages"]]
    rejected = await secured.post("/v1/groups/ops/reject", json={"receipts": receipts},
                                  headers=ADMIN)
    assert (await rejected.json()) == {"rejected": 2}
    redriven = await secured.post(f"/v1/topics/{topic}/dlq/redrive", json={}, headers=ADMIN)
    assert (await redriven.json()) == {"redriven": 2}
    for tenant, who in (("a", A), ("b", B)):
        history = await secured.get(f"/v1/topics/{topic}/history", params={"key": "cart"},
                                    headers=who)
        values = [m["value"] for m in (await history.json())["messages"]]
        assert values == [f"{tenant}1", f"{tenant}1"], "the original and the redriven one"
