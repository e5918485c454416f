"""etcd stopped by PID for longer than gRPC's own reconnect backoff would wait, then started again
on the same port and data: the connection and an exclusive group's deliveries come back within a
second or two of etcd serving again, not at the next reconnect gRPC scheduled during the outage."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from failure_cluster import Client

from gateway.app import create_app
from gateway.settings import GatewaySettings
from partitioner.backoff import MAX_BACKOFF_S
from partitioner.errors import CoordinationUnavailable
from partitioner.etcd.aetcd_client import MAX_RECONNECT_BACKOFF_MS
from partitioner.etcd.connection import open_etcd
from streamgate_devstack import EtcdConfig, EtcdProcess

pytestmark = pytest.mark.integration

# long enough for gRPC's default reconnect backoff to have grown to seconds
OUTAGE_S = 10.0
MEMBER_LEASE_TTL_S = 3.0  # shorter than the outage: every member counts itself lost meanwhile
RESUBSCRIBE_S = 0.2  # the test's subscriber comes back this long after a close
MARGIN_S = 0.5  # a loaded machine's scheduling
RECONNECT_S = MAX_RECONNECT_BACKOFF_MS / 1000


@pytest.fixture
def private_etcd(tmp_path: Path, devstack_binaries: None) -> Iterator[EtcdProcess]:
    """An etcd of this test's own, so stopping it disturbs nobody else."""
    with EtcdProcess(EtcdConfig(data_dir=tmp_path / "etcd")) as etcd:
        yield etcd


async def outage(etcd: EtcdProcess, during: Any = None) -> float:
    """Stop etcd for ``OUTAGE_S`` (calling ``during`` every 0.2 s meanwhile), start it again on the
    same port and data; when it served again."""
    await asyncio.to_thread(etcd.stop)
    loop = asyncio.get_running_loop()
    ends = loop.time() + OUTAGE_S
    while loop.time() < ends:
        if during is not None:
            with contextlib.suppress(CoordinationUnavailable):
                await during()
        await asyncio.sleep(0.2)
    await asyncio.to_thread(etcd.start)
    return loop.time()


async def test_connection_answers_within_a_reconnect_of_etcd_serving_again(
        private_etcd: EtcdProcess) -> None:
    async with open_etcd([private_etcd.endpoint], timeout_s=1.0) as conn:
        await conn.put(b"/recovery/k", b"v")
        back = await outage(private_etcd, lambda: conn.get(b"/recovery/k"))
        loop = asyncio.get_running_loop()
        while True:
            with contextlib.suppress(CoordinationUnavailable):
                assert (await conn.get(b"/recovery/k")) is not None
                break
            await asyncio.sleep(0.02)
        took_s = loop.time() - back
    print(f"\n[etcd outage {OUTAGE_S:.0f}s] the connection answered {took_s:.2f}s after etcd "
          "served again")
    assert took_s <= RECONNECT_S + MARGIN_S


async def test_group_deliveries_resume_within_seconds_of_etcd_serving_again(
        aiohttp_client: Any, gateway_settings: GatewaySettings, private_etcd: EtcdProcess,
        topic_name: str) -> None:
    settings = dataclasses.replace(gateway_settings, etcd_endpoints=(private_etcd.endpoint,),
                                   etcd_timeout_s=1.0, member_lease_ttl_s=MEMBER_LEASE_TTL_S)
    client: Client = await aiohttp_client(create_app(settings))
    created = await client.post("/v1/topics", json={"name": topic_name, "partitions": 2})
    assert created.status == 201
    member = GroupSubscriber(client, topic_name)
    subscriber = asyncio.create_task(member.run())
    try:
        await member.first_arrival(client, "before")
        back = await outage(private_etcd)
        took_s = await member.first_arrival(client, "after") - back
    finally:
        subscriber.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await subscriber
    print(f"\n[etcd outage {OUTAGE_S:.0f}s, member lease {MEMBER_LEASE_TTL_S:.0f}s] closes "
          f"{sorted(set(member.closes), key=str)}; group deliveries resumed {took_s:.2f}s after "
          "etcd served again")
    assert 4503 in member.closes  # the member was lost, so this measures a whole re-join
    # a reconnect, a retry of each coordination loop, the group's forming delay, a resubscribe
    forming_s = settings.group_initial_assignment_delay_ms / 1000
    assert took_s <= RECONNECT_S + MAX_BACKOFF_S + forming_s + RESUBSCRIBE_S + MARGIN_S


@dataclasses.dataclass
class GroupSubscriber:
    """An exclusive-group member that acks everything and subscribes again after every close."""

    client: Client
    topic: str
    arrivals: dict[str, float] = dataclasses.field(default_factory=dict)
    closes: list[int | None] = dataclasses.field(default_factory=list)

    async def run(self) -> None:
        params = {"topic": self.topic, "group": "g", "mode": "exclusive"}
        while True:
            try:
                async with self.client.ws_connect("/v1/subscribe", params=params) as ws:
                    await self._consume(ws)
                self.closes.append(ws.close_code)
            except aiohttp.ClientError:
                self.closes.append(None)
            await asyncio.sleep(RESUBSCRIBE_S)

    async def _consume(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        async for frame in ws:
            doc = frame.json()
            if doc["type"] == "message":
                self.arrivals.setdefault(doc["value"], asyncio.get_running_loop().time())
                await ws.send_json({"type": "ack", "messages": [
                    {"partition": doc["partition"], "offset": doc["offset"]}]})

    async def first_arrival(self, client: Client, tag: str, timeout_s: float = 30.0) -> float:
        """Publish ``tag-<n>`` every 0.1 s until one arrives; when the first one did."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        for seq in itertools.count():
            assert loop.time() < deadline, f"nothing delivered within {timeout_s}s ({tag})"
            await client.post(f"/v1/topics/{self.topic}/messages",
                              json={"messages": [{"value": f"{tag}-{seq}"}]})
            if arrived := [at for value, at in self.arrivals.items()
                           if value.startswith(f"{tag}-")]:
                return min(arrived)
            await asyncio.sleep(0.1)
        raise AssertionError("unreachable")
