"""A gateway killed around a partition growth holds the topic's publishes only until its death is
known: its node lease expires (``owner_lease_ttl_s``), then the growth finishes without it, or, when
it was the gateway growing the topic, the others abandon the growth and publishes resume; an
exclusive group's member on it is gone one member lease after the death."""

from __future__ import annotations

import asyncio
import os
import signal
import time
import uuid
from collections.abc import AsyncIterator

import aiohttp
import pytest
from archive_gateways import GatewayProcesses

from partitioner.group_coordinator import COUNT_CHECK_S
from streamgate_devstack import EtcdProcess, RedisClusterProcess

pytestmark = pytest.mark.integration

LEASE_TTL_S = 2.0
# etcd expires leases on a tick of its own; the rest is a loaded machine's scheduling
MARGIN_S = 1.5
RESUME_DEADLINE_S = 30.0


@pytest.fixture
async def gateways(redis_cluster: RedisClusterProcess,
                   etcd_server: EtcdProcess) -> AsyncIterator[GatewayProcesses]:
    env = {**os.environ, "STREAMGATE_AUTH_MODE": "none",
           "STREAMGATE_REDIS_NODES": ",".join(f"{h}:{p}" for h, p in redis_cluster.startup_nodes),
           "STREAMGATE_ETCD_ENDPOINTS": etcd_server.endpoint,
           "STREAMGATE_ETCD_PREFIX": f"/growdeath-{uuid.uuid4().hex[:8]}/",
           "STREAMGATE_OWNER_LEASE_TTL_S": str(LEASE_TTL_S),
           "STREAMGATE_MEMBER_LEASE_TTL_S": str(LEASE_TTL_S)}
    processes = GatewayProcesses(env, 2)
    try:
        await processes.start()
        yield processes
    finally:
        processes.stop()


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=20)) as session:
        yield session


async def publish_until_accepted(http: aiohttp.ClientSession, url: str, topic: str) -> float:
    """Publish every 50 ms until one is accepted (a 503 carries Retry-After); when it was."""
    deadline = time.monotonic() + RESUME_DEADLINE_S
    body = {"messages": [{"key": "k", "value": "v"}]}
    while time.monotonic() < deadline:
        async with http.post(f"{url}/v1/topics/{topic}/messages", json=body) as response:
            if response.status == 200:
                return time.monotonic()
            assert response.status == 503, await response.text()
            assert int(response.headers["Retry-After"]) >= 1
        await asyncio.sleep(0.05)
    raise AssertionError(f"publishes to {topic} never resumed")


async def topic_doc(http: aiohttp.ClientSession, url: str, topic: str) -> dict[str, object]:
    async with http.get(f"{url}/v1/topics/{topic}") as response:
        assert response.status == 200, await response.text()
        doc: dict[str, object] = await response.json()
        return doc


async def until_abandoned(http: aiohttp.ClientSession, url: str, topic: str) -> float:
    """When ``url``'s gateway shows the topic no longer growing."""
    for _ in range(int(RESUME_DEADLINE_S / 0.02)):
        if (await topic_doc(http, url, topic))["growing_to"] is None:
            return time.monotonic()
        await asyncio.sleep(0.02)
    raise AssertionError(f"{topic} was still growing after {RESUME_DEADLINE_S} s")


async def until_growing(http: aiohttp.ClientSession, url: str, topic: str) -> None:
    for _ in range(int(RESUME_DEADLINE_S / 0.02)):
        if (await topic_doc(http, url, topic))["growing_to"] is not None:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"{topic} never started growing")


async def create_topic(http: aiohttp.ClientSession, url: str) -> str:
    topic = f"grow-{uuid.uuid4().hex[:8]}"
    async with http.post(f"{url}/v1/topics", json={"name": topic, "partitions": 2}) as response:
        assert response.status == 201, await response.text()
    return topic


async def test_a_killed_gateway_holds_a_growth_only_until_its_lease_expires(
        gateways: GatewayProcesses, http: aiohttp.ClientSession) -> None:
    topic = await create_topic(http, gateways.url(0))
    gateways.kill(1)
    died = time.monotonic()
    async with http.patch(f"{gateways.url(0)}/v1/topics/{topic}",
                          json={"partitions": 4}) as response:
        assert response.status == 200, await response.text()
    resumed = await publish_until_accepted(http, gateways.url(0), topic)
    print(f"\n[owner lease {LEASE_TTL_S:.0f}s] a growth waited for a killed gateway; publishes "
          f"resumed {resumed - died:.2f}s after its death")
    assert resumed - died <= LEASE_TTL_S + MARGIN_S
    assert (await topic_doc(http, gateways.url(0), topic))["partitions"] == 4


async def test_a_growth_whose_gateway_was_killed_is_abandoned_once_its_lease_expires(
        gateways: GatewayProcesses, http: aiohttp.ClientSession) -> None:
    topic = await create_topic(http, gateways.url(0))
    # gateway 1 cannot pause while stopped, so gateway 0's growth waits for it
    gateways.processes[1].send_signal(signal.SIGSTOP)
    try:
        growing = asyncio.create_task(http.patch(f"{gateways.url(0)}/v1/topics/{topic}",
                                                 json={"partitions": 4}))
        await until_growing(http, gateways.url(0), topic)
        gateways.kill(0)
        died = time.monotonic()
    finally:
        gateways.processes[1].send_signal(signal.SIGCONT)
    with pytest.raises(aiohttp.ClientError):
        await growing
    # gateway 1, stopped while the growth began, may take a publish by the old count before it
    # sees the growth: harmless (the growth cannot complete without its pause), so what is waited
    # for is the growth abandoned, then a publish taken
    abandoned = await until_abandoned(http, gateways.url(1), topic)
    resumed = await publish_until_accepted(http, gateways.url(1), topic)
    print(f"\n[owner lease {LEASE_TTL_S:.0f}s] the growing gateway was killed; the growth "
          f"abandoned {abandoned - died:.2f}s and publishes taken {resumed - died:.2f}s after its "
          "death")
    assert abandoned - died <= LEASE_TTL_S + MARGIN_S
    assert (await topic_doc(http, gateways.url(1), topic))["partitions"] == 2


async def assigned(ws: aiohttp.ClientWebSocketResponse, wanted: set[int] | None = None) -> float:
    """Read frames until an assignment of ``wanted`` (any non-empty one if None); when it came."""
    async with asyncio.timeout(RESUME_DEADLINE_S):
        async for frame in ws:
            doc = frame.json()
            partitions = set(doc.get("partitions", ())) if doc["type"] == "assignment" else set()
            if partitions and wanted in (None, partitions):
                return time.monotonic()
    raise AssertionError(f"the subscription closed with {ws.close_code} before {wanted}")


async def test_a_group_is_served_whole_once_a_killed_gateways_member_lease_expires(
        gateways: GatewayProcesses, http: aiohttp.ClientSession) -> None:
    topic = await create_topic(http, gateways.url(0))
    params = {"topic": topic, "group": "g", "mode": "exclusive"}
    # the member on gateway 1 joins first, so it coordinates the group when that gateway dies
    async with http.ws_connect(f"{gateways.url(1)}/v1/subscribe", params=params) as doomed:
        await assigned(doomed, {0, 1})
        async with http.ws_connect(f"{gateways.url(0)}/v1/subscribe", params=params) as member:
            await assigned(member)
            gateways.kill(1)
            died = time.monotonic()
            async with http.patch(f"{gateways.url(0)}/v1/topics/{topic}",
                                  json={"partitions": 4}) as response:
                assert response.status == 200, await response.text()
            took_s = await assigned(member, {0, 1, 2, 3}) - died
    print(f"\n[member and owner leases {LEASE_TTL_S:.0f}s] the live member served every "
          f"partition of the grown topic {took_s:.2f}s after the other gateway's death")
    # the dead gateway's leases (its member's, its node's), then the coordinator's next look at
    # the partition count
    assert took_s <= LEASE_TTL_S + COUNT_CHECK_S + MARGIN_S
