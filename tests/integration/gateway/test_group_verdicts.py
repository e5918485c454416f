"""Each stall verdict reason, provoked on the real cluster and etcd, is named in
``GET /v1/groups/{group}`` (and the verdict metric) within two ack timeouts."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient
from group_readings import metric
from subscribers import Subscriber, subscribe, wait_until

from gateway.app import create_app
from gateway.observe.exposition import group_pseudonym
from gateway.settings import GatewaySettings

Client = TestClient[Any, Any]
ACK_TIMEOUT_MS = 2000
WITHIN_S = 2 * ACK_TIMEOUT_MS / 1000


@pytest.fixture
async def judging_gateway(aiohttp_client: Any, gateway_settings: GatewaySettings) -> Client:
    settings = dataclasses.replace(gateway_settings, lag_interval_s=0.2)
    client: Client = await aiohttp_client(create_app(settings))
    return client


@pytest.fixture
async def archiving_gateway(aiohttp_client: Any, gateway_settings: GatewaySettings,
                            tmp_path: Path) -> Client:
    settings = dataclasses.replace(gateway_settings, lag_interval_s=0.2,
                                   archive_url=f"file://{tmp_path / 'archive'}",
                                   hot_retention_ms=500, archive_interval_s=0.2)
    client: Client = await aiohttp_client(create_app(settings))
    return client


async def create(client: Client, topic: str, **more: Any) -> None:
    response = await client.post("/v1/topics", json={"name": topic, "partitions": 1} | more)
    assert response.status == 201, await response.text()


async def publish(client: Client, topic: str, *keys: str) -> None:
    response = await client.post(f"/v1/topics/{topic}/messages",
                                 json={"messages": [{"key": k, "value": 1} for k in keys]})
    assert response.status == 200, await response.text()


async def pull(client: Client, topic: str, group: str) -> list[dict[str, Any]]:
    response = await client.post(f"/v1/groups/{group}/pull", json={
        "topic": topic, "max_messages": 1, "ack_timeout_ms": ACK_TIMEOUT_MS,
        "max_deliveries": 100})
    assert response.status == 200, await response.text()
    return list((await response.json())["messages"])


async def settle(client: Client, group: str, action: str, messages: list[dict[str, Any]]) -> None:
    response = await client.post(f"/v1/groups/{group}/{action}",
                                 json={"receipts": [m["receipt"] for m in messages]})
    assert response.status == 200, await response.text()


async def holding_member(client: Client, topic: str, mode: str, *keys: str,
                         delivered: int | None = None, **more: Any) -> Subscriber:
    """A member of group ``g`` on a new one-partition ``topic`` that acks nothing, once the
    messages of ``keys`` are published and ``delivered`` of them (default: all) reached it."""
    await create(client, topic)
    member = await subscribe(client, "member", auto=False, topic=topic, group="g", mode=mode,
                             ack_timeout_ms=ACK_TIMEOUT_MS, max_deliveries=100, **more)
    await wait_until(lambda: member.partitions == [0], what="the assignment")
    await publish(client, topic, *keys)
    count = len(keys) if delivered is None else delivered
    await wait_until(lambda: len(member.messages) == count, what="the deliveries")
    return member


async def verdict_naming(client: Client, topic: str, group: str, reason: str,
                         since: float, stall: bool = False) -> dict[str, Any]:
    """The partition's verdict once it names ``reason`` (as its reason or among its warnings;
    with ``stall``, as the reason of a stall), asserted to come within two ack timeouts of
    ``since``."""
    while True:
        response = await client.get(f"/v1/groups/{group}", params={"topic": topic})
        if response.status == 200:
            verdict = (await response.json())["topics"][0]["partitions"][0]["verdict"]
            named = () if verdict is None else (
                (verdict["reason"],) if stall else (verdict["reason"], *verdict["warnings"]))
            if reason in named and (not stall or verdict["state"] == "stalled"):
                return dict(verdict)
        assert time.monotonic() - since < WITHIN_S, f"{reason} not named in {WITHIN_S}s"
        await asyncio.sleep(0.1)


async def cli(client: Client, *args: str) -> str:
    """What the client CLI prints for ``args`` against the test gateway."""
    entry = "import sys; from streamgate_client.cli import main; sys.exit(main())"
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", entry, *args, "--url", str(client.make_url("")),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0, err.decode()
    return out.decode()


@contextlib.asynccontextmanager
async def repeating(work: Any) -> AsyncIterator[None]:
    """Runs ``work`` over and over in the background while the block runs."""
    async def forever() -> None:
        while True:
            await work()
            await asyncio.sleep(0.1)

    task = asyncio.create_task(forever())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_group_whose_members_left_is_stalled_with_no_member(
        judging_gateway: Client, topic_name: str) -> None:
    client = judging_gateway
    member = await holding_member(client, topic_name, "shared", "a", "b")
    await member.close()
    verdict = await verdict_naming(client, topic_name, "g", "no_member", time.monotonic(),
                                   stall=True)
    assert verdict["state"] == "stalled"
    text = await (await client.get("/metrics")).text()
    assert metric(text, "streamgate_group_verdict",
                  f'group="{group_pseudonym("g")}",partition="0",reason="no_member",'
                  f'state="stalled",topic="{topic_name}"') == 1
    table = await cli(client, "groups", "describe", "g", "--topic", topic_name, "-o", "table")
    header, row = table.splitlines()
    assert header.split()[:7] == ["TOPIC", "PARTITION", "LAG", "PENDING", "STATE", "REASON",
                                  "WARNINGS"]
    assert row.split()[:6] == [topic_name, "0", "0", "2", "stalled", "no_member"]


async def test_member_holding_entries_without_acking_is_named(
        judging_gateway: Client, topic_name: str) -> None:
    client = judging_gateway
    member = await holding_member(client, topic_name, "shared", "a")
    verdict = await verdict_naming(client, topic_name, "g", "member_not_acking", time.monotonic(),
                                   stall=True)
    assert (verdict["state"], verdict["reason"]) == ("stalled", "member_not_acking")
    await member.close()


async def test_entry_nacked_over_and_over_is_a_redelivery_loop(
        judging_gateway: Client, topic_name: str) -> None:
    client = judging_gateway
    await create(client, topic_name)
    await pull(client, topic_name, "g")  # the group starts here
    await publish(client, topic_name, "poison")

    async def nack_what_comes() -> None:
        if messages := await pull(client, topic_name, "g"):
            await settle(client, "g", "nack", messages)

    started = time.monotonic()
    async with repeating(nack_what_comes):
        verdict = await verdict_naming(client, topic_name, "g", "redelivery_loop", started,
                                       stall=True)
    assert (verdict["state"], verdict["reason"]) == ("stalled", "redelivery_loop")


async def test_key_waiting_for_its_failed_message_is_a_parked_key(
        judging_gateway: Client, topic_name: str) -> None:
    client = judging_gateway
    # the key's second message waits behind its first
    member = await holding_member(client, topic_name, "key_shared", "k", "k", delivered=1,
                                  retry_backoff_ms=60_000)
    first = member.messages[0]
    await member.nack([(first.partition, first.offset)])  # its key waits a minute for it
    verdict = await verdict_naming(client, topic_name, "g", "parked_key", time.monotonic(),
                                   stall=True)
    assert (verdict["state"], verdict["reason"]) == ("stalled", "parked_key")
    await member.close()


async def test_waiting_entries_that_max_length_will_drop_warn_of_a_retention_overrun(
        judging_gateway: Client, topic_name: str) -> None:
    client = judging_gateway
    await create(client, topic_name, max_length=5000)
    await pull(client, topic_name, "g")  # the group starts here, then reads no more

    async def flood() -> None:
        await publish(client, topic_name, *(f"k{i}" for i in range(20)))

    started = time.monotonic()
    async with repeating(flood):
        verdict = await verdict_naming(client, topic_name, "g", "retention_overrun_in", started)
    assert verdict["state"] in ("behind", "stalled")


async def test_group_holding_the_hot_tier_past_the_archive_target_is_archive_behind(
        archiving_gateway: Client, topic_name: str) -> None:
    client = archiving_gateway
    await create(client, topic_name)
    await pull(client, topic_name, "g")  # the group starts here, then reads no more
    await publish(client, topic_name, "a", "b")
    verdict = await verdict_naming(client, topic_name, "g", "archive_behind", time.monotonic())
    assert verdict["state"] in ("behind", "stalled")


async def test_every_gateway_answers_with_the_owners_verdict(
        aiohttp_client: Any, gateway_settings: GatewaySettings, topic_name: str) -> None:
    one, other = [await aiohttp_client(create_app(dataclasses.replace(
        gateway_settings, node_id=name, lag_interval_s=0.2))) for name in ("one", "other")]
    await create(one, topic_name, partitions=4)
    for partition in range(4):
        response = await one.post(f"/v1/topics/{topic_name}/messages", json={
            "messages": [{"partition": partition, "value": 1}]})
        assert response.status == 200, await response.text()
    await pull(one, topic_name, "g")  # one entry goes out, then nobody pulls again
    started = time.monotonic()
    for client in (one, other):
        verdict = await verdict_naming(client, topic_name, "g", "no_member", started, stall=True)
        assert verdict["state"] == "stalled"
    # each partition's owner judges it on its own lag rounds: the others follow within the bound
    while (states := [await partition_states(c, topic_name, "g") for c in (one, other)]) != [
            ["stalled"] * 4] * 2:
        assert time.monotonic() - started < WITHIN_S, f"not every partition stalled: {states}"
        await asyncio.sleep(0.1)


async def partition_states(client: Client, topic: str, group: str) -> list[str | None]:
    """The verdict state of each partition of the group on the topic, as this gateway reads it."""
    described = await (await client.get(f"/v1/groups/{group}", params={"topic": topic})).json()
    return [p["verdict"] and p["verdict"]["state"] for p in described["topics"][0]["partitions"]]

