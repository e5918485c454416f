"""The Python producer publishing over the gateway's WebSocket on the real cluster and etcd: every
message once in key order, problems as HTTP raises them, a gateway restart losing nothing."""

from __future__ import annotations

import asyncio
import os
import subprocess
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from gateway.settings import GatewaySettings
from streamgate_client import Admin, ProblemError, Producer, RetryPolicy, SendResult
from streamgate_devstack.ports import free_port
from tests.integration.gateway.processes import start_gateway, stop_gateways, wait_ready

KEYS = 5


async def stored(admin: Admin, topic: str, partitions: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    for partition in range(partitions):
        messages += await admin.replay_all(topic, partition)
    return messages


def assert_once_in_key_order(messages: list[dict[str, Any]], count: int) -> None:
    """Every ``n`` below ``count`` written once, each key's in the order they were sent."""
    assert sorted(m["value"]["n"] for m in messages) == list(range(count))
    for key in {m["key"] for m in messages}:
        ns = [m["value"]["n"] for m in messages if m["key"] == key]
        assert ns == sorted(ns), key


def keyed(n: int) -> dict[str, Any]:
    return {"key": f"k{n % KEYS}", "value": {"n": n}}


async def test_send_and_wait_one_at_a_time_lands_each_message_once_in_key_order(
    base_url: str, topic_name: str,
) -> None:
    async with Admin(base_url) as admin, Producer(base_url, topic_name, acks="all",
                                                 transport="websocket") as producer:
        await admin.create_topic(topic_name, 3)
        results = [await producer.send_and_wait(**keyed(n)) for n in range(200)]
        assert producer._socket is not None
        assert producer._socket.connections == 1
        messages = await stored(admin, topic_name, 3)
    assert_once_in_key_order(messages, 200)
    assert {(r.partition, r.offset) for r in results} == {
        (m["partition"], m["offset"]) for m in messages}


async def test_many_sends_in_flight_land_each_message_once_in_key_order(
    base_url: str, topic_name: str,
) -> None:
    async with Admin(base_url) as admin, Producer(base_url, topic_name, batch_size=50,
                                                 transport="websocket") as producer:
        await admin.create_topic(topic_name, 3)
        futures = [await producer.send(**keyed(n)) for n in range(5000)]
        many = await producer.send_many([keyed(n) for n in range(5000, 6000)])
        await producer.flush()
        assert producer._socket is not None
        assert producer._socket.connections == 1
        messages = await stored(admin, topic_name, 3)
    assert_once_in_key_order(messages, 6000)
    assert not any(r.duplicate for r in [*(f.result() for f in futures), *many])


async def test_publishing_to_an_unknown_topic_raises_the_problem_http_would(
    base_url: str, topic_name: str,
) -> None:
    async with Producer(base_url, topic_name, transport="websocket") as producer:
        with pytest.raises(ProblemError) as raised:
            await producer.send_and_wait({"n": 1})
    assert (raised.value.status, raised.value.retriable) == (404, False)


@dataclass
class RestartableGateway:
    """One `streamgate serve` child on a free port, which a test may stop and start again."""

    env: dict[str, str]
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> None:
        self.process = start_gateway(self.port, self.env)
        await asyncio.to_thread(wait_ready, self.url, self.process)

    async def restart(self, *, kill: bool) -> None:
        """SIGKILL (frames in flight are lost with the connection) or SIGTERM (the gateway
        closes its sockets with 1001), then the same port again."""
        if kill and self.process is not None:
            self.process.kill()
        await asyncio.to_thread(self.stop)
        await self.start()

    def stop(self) -> None:
        if self.process is not None:
            stop_gateways([self.process])


@pytest.fixture
async def gateway_process(gateway_settings: GatewaySettings
                          ) -> AsyncIterator[RestartableGateway]:
    gateway = RestartableGateway({
        **os.environ,
        "STREAMGATE_REDIS_NODES": ",".join(gateway_settings.redis_nodes),
        "STREAMGATE_ETCD_ENDPOINTS": ",".join(gateway_settings.etcd_endpoints),
        "STREAMGATE_ETCD_PREFIX": gateway_settings.etcd_prefix,
        "STREAMGATE_MIN_INSYNC_REPLICAS": "1",
        "STREAMGATE_MEMBER_LEASE_TTL_S": "2",
        "STREAMGATE_OWNER_LEASE_TTL_S": "2",
        "STREAMGATE_AUTH_MODE": "none"})
    try:
        await gateway.start()
        yield gateway
    finally:
        gateway.stop()


@pytest.mark.parametrize("kill", [False, True], ids=["terminated", "killed"])
async def test_a_gateway_restart_mid_stream_loses_nothing_and_writes_nothing_twice(
    gateway_process: RestartableGateway, topic_name: str, kill: bool,
) -> None:
    url = gateway_process.url
    patient = RetryPolicy(max_retries=100, base_s=0.05, max_s=0.5)
    results: list[SendResult] = []
    under_way = asyncio.Event()

    async def publish_key(producer: Producer, key: int) -> None:
        for n in range(key, 600, KEYS):  # one key's messages, each after the last is answered
            results.append(await producer.send_and_wait(**keyed(n)))
            if len(results) == 100:
                under_way.set()

    async with Admin(url) as admin, Producer(url, topic_name, acks="all", retry=patient,
                                            transport="websocket") as producer:
        await admin.create_topic(topic_name, 3)
        publishers = [asyncio.ensure_future(publish_key(producer, k)) for k in range(KEYS)]
        await under_way.wait()
        await gateway_process.restart(kill=kill)
        await asyncio.gather(*publishers)
        assert producer._socket is not None
        assert producer._socket.connections >= 2
        messages = await stored(admin, topic_name, 3)
    assert_once_in_key_order(messages, 600)
    assert {(r.partition, r.offset) for r in results} == {
        (m["partition"], m["offset"]) for m in messages}
