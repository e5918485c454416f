"""The scale hint on the real cluster and etcd: under a step load one slow member cannot follow,
the hint settles on the members that can within a few lag rounds, and with that many members
the backlog drains within the target."""

from __future__ import annotations

import asyncio
import dataclasses
import math
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestClient
from group_readings import group_partitions, metric
from subscribers import Subscriber, subscribe, wait_until

from gateway.app import create_app
from gateway.observe.exposition import group_pseudonym
from gateway.settings import GatewaySettings

Client = TestClient[Any, Any]
PARTITIONS = 4
BURST = 20  # the step: a backlog at once, then arrivals at a steady rate
PUBLISH_EVERY_S = 1 / 6  # arrivals: 6 a second
ACK_EVERY_S = 0.2  # each member acks 5 a second, so one member falls behind
TARGET_DRAIN_S = 10.0
SETTLED_READS = 6  # equal hints in a row, a read every half lag round
SETTLE_WITHIN_S = 10.0  # twenty lag rounds


@pytest.fixture
async def scaling_gateway(aiohttp_client: Any, gateway_settings: GatewaySettings,
                          topic_name: str) -> Client:
    """A gateway judging every half second, with the test's topic made."""
    app = create_app(dataclasses.replace(gateway_settings, lag_interval_s=0.5))
    client: Client = await aiohttp_client(app)
    made = await client.post("/v1/topics", json={"name": topic_name, "partitions": PARTITIONS})
    assert made.status == 201, await made.text()
    return client


class Paced:
    """Work done at a steady pace in the background (publishing, acking) until stopped."""

    def __init__(self) -> None:
        self.tasks: list[asyncio.Task[None]] = []

    def start(self, period_s: float, work: Callable[[], Awaitable[None]]) -> None:
        self.tasks.append(asyncio.create_task(self._paced(period_s, work)))

    @staticmethod
    async def _paced(period_s: float, work: Callable[[], Awaitable[None]]) -> None:
        """``work`` on a fixed schedule, so the pace holds however long each call takes."""
        due = time.monotonic()
        while True:
            await work()
            due += period_s
            await asyncio.sleep(max(0.0, due - time.monotonic()))

    async def stop(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)


def publisher(client: Client, topic: str) -> Callable[[], Awaitable[None]]:
    sent = 0

    async def publish_one() -> None:
        nonlocal sent
        sent += 1
        response = await client.post(f"/v1/topics/{topic}/messages",
                                     json={"messages": [{"key": f"k{sent}", "value": sent}]})
        assert response.status == 200, await response.text()

    return publish_one


def pacer(member: Subscriber) -> Callable[[], Awaitable[None]]:
    """Acks the member's oldest un-acked message of a partition it still holds, one per call."""
    async def ack_one() -> None:
        for received in member.messages:
            if not received.acked and received.partition in member.partitions:
                received.acked = True
                await member.ack([(received.partition, received.offset)])
                return

    return ack_one


async def join(client: Client, topic: str, name: str) -> Subscriber:
    return await subscribe(client, name, auto=False, topic=topic, group="g", mode="exclusive",
                           max_in_flight=2, ack_timeout_ms=3000)


async def hint(client: Client, topic: str) -> dict[str, Any]:
    response = await client.get("/v1/groups/g/scale", params={
        "topic": topic, "target_drain_s": str(TARGET_DRAIN_S), "stabilise_s": "2"})
    assert response.status == 200, await response.text()
    return dict(await response.json())


async def settled_hint(client: Client, topic: str) -> dict[str, Any]:
    """The hint once it has given the same count ``SETTLED_READS`` times in a row (with rates:
    after two lag rounds), within ``SETTLE_WITHIN_S``."""
    seen: list[int] = []
    deadline = time.monotonic() + SETTLE_WITHIN_S
    while time.monotonic() < deadline:
        await asyncio.sleep(0.25)
        answer = await hint(client, topic)
        if answer["arrival_rate"] is None:  # fewer than two lag rounds yet
            continue
        seen = [*seen, answer["desired_members"]][-SETTLED_READS:]
        if len(seen) == SETTLED_READS and len(set(seen)) == 1:
            return answer
    raise AssertionError(f"the hint did not settle: {seen}")


async def unread(client: Client, topic: str) -> int:
    return sum(p["lag"] or 0 for p in await group_partitions(client, "g", topic))


async def test_hint_settles_on_the_members_that_drain_within_the_target(
        scaling_gateway: Client, topic_name: str) -> None:
    client, paced = scaling_gateway, Paced()
    members = [await join(client, topic_name, "m0")]
    await wait_until(lambda: len(members[0].partitions) == PARTITIONS, what="the assignment")
    response = await client.post(f"/v1/topics/{topic_name}/messages", json={
        "messages": [{"key": f"burst{i}", "value": i} for i in range(BURST)]})
    assert response.status == 200, await response.text()
    try:
        paced.start(PUBLISH_EVERY_S, publisher(client, topic_name))
        paced.start(ACK_EVERY_S, pacer(members[0]))
        answer = await settled_hint(client, topic_name)
        assert answer["current_members"] == 1
        assert answer["lag"] >= BURST
        need = (answer["lag"] / TARGET_DRAIN_S + answer["arrival_rate"]) \
            / answer["ack_rate_per_member"]
        # at least what the figures need (a higher hint of the window may still hold)
        assert min(PARTITIONS, math.ceil(need)) <= answer["desired_members"] <= PARTITIONS
        assert answer["desired_members"] >= 2  # one member cannot keep up with the arrivals
        text = await (await client.get("/metrics")).text()
        assert metric(text, "streamgate_group_desired_members",
                      f'group="{group_pseudonym("g")}"') == answer["desired_members"]

        scaled_at = time.monotonic()
        for index in range(1, answer["desired_members"]):
            members.append(await join(client, topic_name, f"m{index}"))
            paced.start(ACK_EVERY_S, pacer(members[-1]))
        while await unread(client, topic_name) > 1:
            assert time.monotonic() - scaled_at < TARGET_DRAIN_S, "the backlog did not drain"
            await asyncio.sleep(0.25)
        assert (await hint(client, topic_name))["current_members"] == len(members)
    finally:
        await paced.stop()
        for member in members:
            await member.close()


def pull_member(client: Client, http: aiohttp.ClientSession,
                topic: str) -> Callable[[], Awaitable[None]]:
    """Pulls one message for group "g" through ``http`` and acks it, one per call."""
    async def pull_and_ack() -> None:
        async with http.post(client.make_url("/v1/groups/g/pull"),
                             json={"topic": topic, "max_messages": 1}) as pulled:
            assert pulled.status == 200, await pulled.text()
            receipts = [m["receipt"] for m in (await pulled.json())["messages"]]
        if receipts:
            async with http.post(client.make_url("/v1/groups/g/ack"),
                                 json={"receipts": receipts}) as acked:
                assert acked.status == 200, await acked.text()

    return pull_and_ack


async def test_a_group_drained_by_pull_alone_counts_each_puller_as_a_member(
        scaling_gateway: Client, topic_name: str) -> None:
    client, paced = scaling_gateway, Paced()
    response = await client.post(f"/v1/topics/{topic_name}/messages", json={
        "messages": [{"key": f"burst{i}", "value": i} for i in range(BURST * 3)]})
    assert response.status == 200, await response.text()
    # two pullers on two addresses: two members, though neither holds a session
    sessions = [aiohttp.ClientSession(connector=aiohttp.TCPConnector(local_addr=(host, 0)))
                for host in ("127.0.0.1", "127.0.0.2")]
    try:
        for http in sessions:
            paced.start(ACK_EVERY_S, pull_member(client, http, topic_name))
        deadline, answer = time.monotonic() + SETTLE_WITHIN_S, await hint(client, topic_name)
        while answer["arrival_rate"] is None or not answer["ack_rate_per_member"]:
            assert time.monotonic() < deadline, f"no rates in the hint: {answer}"
            await asyncio.sleep(0.25)
            answer = await hint(client, topic_name)
        assert answer["current_members"] == 2
        assert answer["desired_members"] >= 1  # work waits and arrives
        told = await client.get("/v1/groups/g/scale", params={"topic": topic_name,
                                                              "members": "5"})
        assert (await told.json())["current_members"] == 5  # the caller's count wins
    finally:
        await paced.stop()
        for http in sessions:
            await http.close()
