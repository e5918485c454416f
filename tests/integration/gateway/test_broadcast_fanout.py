"""Broadcast fan-out on the real cluster: one shared tail per partition, coalesced writes, a slow
socket alone."""

from __future__ import annotations

import asyncio
import dataclasses
from collections import defaultdict
from typing import Any

from aiohttp.test_utils import TestClient
from subscribers import Subscriber, read_frames, subscribe, upgrade, wait_until

from gateway.app import create_app
from gateway.delivery.tail import BroadcastTails, PartitionTail, TailFollower
from gateway.services import SERVICES
from gateway.settings import GatewaySettings
from storage.codec import offset_key

Client = TestClient[Any, Any]


async def create(client: Client, name: str, partitions: int) -> None:
    response = await client.post("/v1/topics", json={"name": name, "partitions": partitions})
    assert response.status == 201, await response.text()


async def publish(client: Client, topic: str, values: list[Any]) -> None:
    for start in range(0, len(values), 500):
        batch = [
            {"key": f"k{v}" if isinstance(v, int) else None, "value": v}
            for v in values[start : start + 500]
        ]
        response = await client.post(f"/v1/topics/{topic}/messages", json={"messages": batch})
        assert response.status == 200, await response.text()


def in_partition_order(subscriber: Subscriber) -> bool:
    by_partition: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for message in subscriber.messages:
        by_partition[message.partition].append(offset_key(message.offset))
    return all(offsets == sorted(set(offsets)) for offsets in by_partition.values())


async def test_broadcast_sessions_share_one_tail_per_partition(
        gateway: Client, topic_name: str, monkeypatch: Any) -> None:
    await create(gateway, topic_name, 2)
    services = gateway.server.app[SERVICES]
    started: list[PartitionTail] = []
    real_start = BroadcastTails.start

    def counting_start(self: BroadcastTails, follower: TailFollower) -> PartitionTail:
        started.append(tail := real_start(self, follower))
        return tail

    monkeypatch.setattr(BroadcastTails, "start", counting_start)
    subscribers = [
        await subscribe(gateway, f"s{i}", auto=False, topic=topic_name, max_in_flight=2000)
        for i in range(12)
    ]
    await wait_until(lambda: all(s.partitions == [0, 1] for s in subscribers), what="assignments")
    tails = services.delivery.tails
    await wait_until(
        lambda: all(tails.get(topic_name, p) is not None for p in (0, 1)), what="both tails"
    )
    reads = {p: tails.get(topic_name, p).reads for p in (0, 1)}
    values = list(range(600))
    await publish(gateway, topic_name, values)
    await wait_until(
        lambda: all(len(s.messages) >= len(values) for s in subscribers), what="every delivery"
    )
    await asyncio.sleep(0.2)
    for subscriber in subscribers:
        assert sorted(m.value for m in subscriber.messages) == values, (
            f"{subscriber.name}: gap or duplicate"
        )
        assert in_partition_order(subscriber), f"{subscriber.name}: out of order within a partition"
    assert {(t.topic, t.partition) for t in started} == {(topic_name, 0), (topic_name, 1)}
    assert len(started) == 2, "one tail per partition for all twelve sessions"
    # Twelve sessions, yet each partition was read by one blocking reader: far fewer
    # reads than deliveries.
    tail_reads = sum(tails.get(topic_name, p).reads - reads[p] for p in (0, 1))
    assert tail_reads < len(values) * len(subscribers) / 10
    for subscriber in subscribers:
        await subscriber.close()


async def test_late_subscriber_catches_up_then_joins_the_tail(
        gateway: Client, topic_name: str) -> None:
    await create(gateway, topic_name, 1)
    early = await subscribe(gateway, "early", auto=False, topic=topic_name, max_in_flight=2000)
    await wait_until(lambda: early.partitions == [0], what="assignment")
    await publish(gateway, topic_name, list(range(300)))
    late = await subscribe(
        gateway, "late", auto=False, topic=topic_name, max_in_flight=50, **{"from": "earliest"}
    )
    await publish(gateway, topic_name, list(range(300, 900)))
    await wait_until(
        lambda: len(early.messages) >= 900 and len(late.messages) >= 900, what="both have all"
    )
    await asyncio.sleep(0.2)
    for subscriber in (early, late):
        assert [m.value for m in subscriber.messages] == list(range(900)), (
            f"{subscriber.name}: gap, dup or order"
        )
    await early.close()
    await late.close()


async def test_slow_broadcast_socket_is_closed_4008(
        aiohttp_client: Any, gateway_settings: GatewaySettings, topic_name: str) -> None:
    settings = dataclasses.replace(gateway_settings, slow_client_timeout_s=1.0)
    client: Client = await aiohttp_client(create_app(settings))
    await create(client, topic_name, 1)
    fast = await subscribe(client, "fast", auto=False, topic=topic_name, max_in_flight=200)
    slow = await asyncio.to_thread(upgrade, client.host, client.port,
                                   f"/v1/subscribe?topic={topic_name}&max_in_flight=50")
    try:
        await wait_until(lambda: fast.partitions == [0], what="assignment")
        await asyncio.sleep(0.3)  # the slow socket has its assignment too
        values = [{"n": n, "pad": "v" * 100_000} for n in range(120)]
        await publish(client, topic_name, values)
        await wait_until(
            lambda: len(fast.messages) >= len(values), what="the fast subscriber's messages"
        )
        await asyncio.sleep(2.5)  # still never read: past the 1 s slow-client timeout
        frames, code, reason = await asyncio.to_thread(read_frames, slow)
    finally:
        slow.close()
    assert [m.value["n"] for m in fast.messages] == list(range(120))
    assert fast.close_code is None, "the fast subscriber stays open"
    assert code == 4008
    assert reason.startswith("slow consumer")
    got = [f["value"]["n"] for f in frames if f["type"] == "message"]
    assert got == list(range(len(got))), "the slow socket got a prefix in order"
    assert len(got) < 120, "then the close, before the end"
    await fast.close()


def catch_up_tasks() -> list[asyncio.Task[Any]]:
    """Tasks that serve a broadcast subscription beyond aiohttp's own: catch-ups and
    per-subscription runners."""
    return [
        t
        for t in asyncio.all_tasks()
        if "BroadcastFollow._catch_up" in t.get_coro().__qualname__
        or t.get_name().startswith("subscription-")
    ]


async def test_idle_broadcast_subscriptions_hold_no_task(gateway: Client, topic_name: str) -> None:
    await create(gateway, topic_name, 3)
    subscribers = [
        await subscribe(gateway, f"idle{i}", auto=False, topic=topic_name, max_in_flight=100)
        for i in range(5)
    ]
    await wait_until(
        lambda: all(s.partitions == [0, 1, 2] for s in subscribers), what="assignments"
    )
    await wait_until(lambda: not catch_up_tasks(), what="every follower joined its tail")
    # more than max_in_flight: followers detach, catch up
    await publish(gateway, topic_name, list(range(250)))
    await wait_until(
        lambda: all(len(s.messages) >= 250 for s in subscribers), what="every delivery"
    )
    for subscriber in subscribers:
        assert sorted(m.value for m in subscriber.messages) == list(range(250)), subscriber.name
    await wait_until(lambda: not catch_up_tasks(), what="idle again")
    for subscriber in subscribers:
        await subscriber.close()


async def test_empty_partition_subscribers_join_the_running_tail(
        gateway: Client, topic_name: str, monkeypatch: Any) -> None:
    await create(gateway, topic_name, 2)
    services = gateway.server.app[SERVICES]
    first = await subscribe(gateway, "first", auto=False, topic=topic_name)
    tails = services.delivery.tails
    await wait_until(
        lambda: all(tails.get(topic_name, p) is not None for p in (0, 1)), what="both tails"
    )
    reads: list[int] = []
    real_read = services.store.read

    async def counting_read(topic: str, partition: int, **kwargs: Any) -> Any:
        reads.append(partition)
        return await real_read(topic, partition, **kwargs)

    monkeypatch.setattr(services.store, "read", counting_read)
    later = [await subscribe(gateway, f"later{i}", auto=False, topic=topic_name) for i in range(5)]
    await wait_until(lambda: all(s.partitions == [0, 1] for s in later), what="assignments")
    await wait_until(lambda: not catch_up_tasks(), what="every follower joined its tail")
    assert reads == [], (
        "an empty partition's running tail is joined at its position: nothing to read first"
    )
    await publish(gateway, topic_name, list(range(40)))
    await wait_until(
        lambda: all(len(s.messages) >= 40 for s in [first, *later]), what="every delivery"
    )
    for subscriber in [first, *later]:
        assert sorted(m.value for m in subscriber.messages) == list(range(40)), subscriber.name
        await subscriber.close()
