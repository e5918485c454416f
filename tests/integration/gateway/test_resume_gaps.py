"""Honest resumes: a broadcast cursor or a group position that retention has passed gets a ``gap``
frame naming the lost range before delivery goes on, never a silent jump; the Python client
surfaces it."""

from __future__ import annotations

import uuid
from typing import Any

import aiohttp
from aiohttp.test_utils import TestClient

from streamgate_client import Consumer, Gap
from streamgate_devstack import RedisClusterProcess

Client = TestClient[Any, Any]


async def published_offsets(gateway: Client, topic: str, count: int) -> list[str]:
    created = await gateway.post("/v1/topics", json={"name": topic, "partitions": 1})
    assert created.status == 201
    response = await gateway.post(f"/v1/topics/{topic}/messages", json={
        "acks": "all", "messages": [{"value": n} for n in range(count)]})
    assert response.status == 200
    return [r["offset"] for r in (await response.json())["results"]]


def trim_before(redis_cluster: RedisClusterProcess, topic: str, offset: str) -> None:
    """Retention as the owner applies it, exactly: every entry before ``offset`` goes."""
    key = f"sg:{{{topic}/0}}:log"
    with redis_cluster.primary_for_key(key).client() as conn:
        conn.execute_command("XTRIM", key, "MINID", offset)


async def frames_until_value(ws: aiohttp.ClientWebSocketResponse,
                             value: int) -> list[dict[str, Any]]:
    frames: list[dict[str, Any]] = []
    while True:
        frame = await ws.receive_json(timeout=10)
        frames.append(frame)
        if frame["type"] == "message" and frame["value"] == value:
            return frames


async def test_broadcast_resumed_past_retention_gets_the_gap(
        gateway: Client, redis_cluster: RedisClusterProcess) -> None:
    topic = f"gap-{uuid.uuid4().hex[:8]}"
    offsets = await published_offsets(gateway, topic, 10)
    trim_before(redis_cluster, topic, offsets[6])
    ws = await gateway.ws_connect("/v1/subscribe", params={"topic": topic,
                                                           "from": f"0:{offsets[2]}"})
    frames = await frames_until_value(ws, 9)
    await ws.close()
    assert [f["type"] for f in frames] == ["assignment", "gap", *["message"] * 4]
    ms, seq = offsets[2].split("-")
    assert frames[1] == {"type": "gap", "partition": 0, "first_lost": f"{ms}-{int(seq) + 1}",
                         "first_kept": offsets[6], "count": None}
    assert [f["value"] for f in frames[2:]] == [6, 7, 8, 9]

    # a cursor at or past the first entry kept has lost nothing
    ws = await gateway.ws_connect("/v1/subscribe", params={"topic": topic,
                                                           "from": f"0:{offsets[7]}"})
    assert [f["type"] for f in await frames_until_value(ws, 9)] == ["assignment", "message",
                                                                    "message"]
    await ws.close()


async def test_group_resumed_past_retention_gets_the_gap(
        gateway: Client, redis_cluster: RedisClusterProcess) -> None:
    topic = f"gap-{uuid.uuid4().hex[:8]}"
    offsets = await published_offsets(gateway, topic, 10)
    pulled = await (await gateway.post("/v1/groups/billing/pull",
                                       json={"topic": topic, "max_messages": 3})).json()
    acked = await gateway.post("/v1/groups/billing/ack",
                               json={"receipts": [m["receipt"] for m in pulled["messages"]]})
    assert acked.status == 200
    trim_before(redis_cluster, topic, offsets[5])
    seen: list[Gap] = []
    base = str(gateway.make_url("/")).rstrip("/")
    async with Consumer(base, topic, group="billing", on_gap=seen.append) as consumer:
        values = []
        async for message in consumer:
            values.append(message.value)
            await message.ack()
            if message.value == 9:
                break
    ms, seq = offsets[2].split("-")
    assert seen == [Gap(0, f"{ms}-{int(seq) + 1}", offsets[5], 2)]  # offsets 3 and 4
    assert consumer.gaps == seen
    assert values == [5, 6, 7, 8, 9]

    # moved by a seek, a group's read counter is not kept: the range, without a count
    await gateway.post("/v1/groups/billing/seek", json={"topic": topic, "to": f"0:{offsets[1]}"})
    trim_before(redis_cluster, topic, offsets[7])
    async with Consumer(base, topic, group="billing") as again:
        async for message in again:
            await message.ack()
            if message.value == 9:
                break
    ms, seq = offsets[1].split("-")
    assert again.gaps == [Gap(0, f"{ms}-{int(seq) + 1}", offsets[7], None)]
