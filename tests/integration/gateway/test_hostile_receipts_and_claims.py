"""Hostile pull receipts and deeply nested values with auth on, against the real Redis Cluster and
etcd.

- receipts a caller made up (the old unsigned format, offsets past 64 bits, a forged ack timeout),
  receipts of another principal or group, and expired ones: every one a 4xx problem, not one pending
  entry touched in Redis;
- values nested deeper than orjson writes: 4xx naming the message, nothing written.

Each test prints one summary line with the number of cases tried and their outcomes (``-s`` shows
them).
"""

from __future__ import annotations

import base64
import collections
import json
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiohttp.test_utils import TestClient
from auth_config import api_keys, rule, secured_client
from hostile import PARTITIONS, assert_problem, stored_counts

from gateway.delivery.receipts import Receipt, ReceiptSigner
from gateway.settings import GatewaySettings

Client = TestClient[Any, Any]
RECEIPT_SECRET = "hostile-receipts-shared-secret-0123456789"
WRITER_KEY, PEER_KEY = "sgk_hostile-receipts-writer", "sgk_hostile-receipts-peer"
WRITER, PEER = {"X-API-Key": WRITER_KEY}, {"X-API-Key": PEER_KEY}
GROUP = "workers"
CONFIG = (api_keys({"writer": WRITER_KEY, "peer": PEER_KEY})
          + rule(["writer", "peer"], ["it-*"], ["publish", "subscribe", "admin"]))


@pytest.fixture
async def secured(aiohttp_client: Any, gateway_settings: GatewaySettings, tmp_path: Path) -> Client:
    return await secured_client(
        aiohttp_client, gateway_settings, tmp_path, CONFIG, receipt_secret=RECEIPT_SECRET
    )


async def seeded(client: Client, topic: str) -> list[dict[str, Any]]:
    """A topic with messages in every partition and the writer's group holding pulled, unacked
    ones."""
    response = await client.post(
        "/v1/topics", json={"name": topic, "partitions": PARTITIONS}, headers=WRITER
    )
    assert response.status == 201, await response.text()
    body = {"messages": [{"value": i, "partition": i % PARTITIONS} for i in range(12)]}
    response = await client.post(f"/v1/topics/{topic}/messages", json=body, headers=WRITER)
    assert response.status == 200, await response.text()
    response = await client.post(
        f"/v1/groups/{GROUP}/pull", json={"topic": topic, "max_messages": 8}, headers=WRITER
    )
    assert response.status == 200, await response.text()
    messages: list[dict[str, Any]] = (await response.json())["messages"]
    assert len(messages) == 8
    return messages


def pending_in_redis(redis_cluster: Any, topic: str, group: str) -> list[int]:
    """The group's pending entries per partition, read from Redis itself."""
    counts = []
    for partition in range(PARTITIONS):
        key = f"sg:{{{topic}/{partition}}}:log"
        counts.append(
            int(redis_cluster.primary_for_key(key).client().xpending(key, group)["pending"])
        )
    return counts


def b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def forged_receipts(topic: str, message: dict[str, Any], receipt: str) -> dict[str, str]:
    """Receipts a caller could make up for a pending message of its own group."""
    partition, offset = message["partition"], message["offset"]
    payload, _, tag = receipt.partition(".")
    data = orjson.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    data += [int(time.time() * 1000)] * (5 - len(data))
    cases = {
        "unsigned, old format": b64(orjson.dumps([topic, partition, offset, 30_000])),
        "unsigned, 21-digit offset": b64(orjson.dumps([topic, partition, "1" * 21 + "-0", 30_000])),
        "unsigned, 10^400 offset": b64(
            json.dumps([topic, partition, "1" * 401 + "-0", 30_000]).encode()
        ),
        "signed with another key": ReceiptSigner(b"z" * 32).issue(
            Receipt(topic, partition, offset, 30_000, int(time.time() * 1000)), "writer", GROUP
        ),
        "expired (signed with the real key)": ReceiptSigner(RECEIPT_SECRET.encode()).issue(
            Receipt(topic, partition, offset, 100, int(time.time() * 1000) - 3_600_000),
            "writer",
            GROUP,
        ),
    }
    for name, index, value in (
        ("ack timeout forged", 3, 3_600_000),
        ("offset 21 digits", 2, "1" * 21 + "-0"),
        ("offset seq past 64 bits", 2, f"1-{2**64}"),
        ("issued later", 4, data[4] + 10**9),
        ("partition moved", 1, (partition + 1) % PARTITIONS),
        ("partition 10^30", 1, 10**30),
    ):
        forged = list(data)
        forged[index] = value
        cases[f"tampered: {name}"] = b64(json.dumps(forged).encode()) + "." + tag
    return cases


async def test_hostile_receipts_are_4xx_and_touch_nothing(
        secured: Client, topic_name: str, redis_cluster: Any) -> None:
    messages = await seeded(secured, topic_name)
    before = pending_in_redis(redis_cluster, topic_name, GROUP)
    assert sum(before) == 8
    target, receipt = messages[0], messages[0]["receipt"]
    attempts: list[tuple[str, str, dict[str, str], str]] = [
        (name, GROUP, WRITER, forged)
        for name, forged in forged_receipts(topic_name, target, receipt).items()
    ]
    attempts += [("another principal's receipt", GROUP, PEER, receipt),
                 ("the receipt in another group", "workers-2", WRITER, receipt)]
    outcomes: collections.Counter[int] = collections.Counter()
    for name, group, headers, token in attempts:
        for action in ("ack", "nack", "extend"):
            response = await secured.post(
                f"/v1/groups/{group}/{action}", json={"receipts": [token]}, headers=headers
            )
            status = await assert_problem(response, f"{name} {action}")
            assert status in (410, 422), (name, action, status)
            outcomes[status] += 1
    assert outcomes[410] == 3, outcomes
    assert pending_in_redis(redis_cluster, topic_name, GROUP) == before, (
        "a refused receipt settled something"
    )
    response = await secured.post(
        f"/v1/groups/{GROUP}/ack",
        json={"receipts": [m["receipt"] for m in messages]},
        headers=WRITER,
    )
    assert (response.status, await response.json()) == (200, {"acked": 8})
    assert pending_in_redis(redis_cluster, topic_name, GROUP) == [0] * PARTITIONS
    print(
        f"\nhostile receipts with auth on: {len(attempts)} receipts x 3 actions = "
        f"{sum(outcomes.values())} tried -> {dict(sorted(outcomes.items()))}; 0 pending entries "
        "touched, then the 8 real ones acked"
    )


async def test_extend_renews_receipts_and_the_renewed_ones_ack(
        secured: Client, topic_name: str, redis_cluster: Any) -> None:
    messages = await seeded(secured, topic_name)
    response = await secured.post(
        f"/v1/groups/{GROUP}/extend", json={"receipts": [messages[0]["receipt"]]}, headers=WRITER
    )
    assert response.status == 200, await response.text()
    renewed = (await response.json())["receipts"]
    response = await secured.post(
        f"/v1/groups/{GROUP}/ack", json={"receipts": renewed}, headers=PEER
    )
    assert response.status == 422, "a renewed receipt is still bound to its principal"
    response = await secured.post(
        f"/v1/groups/{GROUP}/ack", json={"receipts": renewed}, headers=WRITER
    )
    assert (response.status, await response.json()) == (200, {"acked": 1})
    assert sum(pending_in_redis(redis_cluster, topic_name, GROUP)) == 7


async def test_too_deeply_nested_values_are_4xx(
        secured: Client, topic_name: str, redis_cluster: Any) -> None:
    response = await secured.post("/v1/topics", json={"name": topic_name, "partitions": PARTITIONS},
                                  headers=WRITER)
    assert response.status == 201, await response.text()
    before = stored_counts(redis_cluster, topic_name)
    outcomes: collections.Counter[int] = collections.Counter()
    tried = 0
    for depth in (255, 256, 400, 1000, 1023, 1024, 5000):
        for value in ("[" * depth + "]" * depth, '{"a":' * depth + "1" + "}" * depth):
            for acks in ("0", "1", "all"):
                body = f'{{"acks": "{acks}", "messages": [{{"value": 1}}, {{"value": {value}}}]}}'
                response = await secured.post(
                    f"/v1/topics/{topic_name}/messages",
                    data=body,
                    headers={**WRITER, "Content-Type": "application/json"},
                )
                outcomes[await assert_problem(response, f"depth {depth} acks {acks}")] += 1
                tried += 1
    assert stored_counts(redis_cluster, topic_name) == before, "a refused publish wrote something"
    print(
        f"\ndeeply nested values with auth on: {tried} tried -> "
        f"{dict(sorted(outcomes.items()))}; 0 written"
    )
