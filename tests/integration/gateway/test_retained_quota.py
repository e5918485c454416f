"""The retained-bytes quota on the real stack: 507 past the cap with nothing written, a tenant's
principals sharing one cap, two gateways enforcing one cap, room given back by a purge."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient
from auth_config import api_keys, rule, secured_client

from gateway.services import SERVICES
from gateway.settings import GatewaySettings

pytestmark = pytest.mark.integration

Client = TestClient[Any, Any]
CAP = 1000
VALUE = "x" * 400  # about 400 bytes stored: two fit under the cap, three do not
KEYS = {"solo": "sgk_rq-solo-key", "a1": "sgk_rq-a1-key", "a2": "sgk_rq-a2-key",
        "other": "sgk_rq-other-key"}
CONFIG = (api_keys(KEYS) + rule(list(KEYS), ["it-*"], ["publish", "subscribe", "admin"])
          + '[[quotas]]\nprincipals = ["a1", "a2"]\ntenant = "team-a"\n'
          + f"retained_bytes = {CAP}\n\n")
AS = {principal: {"X-API-Key": key} for principal, key in KEYS.items()}
WAIT_S = 10.0


async def quota_gateway(aiohttp_client: Any, settings: GatewaySettings, tmp_path: Path,
                        node_id: str = "rq-a") -> Client:
    """A gateway whose principals may each retain CAP bytes (team-a's principals CAP together),
    syncing often."""
    quick = dataclasses.replace(settings, node_id=node_id, quota_sync_interval_s=0.1,
                                max_retained_bytes_per_principal=CAP)
    return await secured_client(aiohttp_client, quick, tmp_path, CONFIG)


async def create_topic(client: Client, topic: str) -> None:
    created = await client.post("/v1/topics", json={"name": topic, "partitions": 1},
                                headers=AS["solo"])
    assert created.status == 201, await created.text()


async def publish(client: Client, topic: str, principal: str, value: str = VALUE) -> Any:
    return await client.post(f"/v1/topics/{topic}/messages",
                             json={"messages": [{"value": value}]}, headers=AS[principal])


async def stored(client: Client, topic: str) -> int:
    replay = await client.get(f"/v1/topics/{topic}/partitions/0/messages", headers=AS["solo"])
    assert replay.status == 200, await replay.text()
    return len((await replay.json())["messages"])


async def until_refused(client: Client, topic: str, principal: str) -> Any:
    """Publish one more message than the cap leaves room for until it is refused."""
    deadline = time.monotonic() + WAIT_S
    while True:
        answer = await publish(client, topic, principal)
        if answer.status == 507:
            return answer
        assert time.monotonic() < deadline, f"still {answer.status}, waited for a 507"
        await asyncio.sleep(0.05)


async def until_used(client: Client, subject: str, used: int) -> None:
    """Wait until the gateway's metrics show ``subject`` holding ``used`` bytes."""
    series = f'streamgate_quota_used{{quota="retained_bytes",subject="{subject}"}} {used:.1f}'
    deadline = time.monotonic() + WAIT_S
    while series not in await (await client.get("/metrics")).text():
        assert time.monotonic() < deadline, f"{subject} never showed {used} bytes used"
        await asyncio.sleep(0.05)


async def test_a_publish_past_the_retained_bytes_quota_is_refused_with_507_and_writes_nothing(
        aiohttp_client: Any, gateway_settings: GatewaySettings, tmp_path: Path,
        topic_name: str) -> None:
    client = await quota_gateway(aiohttp_client, gateway_settings, tmp_path)
    await create_topic(client, topic_name)
    assert [(await publish(client, topic_name, "solo")).status for _ in range(2)] == [200, 200]
    refused = await client.post(f"/v1/topics/{topic_name}/messages", headers=AS["solo"],
                                json={"messages": [{"value": "z"}, {"value": VALUE}]})
    assert refused.status == 507
    assert refused.content_type == "application/problem+json"
    assert 1 <= int(refused.headers["Retry-After"]) <= 60
    problem = await refused.json()
    assert problem["type"].endswith("quota-retained-bytes")
    assert (problem["quota"], problem["subject"], problem["limit"]) == (
        "retained_bytes", "principal:solo", CAP)
    assert 800 <= problem["used"] <= CAP
    assert await stored(client, topic_name) == 2


async def test_principals_of_one_tenant_share_its_cap_while_another_principal_is_unaffected(
        aiohttp_client: Any, gateway_settings: GatewaySettings, tmp_path: Path,
        topic_name: str) -> None:
    client = await quota_gateway(aiohttp_client, gateway_settings, tmp_path)
    await create_topic(client, topic_name)
    assert (await publish(client, topic_name, "a1")).status == 200
    assert (await publish(client, topic_name, "a2")).status == 200
    refused = await publish(client, topic_name, "a1")
    assert refused.status == 507
    assert (await refused.json())["subject"] == "tenant:team-a"
    assert (await publish(client, topic_name, "a2")).status == 507
    assert [(await publish(client, topic_name, "other")).status for _ in range(2)] == [200, 200]


async def test_two_gateways_enforce_one_cap(
        aiohttp_client: Any, gateway_settings: GatewaySettings, tmp_path: Path,
        topic_name: str) -> None:
    first = await quota_gateway(aiohttp_client, gateway_settings, tmp_path, "rq-a")
    second = await quota_gateway(aiohttp_client, gateway_settings, tmp_path, "rq-b")
    await create_topic(first, topic_name)
    while (await publish(first, topic_name, "solo")).status == 200:
        pass
    refused = await until_refused(second, topic_name, "solo")
    assert (await refused.json())["used"] > CAP - len(VALUE)


async def test_purging_the_topic_gives_the_room_back_after_a_sync(
        aiohttp_client: Any, gateway_settings: GatewaySettings, tmp_path: Path,
        topic_name: str) -> None:
    client = await quota_gateway(aiohttp_client, gateway_settings, tmp_path)
    await create_topic(client, topic_name)
    while (await publish(client, topic_name, "solo")).status == 200:
        pass
    purged = await client.post(f"/v1/topics/{topic_name}/purge", json={}, headers=AS["solo"])
    assert purged.status == 200, await purged.text()
    await until_used(client, "principal:solo", 0)
    assert [(await publish(client, topic_name, "solo")).status for _ in range(2)] == [200, 200]


async def test_no_retained_cap_anywhere_means_no_retained_quota_at_all(
        aiohttp_client: Any, gateway_settings: GatewaySettings, tmp_path: Path) -> None:
    client = await secured_client(aiohttp_client, gateway_settings, tmp_path,
                                  api_keys(KEYS), max_retained_bytes_per_principal=0)
    assert client.app[SERVICES].retained_quota is None


async def test_each_principal_reads_its_own_quota_subject_and_use_from_any_gateway(
        aiohttp_client: Any, gateway_settings: GatewaySettings, tmp_path: Path,
        topic_name: str) -> None:
    first = await quota_gateway(aiohttp_client, gateway_settings, tmp_path, "rq-a")
    second = await quota_gateway(aiohttp_client, gateway_settings, tmp_path, "rq-b")
    await create_topic(first, topic_name)
    assert (await publish(first, topic_name, "a1")).status == 200
    deadline = time.monotonic() + WAIT_S
    while True:
        answer = await second.get("/v1/quotas", headers=AS["a2"])
        assert answer.status == 200, await answer.text()
        document = await answer.json()
        if document["quotas"]["retained_bytes"]["used"]:
            break
        assert time.monotonic() < deadline, f"gateway B never saw team-a's bytes: {document}"
        await asyncio.sleep(0.05)
    assert document["subject"] == "tenant:team-a"
    assert document["quotas"]["retained_bytes"]["limit"] == CAP
    assert 400 <= document["quotas"]["retained_bytes"]["used"] <= CAP
    assert document["quotas"]["in_flight_messages"] == {"limit": None, "used": None}
    other = await (await second.get("/v1/quotas", headers=AS["other"])).json()
    assert other == {"subject": "principal:other",
                     "quotas": {"retained_bytes": {"limit": CAP, "used": 0},
                                "in_flight_messages": {"limit": None, "used": None}}}
    refused = await second.get("/v1/quotas")
    assert refused.status == 401
