"""A topic grows twice under keyed load through two gateways, the second time while a Redis primary
is killed: no consumer (broadcast, shared, an exclusive group of two, HTTP pull, and a broadcast and
a group that start after the growths) ever sees a key's message before an older one, and every
acknowledged message reaches each of them."""

from __future__ import annotations

import asyncio
import dataclasses
import time
import uuid
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from failure_cluster import WRITE_DEADLINE_S, Client, create, log_key
from failure_traffic import HANG_MARGIN_S

from gateway.app import create_app
from gateway.settings import GatewaySettings
from streamgate_devstack import EtcdProcess, RedisClusterProcess

KEYS_PER_PRODUCER = 6
PRODUCERS = 4
DELIVERY_TIMEOUT_S = 45.0
# deliveries a killed primary lost come again after this; a grown partition waits for them
ACK_TIMEOUT_MS = "2000"
GROW_RETRY_S = 40.0


@dataclass
class KeyedProducers:
    """Producers that send one message per key per request, the next only once the last was
    acknowledged, alternating between gateways; a 503 is retried with the same idempotency keys."""

    gateways: list[Client]
    topic: str
    acked: set[str] = field(default_factory=set)
    statuses: Counter[int] = field(default_factory=Counter)
    bad_503s: list[str] = field(default_factory=list)
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._produce(f"p{i}")) for i in range(PRODUCERS)]

    async def finish(self) -> None:
        self.stop.set()
        await asyncio.gather(*self._tasks)

    async def _produce(self, name: str) -> None:
        seq, turn = 0, 0
        while not self.stop.is_set():
            values = [f"{name}.{k}/{seq}" for k in range(KEYS_PER_PRODUCER)]
            turn += 1
            if await self._post(self.gateways[turn % len(self.gateways)], values):
                seq += 1
            else:
                await asyncio.sleep(0.05)

    async def _post(self, gateway: Client, values: list[str]) -> bool:
        body = {"acks": "all", "messages": [
            {"key": value.split("/")[0], "value": value, "idempotency_key": value}
            for value in values]}
        try:
            async with asyncio.timeout(WRITE_DEADLINE_S + HANG_MARGIN_S):
                response = await gateway.post(f"/v1/topics/{self.topic}/messages", json=body)
                await response.read()
        except (TimeoutError, aiohttp.ClientError):
            self.statuses[-1] += 1
            return False
        self.statuses[response.status] += 1
        if response.status == 503 and not (
                response.content_type == "application/problem+json"
                and int(response.headers.get("Retry-After", "0")) >= 1):
            self.bad_503s.append(await response.text())
        if response.status != 200:
            return False
        self.acked.update(values)
        return True


@dataclass
class KeyOrder:
    """First deliveries per key in arrival order, as one consumer (a session, or a group's members
    together) sees them."""

    first_seen: dict[str, list[int]] = field(default_factory=lambda: defaultdict(list))
    partitions_of_key: dict[str, set[int]] = field(default_factory=lambda: defaultdict(set))
    seen: set[str] = field(default_factory=set)
    violations: list[str] = field(default_factory=list)

    def note(self, value: str, partition: int) -> None:
        if value in self.seen:
            return  # a redelivery: at least once, not a new message
        self.seen.add(value)
        key, _, seq = value.partition("/")
        self.partitions_of_key[key].add(partition)
        older = self.first_seen[key]
        if older and int(seq) < older[-1]:
            self.violations.append(f"{value} first seen after {key}/{older[-1]} "
                                   f"(partition {partition})")
        older.append(int(seq))


@dataclass
class OrderedConsumer:
    """A subscription that notes every message in its ``order``, acks group messages as they come,
    and resumes after a close (a broadcast one from its cursor)."""

    gateway: Client
    params: dict[str, str]
    order: KeyOrder
    cursor: dict[int, str] = field(default_factory=dict)
    closes: list[int | None] = field(default_factory=list)
    _stopping: bool = False
    _ws: aiohttp.ClientWebSocketResponse | None = None
    _task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        while not self._stopping:
            params = dict(self.params)
            if self.cursor and "group" not in params:
                params["from"] = ",".join(f"{p}:{o}" for p, o in sorted(self.cursor.items()))
            try:
                self._ws = await self.gateway.ws_connect("/v1/subscribe", params=params)
                await self._session(self._ws)
                self.closes.append(self._ws.close_code)
            except (aiohttp.ClientError, OSError):
                self.closes.append(None)
            if not self._stopping:
                await asyncio.sleep(0.5)

    async def _session(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        async for frame in ws:
            if frame.type is not aiohttp.WSMsgType.TEXT:
                return
            doc = frame.json()
            if doc["type"] != "message":
                continue
            self._note(doc)
            if "group" in self.params:
                await ws.send_json({"type": "ack", "messages": [
                    {"partition": doc["partition"], "offset": doc["offset"]}]})

    def _note(self, doc: dict[str, Any]) -> None:
        self.cursor[doc["partition"]] = doc["offset"]
        self.order.note(doc["value"], doc["partition"])

    async def close(self) -> None:
        self._stopping = True
        if self._ws is not None:
            await self._ws.close()
        if self._task is not None:
            await asyncio.wait({self._task}, timeout=10)
            self._task.cancel()


@dataclass
class Puller:
    """An HTTP pull consumer of one group through both gateways, acking each page it noted."""

    gateways: list[Client]
    topic: str
    order: KeyOrder
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    _task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        turn = 0
        while not self.stop.is_set():
            turn += 1
            gateway = self.gateways[turn % len(self.gateways)]
            try:
                await self._page(gateway)
            except (aiohttp.ClientError, TimeoutError):
                await asyncio.sleep(0.2)

    async def _page(self, gateway: Client) -> None:
        async with asyncio.timeout(WRITE_DEADLINE_S + HANG_MARGIN_S):
            response = await gateway.post("/v1/groups/pullers/pull", json={
                "topic": self.topic, "max_messages": 200, "wait_ms": 200,
                "ack_timeout_ms": int(ACK_TIMEOUT_MS)})
            if response.status != 200:
                await asyncio.sleep(0.2)
                return
            messages = (await response.json())["messages"]
            for message in messages:
                self.order.note(message["value"], message["partition"])
            if messages:
                await gateway.post("/v1/groups/pullers/ack",
                                   json={"receipts": [m["receipt"] for m in messages]})

    async def close(self) -> None:
        self.stop.set()
        if self._task is not None:
            await asyncio.wait({self._task}, timeout=10)
            self._task.cancel()


async def grow(gateway: Client, topic: str, partitions: int) -> float:
    """PATCH until it answers 200 (a 503 while a primary fails over is retried); its duration."""
    started = time.monotonic()
    while True:
        response = await gateway.patch(f"/v1/topics/{topic}", json={"partitions": partitions})
        if response.status == 200:
            assert (await response.json())["partitions"] == partitions
            return time.monotonic() - started
        assert response.status == 503, await response.text()
        assert time.monotonic() - started < GROW_RETRY_S, await response.text()
        await asyncio.sleep(0.5)


async def until_delivered(orders: dict[str, KeyOrder], acked: set[str]) -> None:
    deadline = time.monotonic() + DELIVERY_TIMEOUT_S
    while time.monotonic() < deadline:
        if all(acked <= order.seen for order in orders.values()):
            return
        await asyncio.sleep(0.1)
    missing = {name: len(acked - order.seen) for name, order in orders.items()}
    raise AssertionError(f"acknowledged messages never delivered: {missing}")


async def test_growth_and_primary_kill_under_load_keep_key_order(
        cluster_3x2: RedisClusterProcess, aiohttp_client: Any, etcd_server: EtcdProcess) -> None:
    settings = GatewaySettings(
        auth_mode="none",
        redis_nodes=tuple(f"{host}:{port}" for host, port in cluster_3x2.startup_nodes),
        etcd_endpoints=(etcd_server.endpoint,),
        etcd_prefix=f"/streamgate-growth-{uuid.uuid4().hex[:8]}/",
        min_insync_replicas=1, wait_timeout_ms=500, redis_write_deadline_s=WRITE_DEADLINE_S,
        redis_read_deadline_s=WRITE_DEADLINE_S, member_lease_ttl_s=5.0, owner_lease_ttl_s=5.0)
    gateways: list[Client] = [
        await aiohttp_client(create_app(dataclasses.replace(settings, node_id=f"grow-{i}")))
        for i in range(2)]
    topic = f"grow-{uuid.uuid4().hex[:10]}"
    await create(gateways[0], topic, 2)
    orders = {name: KeyOrder() for name in ("broadcast", "shared", "exclusive", "pull",
                                            "late broadcast", "late shared")}
    consumers = [
        OrderedConsumer(gateways[0], {"topic": topic, "mode": "broadcast", "from": "earliest"},
                        orders["broadcast"]),
        OrderedConsumer(gateways[1], {"topic": topic, "group": "readers", "mode": "shared",
                                         "ack_timeout_ms": ACK_TIMEOUT_MS},
                        orders["shared"]),
        *(OrderedConsumer(gateways[i], {"topic": topic, "group": "owners", "mode": "exclusive",
                                           "ack_timeout_ms": ACK_TIMEOUT_MS},
                          orders["exclusive"]) for i in range(2)),
    ]
    for consumer in consumers:
        consumer.start()
    puller = Puller(gateways, topic, orders["pull"])
    puller.start()
    producers = KeyedProducers(gateways, topic)
    producers.start()
    try:
        await asyncio.sleep(1.0)
        doubled_s = await grow(gateways[0], topic, 4)
        await asyncio.sleep(1.0)
        victim = cluster_3x2.primary_for_key(log_key(topic, 1))
        await asyncio.to_thread(victim.kill)
        uneven_s = await grow(gateways[1], topic, 6)
        # consumers that start after the growths read every partition from its start at once
        late = [OrderedConsumer(gateways[0], {"topic": topic, "mode": "broadcast",
                                              "from": "earliest", "max_in_flight": "50"},
                                orders["late broadcast"]),
                OrderedConsumer(gateways[1], {"topic": topic, "group": "late", "mode": "shared",
                                              "max_in_flight": "50",
                                              "ack_timeout_ms": ACK_TIMEOUT_MS},
                                orders["late shared"])]
        for consumer in late:
            consumer.start()
        consumers += late
        await asyncio.sleep(1.5)
    finally:
        await producers.finish()
    waited = time.monotonic()
    try:
        await until_delivered(orders, producers.acked)
    finally:
        await puller.close()
        for consumer in consumers:
            await consumer.close()
    moved = [key for key, parts in orders["broadcast"].partitions_of_key.items()
             if len(parts) > 1]
    print(f"\n[growth] 2->4 took {doubled_s:.2f}s, 4->6 (primary killed) {uneven_s:.2f}s; "
          f"requests {dict(producers.statuses)}; acked {len(producers.acked)}; keys that moved "
          f"{len(moved)}/{len(orders['broadcast'].partitions_of_key)}; closes "
          f"{[c.closes for c in consumers]}; all delivered {time.monotonic() - waited:.1f}s "
          "after the load")
    assert len(moved) >= KEYS_PER_PRODUCER, "the growths must move keys to new partitions"
    assert producers.bad_503s == []
    assert set(producers.statuses) <= {200, 503}
    assert {name: (len(order.violations), order.violations[:2])
            for name, order in orders.items() if order.violations} == {}
