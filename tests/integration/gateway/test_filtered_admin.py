"""Admin actions and group joins by principals with a forced tenant filter, with auth on: each admin
action reaches only the tenant's own messages or is refused, and a group never has members under
two filters (docs/security.md, "Forced header filters")."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path
from typing import Any

import aiohttp
import jwt
import pytest
from aiohttp.test_utils import TestClient
from auth_config import api_keys, hs256_jwt, secured_client, tenant_filters

from gateway.errors import WS_CLOSE_FORBIDDEN
from gateway.settings import GatewaySettings

Client = TestClient[Any, Any]
SECRET = "f" * 40
ADMIN_KEY = "sgk_filtered-admin-tests-admin"
ADMIN = {"X-API-Key": ADMIN_KEY}
# Tenants hold the admin grant, and their group pattern reaches each other's groups.
CONFIG = (hs256_jwt() + api_keys({"admin": ADMIN_KEY}) + '''[[rules]]
principals = ["admin"]
topics = ["*"]
actions = ["publish", "subscribe", "admin"]

[[rules]]
principals = ["claim:tenant=a", "claim:tenant=b"]
topics = ["it-*"]
actions = ["publish", "subscribe", "admin"]

''' + tenant_filters("a", "b"))


def token(tenant: str) -> str:
    claims = {"sub": f"app-{tenant}", "tenant": tenant, "aud": "streamgate",
              "exp": int(time.time() + 300)}
    return jwt.encode(claims, SECRET, algorithm="HS256")


def as_tenant(tenant: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token(tenant)}"}


async def gateway(aiohttp_client: Any, settings: GatewaySettings, tmp_path: Path,
                  **changes: Any) -> Client:
    return await secured_client(aiohttp_client, settings, tmp_path, CONFIG,
                                {"TEST_JWT_SECRET": SECRET}, **changes)


@pytest.fixture
async def secured(aiohttp_client: Any, gateway_settings: GatewaySettings, tmp_path: Path) -> Client:
    return await gateway(aiohttp_client, gateway_settings, tmp_path, auth_frame_timeout_s=1.0)


@pytest.fixture
async def topic(secured: Client, topic_name: str) -> str:
    """A topic of two partitions holding two messages of tenant a and two of tenant b."""
    created = await secured.post("/v1/topics", json={"name": topic_name, "partitions": 2},
                                 headers=ADMIN)
    assert created.status == 201, await created.text()
    for tenant in ("a", "b"):
        await publish(secured, topic_name, tenant, [f"{tenant}-{p}" for p in range(2)])
    return topic_name


async def publish(client: Client, topic: str, tenant: str, values: list[str],
                  key: str | None = None) -> list[str]:
    messages = [{"value": v, "partition": i % 2, **({"key": key} if key else {})}
                for i, v in enumerate(values)]
    response = await client.post(f"/v1/topics/{topic}/messages", json={"messages": messages},
                                 headers=as_tenant(tenant))
    assert response.status == 200, await response.text()
    return [r["offset"] for r in (await response.json())["results"]]


async def stored(client: Client, topic: str) -> list[tuple[str, str]]:
    """Every message of ``topic`` as (tenant, value), read by the unfiltered admin."""
    found: list[tuple[str, str]] = []
    for partition in range(2):
        response = await client.get(f"/v1/topics/{topic}/partitions/{partition}/messages",
                                    params={"from": "earliest"}, headers=ADMIN)
        if response.status == 404:
            return found
        found += [(m["headers"]["tenant"], m["value"]) for m in (await response.json())["messages"]]
    return sorted(found)


async def refused(response: aiohttp.ClientResponse) -> str:
    assert response.status == 403, await response.text()
    assert response.content_type == "application/problem+json"
    detail: str = (await response.json())["detail"]
    assert "forced header filter" in detail
    return detail


async def dead_letter_everything(client: Client, topic: str) -> None:
    """The unfiltered admin pulls every message and rejects it: the DLQ holds both tenants'."""
    pulled = await client.post("/v1/groups/admin-dlq/pull",
                               json={"topic": topic, "max_messages": 100}, headers=ADMIN)
    receipts = [m["receipt"] for m in (await pulled.json())["messages"]]
    rejected = await client.post("/v1/groups/admin-dlq/reject", json={"receipts": receipts},
                                 headers=ADMIN)
    assert (await rejected.json()) == {"rejected": 4}


async def letters(client: Client, topic: str) -> list[dict[str, Any]]:
    described = await (await client.get(f"/v1/topics/{topic}.dlq", headers=ADMIN)).json()
    found: list[dict[str, Any]] = []
    for partition in range(described["partitions"]):
        response = await client.get(f"/v1/topics/{topic}.dlq/partitions/{partition}/messages",
                                    params={"from": "earliest"}, headers=ADMIN)
        found += (await response.json())["messages"]
    return found


async def test_filtered_admin_creates_a_topic_but_may_not_change_or_delete_one(
        secured: Client, topic: str) -> None:
    before = await (await secured.get(f"/v1/topics/{topic}", headers=ADMIN)).json()
    own = await secured.post("/v1/topics", json={"name": f"{topic}-b", "partitions": 1},
                             headers=as_tenant("b"))
    assert own.status == 201, await own.text()
    for change in ({"retention_ms": 1}, {"max_length": 1}, {"partitions": 4}):
        await refused(await secured.patch(f"/v1/topics/{topic}", json=change,
                                          headers=as_tenant("b")))
    await refused(await secured.delete(f"/v1/topics/{topic}", headers=as_tenant("b")))
    await refused(await secured.delete(f"/v1/topics/{topic}-b", headers=as_tenant("b")))
    after = await (await secured.get(f"/v1/topics/{topic}", headers=ADMIN)).json()
    assert {k: after[k] for k in ("partitions", "retention_ms", "max_length")} == {
        k: before[k] for k in ("partitions", "retention_ms", "max_length")}
    assert [t for t, _ in await stored(secured, topic)] == ["a", "a", "b", "b"]


async def test_filtered_admin_may_not_purge_a_topic_a_partition_or_its_dead_letters(
        secured: Client, topic: str) -> None:
    await refused(await secured.post(f"/v1/topics/{topic}/purge", headers=as_tenant("b")))
    await refused(await secured.post(f"/v1/topics/{topic}/purge", json={"partition": 0},
                                     headers=as_tenant("b")))
    await dead_letter_everything(secured, topic)
    await refused(await secured.post(f"/v1/topics/{topic}/dlq/purge", headers=as_tenant("b")))
    assert len(await stored(secured, topic)) == 4
    assert len(await letters(secured, topic)) == 4


async def test_filtered_admin_redrives_only_its_own_tenants_letters_one_at_a_time(
        secured: Client, topic: str) -> None:
    await dead_letter_everything(secured, topic)
    path = f"/v1/topics/{topic}/dlq/redrive"
    await refused(await secured.post(path, headers=as_tenant("b")))
    await refused(await secured.post(path, json={"max_messages": 1}, headers=as_tenant("b")))
    by_tenant = {m["headers"]["tenant"]: m for m in await letters(secured, topic)}
    foreign = await secured.post(path, json={"partition": by_tenant["a"]["partition"],
                                             "offset": by_tenant["a"]["offset"]},
                                 headers=as_tenant("b"))
    missing = await secured.post(path, json={"partition": 0, "offset": "1-0"},
                                 headers=as_tenant("b"))
    # another tenant's letter answers exactly as a letter that is not there
    assert (foreign.status, await foreign.json()) == (404, {
        **await missing.json(), "detail": (await foreign.json())["detail"]})
    own = await secured.post(path, json={"partition": by_tenant["b"]["partition"],
                                         "offset": by_tenant["b"]["offset"]},
                             headers=as_tenant("b"))
    assert (own.status, await own.json()) == (200, {"redriven": 1})
    assert sorted(m["headers"]["tenant"] for m in await letters(secured, topic)) == [
        "a", "a", "b"]
    assert [t for t, _ in await stored(secured, topic)] == ["a", "a", "b", "b", "b"]


async def join(client: Client, topic: str, group: str, tenant: str | None,
               mode: str = "exclusive", **params: str) -> aiohttp.ClientWebSocketResponse:
    """A member of ``group`` joined by header credentials (the admin's when ``tenant`` is None)."""
    return await client.ws_connect("/v1/subscribe", params={
        "topic": topic, "group": group, "mode": mode, **params},
        headers=ADMIN if tenant is None else as_tenant(tenant))


async def next_messages(ws: aiohttp.ClientWebSocketResponse) -> list[dict[str, Any]]:
    """The messages of the next frame that carries any (one, or a batch)."""
    while True:
        frame = await ws.receive_json(timeout=10)
        if frame["type"] in ("message", "messages"):
            return list(frame.get("messages", [frame]))


async def settle(ws: aiohttp.ClientWebSocketResponse, kind: str,
                 messages: list[dict[str, Any]]) -> None:
    if messages:
        await ws.send_json({"type": kind, "messages": [
            {"partition": m["partition"], "offset": m["offset"]} for m in messages]})


async def test_filtered_admin_seeks_only_groups_bound_to_its_filter(
        secured: Client, topic: str) -> None:
    for group, tenant in (("a-group", "a"), ("b-group", "b")):
        await (await join(secured, topic, group, tenant)).close()
    await secured.post("/v1/groups/admin-group/pull", json={"topic": topic}, headers=ADMIN)

    async def seek(group: str, who: dict[str, str]) -> aiohttp.ClientResponse:
        return await secured.post(f"/v1/groups/{group}/seek",
                                  json={"topic": topic, "to": "earliest"}, headers=who)

    for group in ("a-group", "admin-group", "never-joined"):
        await refused(await seek(group, as_tenant("b")))
    assert (await seek("b-group", as_tenant("b"))).status == 200
    assert (await seek("a-group", ADMIN)).status == 200


async def parked_keys(client: Client, topic: str, group: str) -> list[str]:
    response = await client.get(f"/v1/groups/{group}", params={"topic": topic}, headers=ADMIN)
    if response.status == 404:
        return []
    partitions = (await response.json())["topics"][0]["partitions"]
    return [k["key"] for p in partitions for k in p.get("parked_keys", [])]


async def park_a_key(client: Client, topic: str, group: str,
                     tenant: str) -> aiohttp.ClientWebSocketResponse:
    """A key_shared member of ``tenant`` that acks its tenant's messages but nacks the one of key
    ``stuck``: the key parks (for a minute, its retry backoff) while the member stays."""
    ws = await join(client, topic, group, tenant, "key_shared", retry_backoff_ms="60000",
                    max_deliveries="10")
    await publish(client, topic, tenant, ["stuck"], key="stuck")
    stuck: list[dict[str, Any]] = []
    while not stuck:
        messages = await next_messages(ws)
        stuck = [m for m in messages if m["key"] == "stuck"]
        await settle(ws, "ack", [m for m in messages if m["key"] != "stuck"])
    await settle(ws, "nack", stuck)
    deadline = time.monotonic() + 10
    while await parked_keys(client, topic, group) != ["stuck"]:
        assert time.monotonic() < deadline, "the key never parked"
        await asyncio.sleep(0.1)
    return ws


async def test_filtered_admin_settles_parked_keys_only_in_groups_bound_to_its_filter(
        secured: Client, topic: str) -> None:
    members = [await park_a_key(secured, topic, f"{tenant}-keys", tenant) for tenant in "ab"]

    async def settle_parked(group: str, action: str) -> aiohttp.ClientResponse:
        return await secured.post(f"/v1/groups/{group}/parked", json={
            "topic": topic, "partition": 0, "key": "stuck", "action": action},
            headers=as_tenant("b"))

    for action in ("release", "dead_letter"):
        await refused(await settle_parked("a-keys", action))
    assert await parked_keys(secured, topic, "a-keys") == ["stuck"]
    settled = await settle_parked("b-keys", "dead_letter")
    assert settled.status == 200, await settled.text()
    assert await parked_keys(secured, topic, "b-keys") == []
    for member in members:
        await member.close()


async def pending(client: Client, topic: str, group: str) -> int:
    response = await client.get(f"/v1/groups/{group}", params={"topic": topic}, headers=ADMIN)
    return sum(p["pending"] for p in (await response.json())["topics"][0]["partitions"])


async def test_a_group_refuses_members_under_another_filter_on_every_gateway(
        aiohttp_client: Any, gateway_settings: GatewaySettings, tmp_path: Path,
        secured: Client, topic: str) -> None:
    other = await gateway(aiohttp_client, gateway_settings, tmp_path,
                          node_id=f"other-{uuid.uuid4().hex[:6]}")
    member = await join(secured, topic, "a-work", "a", "key_shared")
    taken: list[dict[str, Any]] = []
    while len(taken) < 2:
        messages = await next_messages(member)
        await settle(member, "ack", messages)
        taken += messages
    deadline = time.monotonic() + 10
    while await pending(secured, topic, "a-work"):
        assert time.monotonic() < deadline, "a's acks never settled"
        await asyncio.sleep(0.05)
    await member.close()  # a is away, having acked its two messages: its group stays its own
    for client in (secured, other):
        for who in ("b", None):
            with pytest.raises(aiohttp.WSServerHandshakeError) as refusal:
                await join(client, topic, "a-work", who, "key_shared")
            assert refusal.value.status == 403
        async with client.ws_connect("/v1/subscribe", params={
                "topic": topic, "group": "a-work", "mode": "key_shared"}) as by_frame:
            await by_frame.send_json({"type": "auth", "token": token("b")})
            closing = await by_frame.receive(timeout=5)
            assert (closing.type, by_frame.close_code) == (aiohttp.WSMsgType.CLOSE,
                                                            WS_CLOSE_FORBIDDEN)
    await publish(secured, topic, "a", ["while-away"])
    back = await join(other, topic, "a-work", "a", "key_shared")
    again = await next_messages(back)
    await back.close()
    # a lost nothing it had not acked, got nothing twice, and saw nothing of b's
    assert (sorted(m["value"] for m in taken), [m["value"] for m in again]) == (
        ["a-0", "a-1"], ["while-away"])


async def test_filtered_and_unfiltered_readers_never_share_a_group(
        secured: Client, topic: str) -> None:
    pulled = await secured.post("/v1/groups/shared-g/pull", json={"topic": topic}, headers=ADMIN)
    assert pulled.status == 200, await pulled.text()
    with pytest.raises(aiohttp.WSServerHandshakeError) as refusal:
        await join(secured, topic, "shared-g", "b", "shared")
    assert refusal.value.status == 403
    await (await join(secured, topic, "b-only", "b", "shared")).close()
    await refused(await secured.post("/v1/groups/b-only/pull", json={"topic": topic},
                                     headers=ADMIN))
