"""HTTP pull, receipts, group admin, seek and DLQ redrive on the real cluster and etcd."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import aiohttp
from aiohttp.test_utils import TestClient
from processes import GatewayProcess
from subscribers import subscribe, wait_until

Client = TestClient[Any, Any]


async def create(client: Client, name: str, partitions: int) -> None:
    response = await client.post("/v1/topics", json={"name": name, "partitions": partitions})
    assert response.status == 201, await response.text()


async def publish(
    client: Client, topic: str, messages: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    response = await client.post(f"/v1/topics/{topic}/messages", json={"messages": messages})
    assert response.status == 200, await response.text()
    return list((await response.json())["results"])


async def test_pull_over_two_gateways_delivers_each_message_once(
        gateway_processes: list[GatewayProcess], topic_name: str) -> None:
    urls = [g.url for g in gateway_processes]
    first, second = urls
    async with aiohttp.ClientSession() as http:
        async with http.post(
            f"{first}/v1/topics", json={"name": topic_name, "partitions": 4}
        ) as response:
            assert response.status == 201
        body = {"messages": [{"key": f"k{i}", "value": i} for i in range(400)]}
        async with http.post(f"{second}/v1/topics/{topic_name}/messages", json=body) as response:
            assert response.status == 200
        seen: Counter[int] = Counter()
        served_by: Counter[str] = Counter()
        for turn in range(200):
            url = urls[turn % 2]
            async with http.post(
                f"{url}/v1/groups/workers/pull",
                json={"topic": topic_name, "max_messages": 25, "wait_ms": 200},
            ) as response:
                assert response.status == 200, await response.text()
                messages = (await response.json())["messages"]
            if not messages:
                break
            served_by[url] += len(messages)
            seen.update(m["value"] for m in messages)
            # ack on the *other* gateway: receipts are stateless
            other = urls[(turn + 1) % 2]
            async with http.post(f"{other}/v1/groups/workers/ack",
                                 json={"receipts": [m["receipt"] for m in messages]}) as response:
                assert response.status == 200
                assert (await response.json())["acked"] == len(messages)
        assert set(seen) == set(range(400))
        assert max(seen.values()) == 1, "a message acked in time was delivered twice"
        assert len(served_by) == 2
        async with http.get(f"{first}/v1/groups/workers", params={"topic": topic_name}) as response:
            state = (await response.json())["topics"][0]["partitions"]
        assert sum(p["pending"] for p in state) == 0
        assert all(p["lag"] == 0 for p in state)


async def test_pull_redelivery_nack_delay_and_extend(gateway: Client, topic_name: str) -> None:
    await create(gateway, topic_name, 1)
    await publish(gateway, topic_name, [{"value": "job"}])

    async def pull_once(wait_ms: int = 0) -> list[dict[str, Any]]:
        response = await gateway.post(
            "/v1/groups/g/pull",
            json={"topic": topic_name, "ack_timeout_ms": 400, "wait_ms": wait_ms},
        )
        assert response.status == 200, await response.text()
        return list((await response.json())["messages"])

    [first] = await pull_once()
    assert first["delivery_count"] == 1
    assert await pull_once() == []
    [again] = await pull_once(wait_ms=2000)
    assert again["offset"] == first["offset"]
    assert again["delivery_count"] == 2
    extended = await gateway.post("/v1/groups/g/extend", json={"receipts": [again["receipt"]]})
    body = await extended.json()
    assert body["extended"] == 1
    assert len(body["receipts"]) == 1  # renewed: valid for the new ack timeout
    await asyncio.sleep(0.25)
    extended = await gateway.post("/v1/groups/g/extend", json={"receipts": [again["receipt"]]})
    await asyncio.sleep(0.25)
    assert await pull_once() == [], "an extended message must not be redelivered yet"
    nacked = await gateway.post(
        "/v1/groups/g/nack", json={"receipts": [again["receipt"]], "delay_ms": 0}
    )
    assert (await nacked.json()) == {"nacked": 1}
    [third] = await pull_once(wait_ms=1000)
    assert third["delivery_count"] == 3


async def test_bad_receipts_and_pull_bodies_are_422(gateway: Client, topic_name: str) -> None:
    await create(gateway, topic_name, 1)
    cases = [("/v1/groups/g/ack", {"receipts": ["not-a-receipt"]}, "/receipts/0"),
             ("/v1/groups/g/ack", {"receipts": []}, "/receipts"),
             ("/v1/groups/g/pull", {"topic": topic_name, "max_messages": 0}, "/max_messages"),
             ("/v1/groups/g/pull", {"topic": topic_name, "wait_ms": 999_999}, "/wait_ms"),
             ("/v1/groups/g/pull", {}, "/topic"),
             ("/v1/groups/bad%20name/pull", {"topic": topic_name}, "/group")]
    for path, body, pointer in cases:
        response = await gateway.post(path, json=body)
        assert response.status == 422, (path, body)
        assert (await response.json())["pointer"] == pointer
    missing = await gateway.post("/v1/groups/g/pull", json={"topic": "no-such-topic"})
    assert missing.status == 404


async def test_group_describe_shows_members_lag_and_pending(
    gateway: Client, topic_name: str
) -> None:
    await create(gateway, topic_name, 2)
    member = await subscribe(
        gateway, "m", auto=False, topic=topic_name, group="billing", max_in_flight=3
    )
    await wait_until(lambda: member.partitions == [0, 1], what="assignment")
    await publish(gateway, topic_name, [{"value": i, "partition": 0} for i in range(10)])
    await wait_until(lambda: len(member.messages) == 3, what="three in flight")
    await asyncio.sleep(0.3)
    body = await (await gateway.get("/v1/groups/billing", params={"topic": topic_name})).json()
    [topic] = body["topics"]
    assert [m["member_id"] for m in topic["members"]] == [
        member_id for member_id in topic["assignment"]
    ]
    assert topic["generation"] >= 1
    p0 = topic["partitions"][0]
    assert p0["pending"] == 3
    assert p0["lag"] == 7
    assert p0["oldest_pending_age_ms"] is not None
    assert p0["oldest_unread_age_ms"] >= 0
    assert topic["partitions"][1]["oldest_unread_age_ms"] == 0
    listed = await (await gateway.get("/v1/groups")).json()
    assert {"topic": topic_name, "group": "billing"} in listed["groups"]
    assert (await gateway.get("/v1/groups/nobody")).status == 404
    await member.close()


async def test_seek_to_earliest_replays_and_latest_skips(gateway: Client, topic_name: str) -> None:
    await create(gateway, topic_name, 1)
    await publish(gateway, topic_name, [{"value": i} for i in range(5)])

    async def drain() -> list[Any]:
        response = await gateway.post(
            "/v1/groups/g/pull", json={"topic": topic_name, "max_messages": 100}
        )
        messages = (await response.json())["messages"]
        if messages:
            await gateway.post(
                "/v1/groups/g/ack", json={"receipts": [m["receipt"] for m in messages]}
            )
        return [m["value"] for m in messages]

    assert await drain() == [0, 1, 2, 3, 4]
    seek = await gateway.post("/v1/groups/g/seek", json={"topic": topic_name, "to": "earliest"})
    assert seek.status == 200
    assert await drain() == [0, 1, 2, 3, 4]
    results = await publish(gateway, topic_name, [{"value": 5}, {"value": 6}])
    seek = await gateway.post(
        "/v1/groups/g/seek", json={"topic": topic_name, "to": f"0:{results[0]['offset']}"}
    )
    assert seek.status == 200
    assert await drain() == [6]
    await gateway.post("/v1/groups/g/seek", json={"topic": topic_name, "to": {"timestamp_ms": 0}})
    assert await drain() == [0, 1, 2, 3, 4, 5, 6]
    await publish(gateway, topic_name, [{"value": 7}])
    await gateway.post("/v1/groups/g/seek", json={"topic": topic_name, "to": "latest"})
    assert await drain() == []
    bad = await gateway.post("/v1/groups/g/seek", json={"topic": topic_name, "to": "yesterday"})
    assert bad.status == 422
    # a field seek does not honour is refused, never silently dropped
    bad = await gateway.post("/v1/groups/g/seek",
                             json={"topic": topic_name, "to": "earliest", "partitions": [0]})
    assert (bad.status, (await bad.json())["pointer"]) == (422, "/partitions")


async def test_dead_letters_can_be_redriven_to_the_source_topic(
    gateway: Client, topic_name: str
) -> None:
    await create(gateway, topic_name, 2)
    await publish(gateway, topic_name, [{"value": "poison", "key": "k", "headers": {"tag": "t"}}])

    async def pull(wait_ms: int) -> list[dict[str, Any]]:
        response = await gateway.post(
            "/v1/groups/g/pull",
            json={
                "topic": topic_name,
                "ack_timeout_ms": 200,
                "max_deliveries": 2,
                "wait_ms": wait_ms,
            },
        )
        return list((await response.json())["messages"])

    delivered = []
    for _ in range(20):
        delivered += await pull(500)
        if len(delivered) >= 2 and not await pull(600):
            break
    assert [m["delivery_count"] for m in delivered] == [1, 2]
    dlq = await (await gateway.get(f"/v1/topics/{topic_name}.dlq")).json()
    assert sum(p["length"] for p in dlq["partition_details"]) == 1
    redriven = await gateway.post(f"/v1/topics/{topic_name}/dlq/redrive", json={"rate_per_s": 100})
    assert (await redriven.json()) == {"redriven": 1}
    assert await dead_letters(gateway, topic_name) == []
    again = await gateway.post(f"/v1/topics/{topic_name}/dlq/redrive")
    assert (await again.json()) == {"redriven": 0}
    [back] = await pull(1000)
    assert back["value"] == "poison"
    assert back["delivery_count"] == 1
    assert back["partition"] == delivered[0]["partition"]
    assert back["headers"] == {"tag": "t"}


async def dead_letters(gateway: Client, topic: str) -> list[dict[str, Any]]:
    """Every letter waiting in ``<topic>.dlq``, partition by partition (none before it exists)."""
    response = await gateway.get(f"/v1/topics/{topic}.dlq")
    if response.status == 404:
        return []
    described = await response.json()
    letters = []
    for partition in range(described["partitions"]):
        response = await gateway.get(f"/v1/topics/{topic}.dlq/partitions/{partition}/messages")
        letters += (await response.json())["messages"]
    return letters


async def test_dead_letter_redriven_by_offset_leaves_the_dlq(
    gateway: Client, topic_name: str
) -> None:
    await create(gateway, topic_name, 2)
    await publish(gateway, topic_name, [{"value": "first", "key": "a"},
                                        {"value": "second", "key": "b"}])
    pull = {"topic": topic_name, "ack_timeout_ms": 200, "max_deliveries": 1, "wait_ms": 300}
    for _ in range(40):
        await gateway.post("/v1/groups/g/pull", json=pull)
        if len(letters := await dead_letters(gateway, topic_name)) == 2:
            break
    assert sorted(m["value"] for m in letters) == ["first", "second"]
    [chosen] = [m for m in letters if m["value"] == "first"]
    one = {"partition": chosen["partition"], "offset": chosen["offset"]}
    path = f"/v1/topics/{topic_name}/dlq/redrive"

    redriven = await gateway.post(path, json=one)
    assert (redriven.status, await redriven.json()) == (200, {"redriven": 1})
    assert [m["value"] for m in await dead_letters(gateway, topic_name)] == ["second"]
    gone = await gateway.post(path, json=one)
    assert gone.status == 404
    assert (await gone.json())["type"].endswith("/dead-letter-not-found")
    for bad in ({"partition": one["partition"]}, {"offset": one["offset"]},
                {**one, "max_messages": 5}, {"partition": 0, "offset": "yesterday"}):
        refused = await gateway.post(path, json=bad)
        assert refused.status == 422, bad
    assert len(await dead_letters(gateway, topic_name)) == 1

    assert await values_in(gateway, topic_name) == Counter({"first": 2, "second": 1})
    rest = await gateway.post(path)
    assert (await rest.json()) == {"redriven": 1}
    assert await dead_letters(gateway, topic_name) == []
    assert await values_in(gateway, topic_name) == Counter({"first": 2, "second": 2})


async def values_in(gateway: Client, topic: str) -> Counter[str]:
    """How often each value is in the topic (the two partitions of these tests)."""
    found: Counter[str] = Counter()
    for partition in range(2):
        response = await gateway.get(f"/v1/topics/{topic}/partitions/{partition}/messages")
        found.update(m["value"] for m in (await response.json())["messages"])
    return found
