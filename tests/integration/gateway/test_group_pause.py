"""Pausing a consumer group on the real cluster and etcd, two gateways: nothing delivered while
paused, members told, held messages still settle, the resume goes on where it stopped."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable
from dataclasses import field
from pathlib import Path
from typing import Any

import jwt
import orjson
import pytest
from aiohttp.test_utils import TestClient
from auth_config import api_keys, hs256_jwt, rule, secured_client, tenant_filters
from subscribers import Subscriber, query_pairs, wait_until

from gateway.app import create_app
from gateway.cli import main
from gateway.settings import GatewaySettings
from streamgate_client import Admin, Consumer

Client = TestClient[Any, Any]
Gateways = Callable[..., Any]


@dataclasses.dataclass
class Member(Subscriber):
    """A subscriber that also keeps the pause frames it is sent."""

    told: list[dict[str, Any]] = field(default_factory=list)

    async def _handle(self, doc: dict[str, Any]) -> None:
        if doc["type"] in ("paused", "resumed"):
            self.told.append(doc)
        else:
            await super()._handle(doc)

    @property
    def said(self) -> list[str]:
        return [doc["type"] for doc in self.told]


@pytest.fixture
def gateway(aiohttp_client: Any, gateway_settings: GatewaySettings) -> Gateways:
    async def start(name: str) -> Client:
        settings = dataclasses.replace(gateway_settings, node_id=name, lag_interval_s=0.2)
        client: Client = await aiohttp_client(create_app(settings))
        return client

    return start


async def join(client: Client, topic: str, mode: str, **params: Any) -> Member:
    ws = await client.ws_connect("/v1/subscribe", params=query_pairs(
        {"topic": topic, "group": "g", "mode": mode, "ack_timeout_ms": 1000,
         "max_deliveries": 100, **params}))
    member = Member(mode, ws, auto=False)
    member.start()
    return member


async def create(client: Client, topic: str, partitions: int) -> None:
    response = await client.post("/v1/topics", json={"name": topic, "partitions": partitions})
    assert response.status == 201, await response.text()


async def publish(client: Client, topic: str, values: range, partitions: int = 2) -> None:
    response = await client.post(f"/v1/topics/{topic}/messages", json={"messages": [
        {"key": f"k{v}", "value": v, "partition": v % partitions} for v in values]})
    assert response.status == 200, await response.text()


async def set_pause(client: Client, topic: str, action: str, **body: Any) -> dict[str, Any]:
    response = await client.post(f"/v1/groups/g/{action}", params={"topic": topic},
                                 json=body or None)
    assert response.status == 200, await response.text()
    return dict(await response.json())


async def describe(client: Client, topic: str,
                   headers: dict[str, str] | None = None) -> dict[str, Any] | None:
    response = await client.get("/v1/groups/g", params={"topic": topic}, headers=headers)
    if response.status == 404:
        return None  # no state yet
    assert response.status == 200, await response.text()
    return dict((await response.json())["topics"][0])


async def described_when(client: Client, topic: str, what: str,
                         predicate: Callable[[dict[str, Any]], bool],
                         headers: dict[str, str] | None = None) -> dict[str, Any]:
    """The group's description once ``predicate`` holds of it."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        described = await describe(client, topic, headers)
        if described is not None and predicate(described):
            return described
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


async def judged_paused(client: Client, topic: str) -> dict[str, Any]:
    """The group's description once every partition's owner judged it paused."""
    return await described_when(client, topic, "the paused verdicts", lambda d: all(
        (p["verdict"] or {}).get("state") == "paused" for p in d["partitions"]))


def values(*members: Member) -> list[Any]:
    return sorted(m.value for member in members for m in member.messages)


async def ack_all(*members: Member) -> None:
    for member in members:
        await member.ack([(m.partition, m.offset) for m in member.messages])


@pytest.mark.parametrize("mode", ["exclusive", "key_shared"])
async def test_paused_group_gets_nothing_on_any_gateway_and_resumes_where_it_stopped(
        gateway: Gateways, topic_name: str, mode: str) -> None:
    one, other = await gateway("one"), await gateway("other")
    await create(one, topic_name, 2)
    members = [await join(one, topic_name, mode), await join(other, topic_name, mode)]
    await wait_until(lambda: sorted(p for m in members for p in m.partitions) == [0, 1],
                     what="both partitions assigned")
    await publish(one, topic_name, range(4))
    await wait_until(lambda: len(values(*members)) == 4, what="the first messages held")
    paused = await set_pause(other, topic_name, "pause")
    assert (paused["paused"], paused["until_ms"]) == (True, None)
    await wait_until(lambda: all(m.said == ["paused"] for m in members), what="members told")
    await ack_all(*members)  # what members hold still settles while paused
    await described_when(one, topic_name, "the acks", lambda d: sum(
        p["pending"] for p in d["partitions"]) == 0)
    assert (await judged_paused(one, topic_name))["paused"] is True
    await publish(other, topic_name, range(4, 10))
    await described_when(one, topic_name, "the entries published while paused", lambda d: sum(
        p["lag"] for p in d["partitions"]) == 6)
    assert values(*members) == list(range(4))
    await set_pause(one, topic_name, "resume")
    await wait_until(lambda: len(values(*members)) == 10, what="the rest after the resume")
    assert values(*members) == list(range(10))
    assert all(m.said == ["paused", "resumed"] for m in members)
    assert not (await described_when(other, topic_name, "the resume", lambda d: True))["paused"]
    for member in members:
        await member.close()


async def test_entries_timing_out_while_paused_come_again_after_the_resume(
        gateway: Gateways, topic_name: str) -> None:
    client = await gateway("one")
    await create(client, topic_name, 1)
    member = await join(client, topic_name, "shared")
    await publish(client, topic_name, range(2), partitions=1)
    await wait_until(lambda: len(member.messages) == 2, what="the first deliveries")
    await set_pause(client, topic_name, "pause")
    await wait_until(lambda: member.said == ["paused"], what="the pause")
    await judged_paused(client, topic_name)
    await described_when(client, topic_name, "two ack timeouts", lambda d: d["partitions"][0][
        "oldest_pending_age_ms"] >= 2000)
    assert len(member.messages) == 2
    await set_pause(client, topic_name, "resume")
    await wait_until(lambda: len(member.messages) == 4, what="the redeliveries")
    assert [m.delivery_count for m in member.messages[2:]] == [2, 2]
    await member.close()


async def test_pull_of_a_paused_group_answers_no_message_and_says_so(
        gateway: Gateways, topic_name: str) -> None:
    one, other = await gateway("one"), await gateway("other")
    await create(one, topic_name, 2)
    body = {"topic": topic_name, "max_messages": 10, "wait_ms": 200}
    assert (await (await one.post("/v1/groups/g/pull", json=body)).json())["paused"] is False
    await publish(one, topic_name, range(3))
    await set_pause(one, topic_name, "pause")
    await described_when(other, topic_name, "the other gateway to see the pause",
                         lambda d: d["paused"])
    answer = await (await other.post("/v1/groups/g/pull", json=body)).json()
    assert answer == {"messages": [], "paused": True, "until_ms": None}
    await set_pause(other, topic_name, "resume")
    got: list[Any] = []
    while len(got) < 3:
        answer = await (await one.post("/v1/groups/g/pull", json=body)).json()
        got += [m["value"] for m in answer["messages"]]
    assert sorted(got) == [0, 1, 2]


async def test_pause_with_a_deadline_resumes_by_itself(gateway: Gateways,
                                                       topic_name: str) -> None:
    client = await gateway("one")
    await create(client, topic_name, 1)
    until_ms = int(time.time() * 1000) + 1500
    assert (await set_pause(client, topic_name, "pause", until_ms=until_ms))["until_ms"] == until_ms
    member = await join(client, topic_name, "exclusive")
    await wait_until(lambda: member.said == ["paused"], what="a joining member told")
    assert member.told[0]["until_ms"] == until_ms
    await publish(client, topic_name, range(2), partitions=1)
    await wait_until(lambda: member.said == ["paused", "resumed"], what="the deadline")
    assert int(time.time() * 1000) >= until_ms
    await wait_until(lambda: len(member.messages) == 2, what="the messages after the deadline")
    await member.close()


async def test_pause_outlives_the_gateway_that_served_the_group(
        gateway: Gateways, topic_name: str) -> None:
    first = await gateway("first")
    await create(first, topic_name, 1)
    await set_pause(first, topic_name, "pause")
    await first.close()
    restarted = await gateway("first")
    member = await join(restarted, topic_name, "exclusive")
    await wait_until(lambda: member.said == ["paused"], what="the pause after the restart")
    await wait_until(lambda: member.partitions == [0], what="the assignment")
    await publish(restarted, topic_name, range(3), partitions=1)
    await described_when(restarted, topic_name, "the entries waiting", lambda d: d["paused"]
                         and d["partitions"][0]["lag"] == 3)
    assert member.messages == []
    await set_pause(restarted, topic_name, "resume")
    await wait_until(lambda: len(member.messages) == 3, what="the messages after the resume")
    await member.close()


def as_tenant(tenant: str) -> dict[str, str]:
    claims = {"sub": f"app-{tenant}", "tenant": tenant, "aud": "streamgate",
              "exp": int(time.time() + 300)}
    return {"Authorization": f"Bearer {jwt.encode(claims, 'f' * 40, algorithm='HS256')}"}


async def test_filtered_principal_pauses_only_groups_bound_to_its_filter(
        aiohttp_client: Any, gateway_settings: GatewaySettings, tmp_path: Path,
        topic_name: str) -> None:
    config = (hs256_jwt() + rule(["claim:tenant=a", "claim:tenant=b"], ["it-*"],
                                 ["publish", "subscribe", "admin"]) + tenant_filters("a", "b"))
    client = await secured_client(aiohttp_client, gateway_settings, tmp_path, config,
                                  {"TEST_JWT_SECRET": "f" * 40})
    response = await client.post("/v1/topics", json={"name": topic_name, "partitions": 1},
                                 headers=as_tenant("a"))
    assert response.status == 201, await response.text()
    ws = await client.ws_connect("/v1/subscribe", params={"topic": topic_name, "group": "g"},
                                 headers=as_tenant("a"))  # binds g to tenant a's filter
    await described_when(client, topic_name, "the binding", lambda d: True, as_tenant("a"))
    for tenant, status in (("b", 403), ("a", 200)):
        response = await client.post("/v1/groups/g/pause", params={"topic": topic_name},
                                     headers=as_tenant(tenant))
        assert response.status == status, await response.text()
    await ws.close()


async def test_pausing_needs_the_admin_grant_on_the_topic(
        aiohttp_client: Any, gateway_settings: GatewaySettings, tmp_path: Path,
        topic_name: str) -> None:
    config = (api_keys({"admin": "sgk_pause-admin", "reader": "sgk_pause-reader"})
              + rule(["admin"], ["*"], ["publish", "subscribe", "admin"])
              + rule(["reader"], ["*"], ["subscribe"]))
    client = await secured_client(aiohttp_client, gateway_settings, tmp_path, config)
    admin, reader = {"X-API-Key": "sgk_pause-admin"}, {"X-API-Key": "sgk_pause-reader"}
    response = await client.post("/v1/topics", json={"name": topic_name, "partitions": 1},
                                 headers=admin)
    assert response.status == 201, await response.text()
    for action in ("pause", "resume"):
        refused = await client.post(f"/v1/groups/g/{action}", params={"topic": topic_name},
                                    headers=reader)
        assert refused.status == 403, await refused.text()
        allowed = await client.post(f"/v1/groups/g/{action}", params={"topic": topic_name},
                                    headers=admin)
        assert allowed.status == 200, await allowed.text()


async def test_client_pauses_a_group_and_its_consumer_knows(gateway: Gateways,
                                                             topic_name: str) -> None:
    client = await gateway("one")
    url = str(client.make_url("")).rstrip("/")
    await create(client, topic_name, 1)
    async with Admin(url) as admin, Consumer(url, topic_name, group="g", from_="earliest") as c:
        next_message = asyncio.ensure_future(anext(c))
        until_ms = int(time.time() * 1000) + 60_000
        paused = await admin.pause_group("g", topic_name, until_ms=until_ms)
        assert (paused.paused, paused.until_ms) == (True, until_ms)
        await wait_until(lambda: c.paused, what="the consumer told")
        assert c.paused_until_ms == until_ms
        await publish(client, topic_name, range(1), partitions=1)
        assert (await admin.describe_group("g", topic_name)).topics[0].paused is True
        assert (await admin.resume_group("g", topic_name)).paused is False
        message = await asyncio.wait_for(next_message, 20)
        assert (message.value, c.paused) == (0, False)


async def test_cli_pauses_for_a_while_and_resumes(gateway: Gateways, topic_name: str,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    client = await gateway("one")
    url = str(client.make_url("")).rstrip("/")
    await create(client, topic_name, 1)
    command = ["groups", "pause", "g", "--topic", topic_name, "--for-s", "60", "--url", url]
    assert await asyncio.to_thread(main, command) == 0
    paused = orjson.loads(capsys.readouterr().out)
    assert paused["paused"] is True
    assert paused["until_ms"] > time.time() * 1000 + 50_000
    command = ["groups", "resume", "g", "--topic", topic_name, "--url", url]
    assert await asyncio.to_thread(main, command) == 0
    assert orjson.loads(capsys.readouterr().out)["paused"] is False
