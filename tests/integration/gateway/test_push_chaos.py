"""Push subscriptions under chaos: the endpoint fails, then stalls past the request timeout, and a
gateway owning partitions is killed; every message still reaches the endpoint and each key's
order holds."""

from __future__ import annotations

import asyncio
import signal
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from processes import GatewayProcess
from push_receiver import Receiver
from subscribers import wait_until

KEYS = 20
PER_KEY = 15  # messages per key: 300 in all
STALL_S = 1.6  # past the subscription's timeout_ms


@pytest.fixture
def gateway_extra_env() -> dict[str, str]:
    """The gateway processes may push to loopback over plain HTTP, and post lag often."""
    return {"STREAMGATE_PUSH_ALLOWED_CIDRS": "127.0.0.0/8", "STREAMGATE_PUSH_ALLOW_HTTP": "true",
            "STREAMGATE_LAG_INTERVAL_S": "0.2"}


@dataclass
class ChaosEndpoint(Receiver):
    """An endpoint whose mood the test sets: "fail" answers 500, "stall" answers 503 only after
    the gateway gave up, "ok" answers 204 and records the messages as acked, in answer order."""

    mood: str = "fail"
    answers: dict[str, int] = field(default_factory=dict)
    acks: list[tuple[str, int]] = field(default_factory=list)  # (key, sequence), 2xx answered
    # every message of every request: (when, mood, key, sequence, offset, delivery count)
    log: list[tuple[float, str, str, int, str, int]] = field(default_factory=list)
    partition_of: dict[str, int] = field(default_factory=dict)

    async def _handle(self, request: web.Request) -> web.Response:
        messages = orjson.loads(await request.read())["messages"]
        mood = self.mood
        for m in messages:
            self.partition_of[m["key"]] = m["partition"]
            self.log.append((time.monotonic(), mood, m["key"], m["value"]["seq"], m["offset"],
                             m["delivery_count"]))
        self.answers[mood] = self.answers.get(mood, 0) + 1
        if mood == "fail":
            return web.Response(status=500)
        if mood == "stall":
            await asyncio.sleep(STALL_S)
            return web.Response(status=503)
        # recorded before answering: the gateway sends a key's next message only after this answer
        self.acks += [(m["key"], m["value"]["seq"]) for m in messages]
        return web.Response(status=204)

    def first_acks_by_key(self) -> dict[str, list[int]]:
        """Each key's sequence numbers in the order of their first 2xx answer."""
        seen: set[tuple[str, int]] = set()
        by_key: dict[str, list[int]] = {}
        for key, seq in self.acks:
            if (key, seq) not in seen:
                seen.add((key, seq))
                by_key.setdefault(key, []).append(seq)
        return by_key


async def call(http: aiohttp.ClientSession, method: str, url: str,
               expect: int = 200, **kwargs: Any) -> Any:
    async with http.request(method, url, **kwargs) as response:
        assert response.status == expect, await response.text()
        return await response.json() if response.content_type == "application/json" else None


async def publish_wave(http: aiohttp.ClientSession, url: str, topic: str, wave: range) -> None:
    """Sequence numbers ``wave`` of every key, in order."""
    messages = [{"key": f"k{k}", "value": {"seq": seq}} for seq in wave for k in range(KEYS)]
    await call(http, "POST", f"{url}/v1/topics/{topic}/messages", json={"messages": messages})


async def split_by_owner(http: aiohttp.ClientSession, gateways: list[GatewayProcess],
                         topic: str) -> tuple[GatewayProcess, GatewayProcess, list[int]]:
    """(the gateway to keep, the one to kill: partition 0's owner, the partitions it owns), once
    every partition of ``topic`` has an owner."""
    node_ids = [(await call(http, "GET", f"{g.url}/v1/cluster"))["node_id"] for g in gateways]
    deadline = time.monotonic() + 15
    while True:
        document = await call(http, "GET", f"{gateways[0].url}/v1/cluster")
        [row] = [row for row in document["topics"] if row["name"] == topic]
        owners = {p["partition"]: p["owner"] for p in row["partitions"]}
        if None not in owners.values():
            break
        assert time.monotonic() < deadline, f"partitions without an owner: {owners}"
        await asyncio.sleep(0.1)
    doomed = node_ids.index(owners[0])
    return (gateways[1 - doomed], gateways[doomed],
            [p for p, owner in owners.items() if owner == owners[0]])


async def settled(http: aiohttp.ClientSession, url: str, topic: str, timeout_s: float) -> None:
    """Wait until the push group has nothing pending and nothing unread on any partition."""
    deadline = time.monotonic() + timeout_s
    while True:
        doc = await call(http, "GET", f"{url}/v1/groups/hooks", params={"topic": topic})
        if all(p["pending"] == 0 and p["lag"] == 0 for p in doc["topics"][0]["partitions"]):
            return
        assert time.monotonic() < deadline, f"the push group never settled: {doc}"
        await asyncio.sleep(0.2)


async def chaos_run(gateways: list[GatewayProcess], aiohttp_server: Any,
                    topic: str) -> tuple[ChaosEndpoint, list[int]]:
    """The endpoint fails, then stalls, then heals while the gateway owning partition 0 (and
    maybe others) is killed; returns once every message was acked at least once and the group has
    settled: the endpoint and the killed gateway's partitions."""
    endpoint = ChaosEndpoint()
    server: TestServer = await aiohttp_server(endpoint.app())
    async with aiohttp.ClientSession() as http:
        await call(http, "POST", f"{gateways[0].url}/v1/topics", expect=201,
                   json={"name": topic, "partitions": 4})
        survivor, doomed, doomed_partitions = await split_by_owner(http, gateways, topic)
        await call(http, "PUT", f"{survivor.url}/v1/topics/{topic}/push/hooks", expect=201,
                   json={"endpoint": f"http://127.0.0.1:{server.port}/hook", "start": "earliest",
                         "key_ordered": True, "batch_max_messages": 10, "max_in_flight": 8,
                         "max_deliveries": 100, "timeout_ms": 1000, "ack_timeout_ms": 3000,
                         "retry_backoff_ms": 50, "retry_backoff_max_ms": 300})

        await publish_wave(http, survivor.url, topic, range(0, 5))
        await wait_until(lambda: endpoint.answers.get("fail", 0) >= 6, 20, "failed requests")
        endpoint.mood = "stall"
        await publish_wave(http, survivor.url, topic, range(5, 8))
        await wait_until(lambda: endpoint.answers.get("stall", 0) >= 2, 20, "stalled requests")
        endpoint.mood = "ok"
        await publish_wave(http, survivor.url, topic, range(8, 11))
        await wait_until(lambda: len(endpoint.acks) >= 40, 20, "acks after the endpoint healed")
        doomed.process.send_signal(signal.SIGKILL)
        await asyncio.to_thread(doomed.process.wait)
        endpoint.log.append((time.monotonic(), "killed", "", -1, "", 0))
        await publish_wave(http, survivor.url, topic, range(11, PER_KEY))

        everything = {(f"k{k}", seq) for k in range(KEYS) for seq in range(PER_KEY)}
        try:
            await wait_until(lambda: set(endpoint.acks) >= everything, 40,
                             "every message acked by the endpoint at least once")
        except AssertionError as exc:
            missing = sorted(everything - set(endpoint.acks))
            group = await call(http, "GET", f"{survivor.url}/v1/groups/hooks",
                               params={"topic": topic})
            first_key = missing[0][0]
            requests = [e[1:] for e in endpoint.log if e[2] in (first_key, "")]
            raise AssertionError(f"{exc}: {len(missing)} never acked, {missing[:20]} (killed "
                                 f"owner's partitions {doomed_partitions}); {first_key}'s "
                                 f"requests: {requests}; the group: {group}") from exc
        await settled(http, survivor.url, topic, timeout_s=20)
    assert endpoint.answers["fail"]
    assert endpoint.answers["stall"]
    return endpoint, doomed_partitions


def out_of_order(endpoint: ChaosEndpoint) -> dict[str, Any]:
    """Keys whose first acks broke their order, with their requests."""
    return {key: [e[1:] for e in endpoint.log if e[2] in (key, "")]
            for key, sequence in endpoint.first_acks_by_key().items()
            if sequence != sorted(sequence)}


async def test_every_message_is_acked_in_each_keys_order_through_failures_and_a_killed_owner(
        gateway_processes: list[GatewayProcess], aiohttp_server: Any, topic_name: str) -> None:
    endpoint, doomed_partitions = await chaos_run(gateway_processes, aiohttp_server, topic_name)
    assert doomed_partitions
    assert out_of_order(endpoint) == {}
