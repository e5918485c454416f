"""The in-flight-messages quota on the real stack: WebSocket members held at the cap until they ack,
a tenant's principals sharing one cap, pulls refused with 429 past it on any gateway, and deliveries
that time out giving their room back."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestClient
from auth_config import api_keys, rule, secured_client

from gateway.auth.principal import Principal
from gateway.services import SERVICES, Services
from gateway.settings import GatewaySettings

pytestmark = pytest.mark.integration

Client = TestClient[Any, Any]
SOLO_CAP = 3
TEAM_CAP = 4
KEYS = {"solo": "sgk_if-solo-key", "a1": "sgk_if-a1-key", "a2": "sgk_if-a2-key",
        "other": "sgk_if-other-key"}


def config(run: str) -> str:
    """The auth config; the tenants are named after ``run`` so that tests running at once on the
    same Redis count apart."""
    return (api_keys(KEYS) + rule(list(KEYS), ["it-*"], ["publish", "subscribe", "admin"])
            + f'[[quotas]]\nprincipals = ["solo"]\ntenant = "{run}-solo"\n'
            + f"in_flight_messages = {SOLO_CAP}\n\n"
            + f'[[quotas]]\nprincipals = ["a1", "a2"]\ntenant = "{run}-team"\n'
            + f"in_flight_messages = {TEAM_CAP}\n\n")
RECEIPT_SECRET = "in-flight-quota-test-secret-0123456789"
WAIT_S = 15.0


def as_(principal: str) -> dict[str, str]:
    return {"X-API-Key": KEYS[principal]}


async def quota_gateway(aiohttp_client: Any, settings: GatewaySettings, tmp_path: Path,
                        run: str, node_id: str = "if-a") -> Client:
    return await secured_client(aiohttp_client, dataclasses.replace(settings, node_id=node_id),
                                tmp_path, config(run), quota_sync_interval_s=0.1,
                                receipt_secret=RECEIPT_SECRET)


async def topic_with(client: Client, topic: str, count: int) -> None:
    created = await client.post("/v1/topics", json={"name": topic, "partitions": 1},
                                headers=as_("solo"))
    assert created.status == 201, await created.text()
    published = await client.post(
        f"/v1/topics/{topic}/messages", headers=as_("solo"),
        json={"messages": [{"value": f"m{i}"} for i in range(count)]})
    assert published.status == 200, await published.text()


async def until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, f"waited {WAIT_S} s for {what}"
        await asyncio.sleep(0.02)


class Member:
    """A group member that acks only when told, recording its messages and quota frames."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self.messages: list[tuple[int, str]] = []
        self.quota_frames: list[dict[str, Any]] = []
        self._task = asyncio.create_task(self._read())

    async def _read(self) -> None:
        async for frame in self.ws:
            if frame.type is not aiohttp.WSMsgType.TEXT:
                continue
            doc = frame.json()
            if doc["type"] == "message":
                self.messages.append((doc["partition"], doc["offset"]))
            elif doc["type"] == "quota":
                self.quota_frames.append(doc)

    async def ack(self, refs: list[tuple[int, str]]) -> None:
        await self.ws.send_json({"type": "ack", "messages": [
            {"partition": p, "offset": o} for p, o in refs]})

    async def close(self) -> None:
        await self.ws.close()
        await self._task


async def member(client: Client, topic: str, principal: str, group: str,
                 ack_timeout_ms: int = 60_000) -> Member:
    ws = await client.ws_connect("/v1/subscribe", headers=as_(principal), params={
        "topic": topic, "mode": "shared", "group": group, "ack_timeout_ms": str(ack_timeout_ms),
        "max_in_flight": "100"})
    return Member(ws)


def shared_by(client: Client, principal: str) -> int:
    """What the gateway last wrote to Redis as the in-flight count of ``principal``'s subject."""
    services: Services = client.app[SERVICES]
    assert services.in_flight_quota is not None
    subject = services.quota_rules.subject_for(Principal(principal, "api_key"))
    window = services.in_flight_quota.window_for(subject)
    assert window is not None
    return window.shared


async def pull(client: Client, topic: str, principal: str = "solo",
               ack_timeout_ms: int = 60_000) -> aiohttp.ClientResponse:
    return await client.post("/v1/groups/g/pull", headers=as_(principal), json={
        "topic": topic, "max_messages": 10, "ack_timeout_ms": ack_timeout_ms})


async def test_a_websocket_member_never_holds_more_than_its_in_flight_cap_until_it_acks(
        aiohttp_client: Any, gateway_settings: GatewaySettings, tmp_path: Path,
        topic_name: str) -> None:
    client = await quota_gateway(aiohttp_client, gateway_settings, tmp_path, topic_name)
    await topic_with(client, topic_name, 3 * SOLO_CAP)
    solo = await member(client, topic_name, "solo", "g")
    # the quota frame is queued right behind the delivery that filled the window
    await until(lambda: bool(solo.quota_frames), "the quota frame")
    assert len(solo.messages) == SOLO_CAP
    assert solo.quota_frames[0] == {"type": "quota", "quota": "in_flight_messages",
                                    "limit": SOLO_CAP, "used": SOLO_CAP}
    await solo.ack(solo.messages[:2])
    await until(lambda: len(solo.quota_frames) == 2, "the second hold")
    assert len(solo.messages) == SOLO_CAP + 2
    assert not solo.ws.closed  # held, never disconnected
    await solo.close()


async def test_a_tenants_principals_share_one_cap_and_other_principals_are_unaffected(
        aiohttp_client: Any, gateway_settings: GatewaySettings, tmp_path: Path,
        topic_name: str) -> None:
    client = await quota_gateway(aiohttp_client, gateway_settings, tmp_path, topic_name)
    await topic_with(client, topic_name, 20)
    first = await member(client, topic_name, "a1", "g1")
    await until(lambda: bool(first.quota_frames), "a1's hold")
    second = await member(client, topic_name, "a2", "g2")
    await until(lambda: bool(second.quota_frames), "a2 told of the tenant's hold")
    assert len(first.messages) + len(second.messages) == TEAM_CAP
    assert second.quota_frames[0]["limit"] == TEAM_CAP
    other = await member(client, topic_name, "other", "g3")
    await until(lambda: len(other.messages) == 20, "the uncapped principal's deliveries")
    assert not other.quota_frames
    await first.ack(first.messages)
    # room back: whichever of the two reads first takes it, and the tenant is held again at the cap
    await until(lambda: len(first.quota_frames) == len(second.quota_frames) == 2,
                "the tenant's second hold")
    assert len(first.messages) + len(second.messages) == 2 * TEAM_CAP
    for each in (first, second, other):
        await each.close()


async def test_a_pull_past_the_cap_is_429_until_acks_on_another_gateway_give_room_back(
        aiohttp_client: Any, gateway_settings: GatewaySettings, tmp_path: Path,
        topic_name: str) -> None:
    gateway_a = await quota_gateway(aiohttp_client, gateway_settings, tmp_path, topic_name,
                                  "if-a")
    gateway_b = await quota_gateway(aiohttp_client, gateway_settings, tmp_path, topic_name,
                                  "if-b")
    await topic_with(gateway_a, topic_name, 3 * SOLO_CAP)
    pulled = await pull(gateway_a, topic_name)
    assert pulled.status == 200, await pulled.text()
    receipts = [m["receipt"] for m in (await pulled.json())["messages"]]
    assert len(receipts) == SOLO_CAP
    refused = await pull(gateway_a, topic_name)
    assert refused.status == 429
    assert refused.content_type == "application/problem+json"
    assert int(refused.headers["Retry-After"]) >= 1
    problem = await refused.json()
    assert problem["type"].endswith("quota-in-flight")
    assert (problem["quota"], problem["subject"], problem["limit"], problem["used"]) == (
        "in_flight_messages", f"tenant:{topic_name}-solo", SOLO_CAP, SOLO_CAP)
    # gateway B has pulled nothing itself: it knows of A's deliveries once A shared them
    await until(lambda: shared_by(gateway_a, "solo") == SOLO_CAP, "A's sync")
    assert (await pull(gateway_b, topic_name)).status == 429
    acked = await gateway_b.post("/v1/groups/g/ack", headers=as_("solo"),
                                 json={"receipts": receipts})
    assert acked.status == 200, await acked.text()
    statuses: list[int] = []

    async def pulls_again() -> bool:
        answer = await pull(gateway_a, topic_name)
        statuses.append(answer.status)
        return answer.status == 200 and len((await answer.json())["messages"]) == SOLO_CAP

    deadline = time.monotonic() + WAIT_S
    while not await pulls_again():
        assert time.monotonic() < deadline, f"pulls still answered {statuses[-1]}"
        await asyncio.sleep(0.05)
    metrics = await (await gateway_a.get("/metrics")).text()
    series = ('streamgate_quota_refused_total{quota="in_flight_messages",'
              f'subject="tenant:{topic_name}-solo"}}')
    assert series in metrics


async def test_deliveries_that_time_out_give_their_room_back(
        aiohttp_client: Any, gateway_settings: GatewaySettings, tmp_path: Path,
        topic_name: str) -> None:
    client = await quota_gateway(aiohttp_client, gateway_settings, tmp_path, topic_name)
    await topic_with(client, topic_name, SOLO_CAP)
    first = await pull(client, topic_name, ack_timeout_ms=2000)
    assert len((await first.json())["messages"]) == SOLO_CAP
    assert (await pull(client, topic_name, ack_timeout_ms=2000)).status == 429
    deadline = time.monotonic() + WAIT_S
    while True:  # never acked: the same messages come back once their ack timeout passed
        again = await pull(client, topic_name, ack_timeout_ms=2000)
        if again.status == 200 and (await again.json())["messages"]:
            break
        assert time.monotonic() < deadline, f"still {again.status} past the ack timeout"
        await asyncio.sleep(0.05)


async def test_a_members_deliveries_that_time_out_give_its_room_back(
        aiohttp_client: Any, gateway_settings: GatewaySettings, tmp_path: Path,
        topic_name: str) -> None:
    client = await quota_gateway(aiohttp_client, gateway_settings, tmp_path, topic_name)
    await topic_with(client, topic_name, 3 * SOLO_CAP)
    solo = await member(client, topic_name, "solo", "g", ack_timeout_ms=1000)
    await until(lambda: bool(solo.quota_frames), "the quota frame")
    assert len(solo.messages) == SOLO_CAP
    # never acked: once their ack timeout passed, the window has room again and fills again
    await until(lambda: len(solo.quota_frames) == 2, "the hold after the timeouts")
    assert len(solo.messages) == 2 * SOLO_CAP
    await solo.close()
