"""key_shared groups on the real cluster: more members than partitions share the keys, a key is
never in two members' hands at once nor out of order, a poison key parks alone (visible in the
metrics and the group's description; an admin releases or dead-letters it), a member that joins
gets keys, and two gateways split the partitions and hand them over in order."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import defaultdict
from typing import Any

import aiohttp
from aiohttp.test_utils import TestClient
from group_readings import metric
from processes import GatewayProcess

from storage.codec import offset_key

Client = TestClient[Any, Any]
POISON = "poison"


class Member:
    """A key_shared member that acks each message once handled, nacks the poison key's, and
    records every key it held at once with another member (a violation)."""

    def __init__(self, name: str, ws: aiohttp.ClientWebSocketResponse,
                 in_hand: dict[str, str], seen: dict[str, list[tuple[int, str]]]) -> None:
        self.name, self.ws, self.in_hand, self.seen = name, ws, in_hand, seen
        self.received: list[dict[str, Any]] = []
        self.violations: list[str] = []
        self.task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        async for frame in self.ws:
            if frame.type is not aiohttp.WSMsgType.TEXT:
                break
            doc = frame.json()
            if doc["type"] != "message":
                continue
            key, ref = doc["key"], {"partition": doc["partition"], "offset": doc["offset"]}
            if key in self.in_hand:
                self.violations.append(f"{key} at {self.name} while at {self.in_hand[key]}")
            self.in_hand[key] = self.name
            self.received.append(doc)
            self.seen[key].append((doc["partition"], doc["offset"]))
            await asyncio.sleep(0.001)  # handling takes a moment
            del self.in_hand[key]
            kind = "nack" if key == POISON else "ack"
            try:
                await self.ws.send_json({"type": kind, "messages": [ref]})
            except aiohttp.ClientConnectionResetError:
                return  # closed while handling: the message comes again, to another member

    async def close(self) -> None:
        await self.ws.close()
        await asyncio.wait_for(self.task, 10)
        for key in [k for k, holder in self.in_hand.items() if holder == self.name]:
            del self.in_hand[key]  # what it held comes again, to another member


async def join(gateway: Client, topic: str, name: str, in_hand: dict[str, str],
               seen: dict[str, list[tuple[int, str]]]) -> Member:
    ws = await gateway.ws_connect("/v1/subscribe", params={
        "topic": topic, "group": "workers", "mode": "key_shared", "max_deliveries": "3",
        "retry_backoff_ms": "150", "max_in_flight": "50"})
    return Member(name, ws, in_hand, seen)


async def test_members_share_keys_in_order_and_poison_key_parks(gateway: Client) -> None:
    topic = f"keyed-{uuid.uuid4().hex[:8]}"
    assert (await gateway.post("/v1/topics", json={"name": topic, "partitions": 2})).status == 201
    in_hand: dict[str, str] = {}
    seen: dict[str, list[tuple[int, str]]] = defaultdict(list)
    members = [await join(gateway, topic, f"m{i}", in_hand, seen) for i in range(4)]
    keys = [f"k{i}" for i in range(40)]
    published: dict[str, list[str]] = defaultdict(list)
    for round_ in range(10):
        messages: list[dict[str, Any]] = [{"key": key, "value": round_} for key in keys]
        if round_ < 4:
            messages.append({"key": POISON, "value": round_})
        response = await gateway.post(f"/v1/topics/{topic}/messages",
                                      json={"acks": "all", "messages": messages})
        for message, result in zip(messages, (await response.json())["results"], strict=True):
            published[message["key"]].append(result["offset"])

    parked_seen = 0.0
    deadline = time.monotonic() + 60
    while sum(len(seen[key]) for key in keys) < 400 or len(seen[POISON]) < 12:
        assert time.monotonic() < deadline, (len(seen[POISON]), sum(len(seen[k]) for k in keys))
        text = await (await gateway.get("/metrics")).text()
        parked_seen = max(parked_seen, metric(text, "streamgate_group_parked_keys",
                                              f'topic="{topic}"'))
        await asyncio.sleep(0.05)
    started = time.monotonic()
    late = await join(gateway, topic, "late", in_hand, seen)
    fresh = [f"new{i}" for i in range(40)]
    await gateway.post(f"/v1/topics/{topic}/messages",
                       json={"messages": [{"key": key, "value": 0} for key in fresh]})
    while not late.received:
        assert time.monotonic() - started < 10, "the member that joined got no key"
        await asyncio.sleep(0.02)
    joined_s = time.monotonic() - started
    print(f"\n[key_shared] a joining member's first message after {joined_s:.2f}s")
    await asyncio.sleep(0.3)
    for member in [*members, late]:
        await member.close()

    assert [v for member in members for v in member.violations] == []
    for key in keys:  # every message once, in offset order
        assert [offset for _, offset in seen[key]] == published[key], key
    # each poison message three times (then dead-lettered), each one's deliveries before the next
    assert [offset for _, offset in seen[POISON]] == [o for o in published[POISON]
                                                       for _ in range(3)]
    assert all(member.received for member in members), "more members than partitions all got keys"
    assert parked_seen >= 1
    deadline = time.monotonic() + 10  # each poison message, after its third delivery
    while sum(await dead_letters(gateway, topic)) < 4:
        assert time.monotonic() < deadline, await dead_letters(gateway, topic)
        await asyncio.sleep(0.1)
    assert sum(await dead_letters(gateway, topic)) == 4


async def dead_letters(gateway: Client, topic: str) -> list[int]:
    """The length of each partition of the topic's dead letters (none before the first)."""
    response = await gateway.get(f"/v1/topics/{topic}.dlq")
    if response.status == 404:
        return []
    return [p["length"] for p in (await response.json())["partition_details"]]


async def parked_keys(gateway: Client, topic: str) -> list[dict[str, Any]]:
    """The group's parked keys (none while the member's join has not yet given it state)."""
    response = await gateway.get("/v1/groups/workers", params={"topic": topic})
    if response.status == 404:
        return []
    described = await response.json()
    return [k for p in described["topics"][0]["partitions"] for k in p.get("parked_keys", [])]


async def until(check: Any, what: str, timeout_s: float = 15) -> Any:
    deadline = time.monotonic() + timeout_s
    while not (found := await check()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.1)
    return found


async def test_admin_releases_or_dead_letters_a_parked_key(gateway: Client) -> None:
    topic = f"parked-{uuid.uuid4().hex[:8]}"
    assert (await gateway.post("/v1/topics", json={"name": topic, "partitions": 1})).status == 201
    in_hand: dict[str, str] = {}
    seen: dict[str, list[tuple[int, str]]] = defaultdict(list)
    ws = await gateway.ws_connect("/v1/subscribe", params={
        "topic": topic, "group": "workers", "mode": "key_shared", "max_deliveries": "10",
        "retry_backoff_ms": "60000"})  # a parked key would wait a minute on its own
    member = Member("m", ws, in_hand, seen)
    response = await gateway.post(f"/v1/topics/{topic}/messages", json={"acks": "all", "messages": [
        {"key": POISON, "value": 1}, {"key": POISON, "value": 2}, {"key": "fine", "value": 3}]})
    first, second, _ = [r["offset"] for r in (await response.json())["results"]]

    async def parked_at(offset: str) -> bool:
        return [(k["key"], k["offset"]) for k in await parked_keys(gateway, topic)] == [
            (POISON, offset)]

    await until(lambda: parked_at(first), "the poison key parked")
    assert (len(seen["fine"]), seen[POISON]) == (1, [(0, first)])  # other keys went on
    base = {"topic": topic, "partition": 0, "key": POISON}
    released = await gateway.post("/v1/groups/workers/parked", json={**base, "action": "release"})
    assert released.status == 200, await released.text()

    async def delivered_again() -> bool:
        return len(seen[POISON]) == 2

    await until(delivered_again, "the released message again, long before its backoff")
    assert seen[POISON] == [(0, first), (0, first)]  # and still nothing of the key's next one
    dead = await gateway.post("/v1/groups/workers/parked", json={
        **base, "action": "dead_letter", "reason": "bad cart"})
    assert (await dead.json())["offset"] == first

    async def moved_on() -> bool:
        return seen[POISON][-1] == (0, second)

    await until(moved_on, "the key's next message once the first went to the dead letters")
    await until(lambda: parked_at(second), "the next message parked in turn")
    missing = await gateway.post("/v1/groups/workers/parked", json={**base, "key": "fine",
                                                                    "action": "release"})
    assert missing.status == 404
    await member.close()
    letters = await (await gateway.get(f"/v1/topics/{topic}.dlq/partitions/0/messages")).json()
    assert [(m["value"], m["headers"]["sg-dlq-reason"]) for m in letters["messages"]] == [
        (1, "bad cart")]


async def test_leaving_gateway_hands_partitions_over_in_order(
        gateway_processes: list[GatewayProcess]) -> None:
    a, b = (g.url for g in gateway_processes)
    topic = f"seats-{uuid.uuid4().hex[:8]}"
    in_hand: dict[str, str] = {}
    seen: dict[str, list[tuple[int, str]]] = defaultdict(list)
    published: dict[str, list[str]] = defaultdict(list)
    params = {"topic": topic, "group": "workers", "mode": "key_shared"}
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{a}/v1/topics", json={"name": topic, "partitions": 2}) as created:
            assert created.status == 201
        members = {f"{side}{i}": Member(f"{side}{i}", await http.ws_connect(
            f"{url}/v1/subscribe", params=params), in_hand, seen)
            for side, url in (("a", a), ("b", b)) for i in range(2)}
        everyone = list(members.values())

        async def publish(rounds: int) -> None:
            for n in range(rounds):
                messages = [{"key": f"k{i}", "value": n} for i in range(30)]
                async with http.post(f"{b}/v1/topics/{topic}/messages",
                                     json={"acks": "all", "messages": messages}) as response:
                    results = (await response.json())["results"]
                for message, result in zip(messages, results, strict=True):
                    published[message["key"]].append(result["offset"])
                await asyncio.sleep(0.05)

        await publish(20)
        assert any(members[m].received for m in ("a0", "a1")), "gateway a's seat got no partition"
        assert any(members[m].received for m in ("b0", "b1")), "gateway b's seat got no partition"
        for name in ("a0", "a1"):  # gateway a has no member left: its seat leaves the group
            await members.pop(name).close()
        await publish(20)

        async def all_seen() -> bool:
            return all({o for _, o in seen[k]} >= set(offsets) for k, offsets in published.items())

        await until(all_seen, "every message through gateway b", timeout_s=30)
        for member in members.values():
            await member.close()
    assert [v for member in everyone for v in member.violations] == []
    for key, offsets in published.items():  # redelivered after the move at most, never reordered
        delivered = [offset for _, offset in seen[key]]
        assert delivered == sorted(delivered, key=offset_key), key
        assert sorted(set(delivered), key=offset_key) == offsets, key
