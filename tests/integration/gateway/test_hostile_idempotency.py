"""Idempotency keys with auth on: no principal can observe or suppress another's writes, and no
principal can pre-claim the keys of the gateway's own writes (dead letters, redrive) or publish a
dead letter by a wide rule.

Each test prints one summary line with the number of cases tried and their outcomes (``-s`` shows
them).
"""

from __future__ import annotations

import asyncio
import collections
import time
import uuid
from pathlib import Path
from typing import Any

import jwt
import pytest
from aiohttp.test_utils import TestClient
from auth_config import JWT_SECRET_ENV, api_keys, hs256_jwt, rule, secured_client, tenant_filters

from gateway.settings import GatewaySettings

Client = TestClient[Any, Any]
SECRET = "i" * 40
KEYS = {
    "writer": "sgk_idem-writer-key",
    "other": "sgk_idem-other-key",
    "forger": "sgk_idem-forger-key",
}
CONFIG = (hs256_jwt() + api_keys(KEYS)
          + rule(["writer", "other"], ["it-*"], ["publish", "subscribe", "admin"])
          + rule(["forger"], ["it-*", "it-*.dlq"], ["publish"])
          + rule(["claim:tenant=a", "claim:tenant=b"], ["it-*"], ["publish", "subscribe"])
          + tenant_filters("a", "b"))
PARTITIONS = 3


def credentials(who: str) -> dict[str, str]:
    """Request headers proving ``who``: an API key, or a fresh JWT for ``tenant-a`` /
    ``tenant-b``."""
    if who.startswith("tenant-"):
        tenant = who.removeprefix("tenant-")
        claims = {
            "sub": f"app-{tenant}",
            "tenant": tenant,
            "aud": "streamgate",
            "exp": int(time.time() + 300),
        }
        return {"Authorization": f"Bearer {jwt.encode(claims, SECRET, algorithm='HS256')}"}
    return {"X-API-Key": KEYS[who]}


@pytest.fixture
async def secured(aiohttp_client: Any, gateway_settings: GatewaySettings, tmp_path: Path) -> Client:
    return await secured_client(
        aiohttp_client, gateway_settings, tmp_path, CONFIG, {JWT_SECRET_ENV: SECRET}
    )


async def post(client: Client, who: str, path: str, body: dict[str, Any],
               headers: dict[str, str] | None = None) -> tuple[int, Any]:
    response = await client.post(path, json=body, headers={**credentials(who), **(headers or {})})
    return response.status, await response.json()


async def publish_one(client: Client, who: str, topic: str, message: dict[str, Any],
                      headers: dict[str, str] | None = None) -> dict[str, Any]:
    status, doc = await post(
        client, who, f"/v1/topics/{topic}/messages", {"messages": [message]}, headers
    )
    assert status == 200, doc
    result: dict[str, Any] = doc["results"][0]
    return result


# How a key reaches storage: a body field, the Idempotency-Key header (message i gets "<header>:i"),
# on a keyed or a keyless message (placed by the idempotency key's hash), now or delayed.
MODES: dict[str, tuple[dict[str, Any], str | None]] = {
    "body key, keyed message": ({"key": "customer-1", "idempotency_key": "order-17"}, None),
    "body key, keyless message": ({"idempotency_key": "order-17"}, None),
    "header key": ({}, "order-17"),
    "delayed message": ({"idempotency_key": "order-17", "delay_ms": 300}, None),
}
PAIRS = [
    ("tenant-b", "tenant-a"),
    ("tenant-a", "tenant-b"),
    ("other", "writer"),
    ("writer", "other"),
]


def claim_of(mode: str) -> dict[str, Any]:
    """What the first principal publishes to claim the key the second one will use."""
    fields, header = MODES[mode]
    return {"value": "claim", **({"idempotency_key": f"{header}:0"} if header else fields)}


async def test_same_key_from_two_principals_writes_both(secured: Client, topic_name: str) -> None:
    outcomes: collections.Counter[str] = collections.Counter()
    written: list[tuple[str, dict[str, Any], str]] = []
    for first, second in PAIRS:
        for mode, (fields, header) in MODES.items():
            topic = f"{topic_name}-{len(written)}"
            status, doc = await post(
                secured, "writer", "/v1/topics", {"name": topic, "partitions": PARTITIONS}
            )
            assert status == 201, doc
            claimed = await publish_one(secured, first, topic, claim_of(mode))
            idem = {"Idempotency-Key": header} if header else None
            own = {"value": f"{second}'s", **fields}
            result = await publish_one(secured, second, topic, own, idem)
            assert result["duplicate"] is False, (
                f"{first} suppressed {second}'s write ({mode}): {result}"
            )
            retried = await publish_one(secured, second, topic, own, idem)
            assert retried["duplicate"] is True, f"{second}'s own retry was written twice ({mode})"
            assert (retried["offset"], retried.get("scheduled_id")) == (
                result["offset"],
                result.get("scheduled_id"),
            )
            # two messages: not one position (offsets of two partitions may be equal)
            position = (result["partition"], result["offset"])
            assert claimed.get("offset") is None or (
                (claimed["partition"], claimed["offset"]) != position)
            outcomes["written apart"] += 1
            written.append((second, result, topic))
    for who, result, topic in written:
        # a delayed message is readable once due and promoted by the partition's owner
        for _ in range(100):
            if await readable_by(secured, who, topic, result, f"{who}'s"):
                break
            await asyncio.sleep(0.1)
        else:
            pytest.fail(f"{who} cannot read its message {result}")
        outcomes["read back by their writer"] += 1
    print(f"idempotency across principals: {len(written)} cases, {dict(outcomes)}")
    assert outcomes["written apart"] == len(PAIRS) * len(MODES)


async def readable_by(
    client: Client, who: str, topic: str, result: dict[str, Any], value: str
) -> bool:
    """Whether ``who`` finds ``value`` in the partition its publish result names (a delayed one once
    due)."""
    response = await client.get(f"/v1/topics/{topic}/partitions/{result['partition']}/messages",
                                params={"limit": "100"}, headers=credentials(who))
    assert response.status == 200, await response.text()
    messages = (await response.json())["messages"]
    return any(m["value"] == value and (result["offset"] is None or m["offset"] == result["offset"])
               for m in messages)


async def exhaust(client: Client, topic: str, group: str) -> dict[str, Any]:
    """Pull the topic's one message until the group gives up on it; the last delivery."""
    delivered: list[dict[str, Any]] = []
    for _ in range(40):
        status, doc = await post(
            client,
            "writer",
            f"/v1/groups/{group}/pull",
            {"topic": topic, "ack_timeout_ms": 200, "max_deliveries": 2, "wait_ms": 500},
        )
        assert status == 200, doc
        delivered += doc["messages"]
        if len(delivered) >= 2 and not doc["messages"]:
            break
    assert [m["delivery_count"] for m in delivered] == [1, 2]
    return delivered[-1]


async def dead_letters(client: Client, topic: str) -> list[dict[str, Any]]:
    found = []
    for partition in range(PARTITIONS):
        response = await client.get(f"/v1/topics/{topic}.dlq/partitions/{partition}/messages",
                                    headers=credentials("writer"))
        assert response.status == 200, await response.text()
        found += (await response.json())["messages"]
    return found


async def test_no_principal_can_preclaim_a_dead_letter_or_a_redrive(
    secured: Client, topic_name: str
) -> None:
    outcomes: collections.Counter[str] = collections.Counter()
    group = f"g-{uuid.uuid4().hex[:6]}"
    for name in (topic_name, f"{topic_name}.dlq"):
        status, doc = await post(
            secured, "writer", "/v1/topics", {"name": name, "partitions": PARTITIONS}
        )
        assert status == 201, doc
    poison = await publish_one(secured, "writer", topic_name, {"value": "poison", "key": "k"})
    partition, offset = poison["partition"], poison["offset"]
    for key in (
        f"dlq:{group}:{topic_name}:{partition}:{offset}",
        f"i:dlq:{group}:{topic_name}:{partition}:{offset}",
    ):
        await publish_one(secured, "forger", f"{topic_name}.dlq",
                          {"value": "decoy", "partition": partition, "idempotency_key": key})
        outcomes["dead-letter keys pre-claimed"] += 1
    await exhaust(secured, topic_name, group)
    [letter] = [m for m in await dead_letters(secured, topic_name) if m["value"] == "poison"]
    outcomes["dead letters written"] += 1
    for key in (f"redrive:{topic_name}.dlq:{partition}:{letter['offset']}",
                f"i:redrive:{topic_name}.dlq:{partition}:{letter['offset']}"):
        await publish_one(secured, "forger", topic_name,
                          {"value": "decoy", "partition": partition, "idempotency_key": key})
        outcomes["redrive keys pre-claimed"] += 1
    status, doc = await post(
        secured, "writer", f"/v1/topics/{topic_name}/dlq/redrive", {"max_messages": 10}
    )
    assert (status, doc) == (200, {"redriven": 3}), doc  # the poison and the forger's two decoys
    status, doc = await post(secured, "writer", f"/v1/groups/{group}-after/pull",
                             {"topic": topic_name, "max_messages": 100, "wait_ms": 200})
    # the original and the redriven copy
    assert sum(m["value"] == "poison" for m in doc["messages"]) == 2, doc
    outcomes["redriven messages back"] += 1
    print(f"internal name space: {dict(outcomes)}")


async def test_wide_publish_rule_does_not_grant_dead_letters(
    secured: Client, topic_name: str
) -> None:
    outcomes: collections.Counter[int] = collections.Counter()
    for name in (topic_name, f"{topic_name}.dlq"):
        status, doc = await post(
            secured, "writer", "/v1/topics", {"name": name, "partitions": PARTITIONS}
        )
        assert status == 201, doc
    for who in ("writer", "other", "tenant-a", "tenant-b"):
        status, doc = await post(
            secured,
            who,
            f"/v1/topics/{topic_name}.dlq/messages",
            {"messages": [{"value": "forged", "headers": {"sg-dlq-partition": "0"}}]},
        )
        assert status == 403, (who, doc)
        outcomes[status] += 1
    status, _ = await post(
        secured, "forger", f"/v1/topics/{topic_name}.dlq/messages", {"messages": [{"value": 1}]}
    )
    assert status == 200  # a rule that names dead-letter topics grants it
    outcomes[status] += 1
    print(f"dead-letter publish grants: {dict(outcomes)}")
