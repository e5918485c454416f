"""Per-message time to live and purges on the real cluster: an expired message reaches no group,
pull or broadcast subscriber and is counted, logged and acked; a purge empties a partition, a topic
or a dead-letter topic at one cut, audited, and every group's position follows it."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from typing import Any

import pytest
from aiohttp.test_utils import TestClient
from group_readings import group_partitions, metric
from subscribers import subscribe, wait_until

Client = TestClient[Any, Any]
TTL_MS = 300


async def new_topic(gateway: Client, partitions: int = 1) -> str:
    topic = f"ttl-{uuid.uuid4().hex[:8]}"
    created = await gateway.post("/v1/topics", json={"name": topic, "partitions": partitions})
    assert created.status == 201, await created.text()
    return topic


async def publish(gateway: Client, topic: str, messages: list[dict[str, Any]]) -> list[str]:
    response = await gateway.post(f"/v1/topics/{topic}/messages",
                                  json={"acks": "all", "messages": messages})
    assert response.status == 200, await response.text()
    return [r["offset"] for r in (await response.json())["results"]]


async def lengths(gateway: Client, topic: str) -> list[int]:
    described = await (await gateway.get(f"/v1/topics/{topic}")).json()
    return [p["length"] for p in described["partition_details"]]


async def test_expired_messages_are_acked_not_delivered(
        gateway: Client, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="gateway.delivery.expiry")
    topic = await new_topic(gateway)
    short = [{"value": f"stale-{i}", "ttl_ms": TTL_MS} for i in range(3)]
    lasting = [{"value": f"fresh-{i}", "ttl_ms": 600_000} for i in range(2)]
    plain = [{"value": "plain"}]
    published_ms = int(time.time() * 1000)
    await publish(gateway, topic, [short[0], lasting[0], short[1], *plain, short[2], lasting[1]])
    await asyncio.sleep(TTL_MS / 1000 + 0.2)
    live = ["fresh-0", "plain", "fresh-1"]

    group = await subscribe(gateway, "group", topic=topic, group="workers", mode="exclusive")
    fans = await subscribe(gateway, "fan", topic=topic, mode="broadcast", **{"from": "earliest"})
    await wait_until(lambda: len(group.messages) >= 3 and len(fans.messages) >= 3,
                     what="the live messages")
    pulled = await (await gateway.post("/v1/groups/pullers/pull", json={
        "topic": topic, "max_messages": 10, "wait_ms": 500})).json()
    await asyncio.sleep(0.3)  # anything expired that slipped through would have arrived by now
    await group.close()
    await fans.close()

    assert [m.value for m in group.messages] == live
    assert [m.value for m in fans.messages] == live
    assert [m["value"] for m in pulled["messages"]] == live
    expires = int(group.messages[0].headers["sg-expires-at"])
    assert published_ms + 600_000 <= expires <= int(time.time() * 1000) + 600_000
    assert "sg-expires-at" not in group.messages[1].headers
    for state in await group_partitions(gateway, "workers", topic):
        assert (state["pending"], state["lag"]) == (0, 0)  # the expired ones were acked too
    metrics = await (await gateway.get("/metrics")).text()
    for mode in ("exclusive", "pull", "broadcast"):
        assert metric(metrics, "streamgate_delivery_expired_total", f'mode="{mode}"') == 3, mode
    logged = [r.getMessage() for r in caplog.records if "expired messages" in r.getMessage()]
    assert sum(int(line.split()[0]) for line in logged) == 9, logged


async def test_malformed_ttl_is_refused_and_writes_nothing(gateway: Client) -> None:
    topic = await new_topic(gateway)
    bad = [{"value": 1, "ttl_ms": 0}, {"value": 1, "ttl_ms": "5s"}, {"value": 1, "ttl_ms": True},
           {"value": 1, "ttl_ms": 10, "headers": {"sg-expires-at": "1"}},
           {"value": 1, "headers": {"sg-expires-at": "soon"}}]
    for message in bad:
        response = await gateway.post(f"/v1/topics/{topic}/messages",
                                      json={"messages": [{"value": "ok"}, message]})
        assert response.status == 422, (message, await response.text())
        assert (await response.json())["pointer"].startswith("/messages/1/"), message
    assert await lengths(gateway, topic) == [0]


async def test_purge_cuts_a_partition_for_every_group(
        gateway: Client, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="streamgate.audit")
    topic = await new_topic(gateway, partitions=2)
    offsets = await publish(gateway, topic, [{"value": i, "partition": i % 2} for i in range(20)])
    scheduled = await gateway.post(f"/v1/topics/{topic}/messages", json={
        "messages": [{"value": "later", "partition": 0, "delay_ms": 60_000}]})
    assert scheduled.status == 200
    # a group with entries delivered but not acked, and a live member of another group
    pulled = await (await gateway.post("/v1/groups/slow/pull", json={
        "topic": topic, "max_messages": 6})).json()
    assert len(pulled["messages"]) == 6
    member = await subscribe(gateway, "member", topic=topic, group="live", mode="exclusive")
    await wait_until(lambda: len(member.messages) == 20, what="the live group's first reads")

    purged = await gateway.post(f"/v1/topics/{topic}/purge", json={"partition": 0})
    assert purged.status == 200, await purged.text()
    report = await purged.json()
    assert report == {"topic": topic, "purged": 10, "scheduled": 1, "partitions": [
        {"partition": 0, "purged": 10, "scheduled": 1, "cut": offsets[-2]}]}
    assert await lengths(gateway, topic) == [0, 10]
    for group in ("slow", "live"):
        zero = (await group_partitions(gateway, group, topic))[0]
        assert (zero["pending"], zero["lag"], zero["last_delivered_offset"]) == (
            0, 0, offsets[-2]), group

    after = await publish(gateway, topic, [{"value": "after", "partition": 0}])
    await wait_until(lambda: len(member.messages) == 21, what="the message after the purge")
    await member.close()
    assert member.messages[-1].offset == after[0]
    again = await (await gateway.post("/v1/groups/slow/pull", json={
        "topic": topic, "max_messages": 100})).json()
    assert sorted(str(m["value"]) for m in again["messages"] if m["partition"] == 0) == ["after"]
    metrics = await (await gateway.get("/metrics")).text()
    assert metric(metrics, "streamgate_purged_entries_total", f'topic="{topic}"') == 11
    assert metric(metrics, "streamgate_purges_total", f'topic="{topic}"') == 1
    [audit] = [r.getMessage() for r in caplog.records if r.name == "streamgate.audit"]
    assert f"purge of {topic} partitions 0 by anonymous: 10 entries, 1 scheduled" in audit


async def test_topic_and_dead_letters_purged_in_one_call(gateway: Client) -> None:
    topic = await new_topic(gateway, partitions=3)
    await publish(gateway, topic, [{"value": i, "key": f"k{i}"} for i in range(30)])
    assert (await gateway.post(f"/v1/topics/{topic}/dlq/purge")).status == 404  # no DLQ yet
    pulled = await (await gateway.post("/v1/groups/g/pull", json={
        "topic": topic, "max_messages": 2})).json()
    rejected = await gateway.post("/v1/groups/g/reject", json={
        "receipts": [m["receipt"] for m in pulled["messages"]], "reason": "poison"})
    assert rejected.status == 200
    assert sum(await lengths(gateway, f"{topic}.dlq")) == 2

    whole = await (await gateway.post(f"/v1/topics/{topic}/purge")).json()
    assert (whole["purged"], len(whole["partitions"])) == (30, 3)
    assert await lengths(gateway, topic) == [0, 0, 0]
    letters = await (await gateway.post(f"/v1/topics/{topic}/dlq/purge", json={})).json()
    assert (letters["topic"], letters["purged"]) == (f"{topic}.dlq", 2)
    assert sum(await lengths(gateway, f"{topic}.dlq")) == 0
    beyond = await gateway.post(f"/v1/topics/{topic}/purge", json={"partition": 3})
    assert (beyond.status, (await beyond.json())["pointer"]) == (422, "/partition")
