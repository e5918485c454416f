"""Failed deliveries on the real cluster: with a group's retry backoff, nacks without a delay and
ack timeouts come back later each time, within the jitter's bounds, a delay still wins, pulls back
off the same way; a rejected message goes to the dead letters at once, with its reason."""

from __future__ import annotations

import asyncio
import itertools
import time
import uuid
from typing import Any

from aiohttp.test_utils import TestClient

from partitioner.group_policy import RetryBackoff
from streamgate_client import Consumer

Client = TestClient[Any, Any]
BACKOFF = RetryBackoff(400, 2.0, 60_000)
# a reclaim looks at most every initial/4 ms, plus scheduling on a busy machine
SLACK_S = 0.6


async def one_message_topic(gateway: Client) -> tuple[str, str]:
    topic = f"backoff-{uuid.uuid4().hex[:8]}"
    assert (await gateway.post("/v1/topics", json={"name": topic, "partitions": 1})).status == 201
    published = await gateway.post(f"/v1/topics/{topic}/messages",
                                   json={"acks": "all", "messages": [{"value": "flaky"}]})
    return topic, (await published.json())["results"][0]["offset"]


async def test_nacks_without_a_delay_come_back_later_each_time(gateway: Client) -> None:
    topic, offset = await one_message_topic(gateway)
    ws = await gateway.ws_connect("/v1/subscribe", params={
        "topic": topic, "group": "workers", "retry_backoff_ms": str(BACKOFF.initial_ms),
        "retry_backoff_multiplier": "2"})
    arrivals: list[tuple[float, int]] = []
    while len(arrivals) < 4:
        frame = await ws.receive_json(timeout=10)
        if frame["type"] != "message":
            continue
        arrivals.append((time.monotonic(), frame["delivery_count"]))
        if len(arrivals) < 4:
            await ws.send_json({"type": "nack", "messages": [{"partition": 0, "offset": offset}]})
    await ws.close()
    assert [count for _, count in arrivals] == [1, 2, 3, 4]
    for (before, count), (after, _) in itertools.pairwise(arrivals):
        wait_s = BACKOFF.delay_ms(count, offset) / 1000
        assert wait_s - 0.05 <= after - before <= wait_s + SLACK_S, (count, after - before)


async def test_nack_delay_wins_over_the_backoff(gateway: Client) -> None:
    topic, offset = await one_message_topic(gateway)
    params = {"topic": topic, "group": "slow", "retry_backoff_ms": "2000", "ack_timeout_ms": "300"}
    ws = await gateway.ws_connect("/v1/subscribe", params=params)

    async def next_message() -> tuple[float, int]:
        while True:
            frame = await ws.receive_json(timeout=15)
            if frame["type"] == "message":
                return time.monotonic(), frame["delivery_count"]

    first, _ = await next_message()
    await ws.send_json({"type": "nack", "messages": [{"partition": 0, "offset": offset}],
                        "delay_ms": 200})
    second, count = await next_message()
    assert count == 2
    assert 0.15 <= second - first <= 0.2 + SLACK_S  # the delay, not the 1-2 s backoff
    # not acked: the ack timeout, then the backoff of a second failure (2-4 s)
    third, count = await next_message()
    await ws.close()
    assert count == 3
    wait_s = 0.3 + RetryBackoff(2000).delay_ms(2, offset) / 1000
    assert wait_s - 0.05 <= third - second <= wait_s + SLACK_S


async def test_pulled_nack_waits_out_the_backoff(gateway: Client) -> None:
    topic, _ = await one_message_topic(gateway)
    body = {"topic": topic, "retry_backoff_ms": 1500}
    pulled = (await (await gateway.post("/v1/groups/pullers/pull", json=body)).json())["messages"]
    nacked = await gateway.post("/v1/groups/pullers/nack",
                                json={"receipts": [pulled[0]["receipt"]]})
    assert nacked.status == 200
    started = time.monotonic()
    assert (await (await gateway.post("/v1/groups/pullers/pull",
                                      json=body)).json())["messages"] == []
    while True:
        again = (await (await gateway.post("/v1/groups/pullers/pull", json={
            **body, "wait_ms": 500})).json())["messages"]
        if again:
            break
        assert time.monotonic() - started < 5
    assert again[0]["delivery_count"] == 2
    assert time.monotonic() - started >= 0.7  # at least half the backoff


async def dead_letters(gateway: Client, topic: str) -> list[dict[str, Any]]:
    replay = await gateway.get(f"/v1/topics/{topic}.dlq/partitions/0/messages",
                               params={"from": "earliest"})
    assert replay.status == 200, await replay.text()
    return list((await replay.json())["messages"])


async def test_rejected_message_is_dead_lettered_at_once(gateway: Client) -> None:
    topic, offset = await one_message_topic(gateway)
    base = str(gateway.make_url("/")).rstrip("/")
    async with Consumer(base, topic, group="strict", max_deliveries=10) as consumer:
        async for message in consumer:
            await message.reject("schema v1 is not supported")
            break
        [dead] = await until_dead_lettered(gateway, topic)
    assert dead["value"] == "flaky"
    assert {k: dead["headers"][k] for k in ("sg-dlq-reason", "sg-dlq-offset",
                                            "sg-dlq-delivery-count", "sg-dlq-group")} == {
        "sg-dlq-reason": "schema v1 is not supported", "sg-dlq-offset": offset,
        "sg-dlq-delivery-count": "1", "sg-dlq-group": "strict"}
    described = await (await gateway.get("/v1/groups/strict", params={"topic": topic})).json()
    assert [p["pending"] for p in described["topics"][0]["partitions"]] == [0]


async def test_pulled_reject_is_dead_lettered_and_acked(gateway: Client) -> None:
    topic, _ = await one_message_topic(gateway)
    pulled = (await (await gateway.post("/v1/groups/pullers/pull",
                                        json={"topic": topic})).json())["messages"]
    bad = await gateway.post("/v1/groups/pullers/reject",
                             json={"receipts": [pulled[0]["receipt"]], "reason": "a\nb"})
    assert (bad.status, (await bad.json())["pointer"]) == (422, "/reason")
    rejected = await gateway.post("/v1/groups/pullers/reject",
                                  json={"receipts": [pulled[0]["receipt"]]})
    assert await rejected.json() == {"rejected": 1}
    [dead] = await until_dead_lettered(gateway, topic)
    assert dead["headers"]["sg-dlq-reason"] == "rejected by the consumer"
    again = await gateway.post("/v1/groups/pullers/pull", json={"topic": topic, "wait_ms": 300})
    assert (await again.json())["messages"] == []


async def until_dead_lettered(gateway: Client, topic: str) -> list[dict[str, Any]]:
    deadline = time.monotonic() + 10
    while not (found := await dead_letters_if_any(gateway, topic)):
        assert time.monotonic() < deadline, "nothing dead-lettered"
        await asyncio.sleep(0.05)
    return found


async def dead_letters_if_any(gateway: Client, topic: str) -> list[dict[str, Any]]:
    if (await gateway.get(f"/v1/topics/{topic}.dlq")).status == 404:
        return []
    return await dead_letters(gateway, topic)
