"""Hostile listings and scrapes with auth on: listings cost what the caller may see and are rate
limited, and the public /metrics shows no message keys or group names.

- a principal who may see nothing lists and describes groups and topics over and over: not one Redis
  call for the topics it may not see (counted by the gateway's own Redis call histogram);
- listings past the principal's reads rate limit are refused with 429 while another principal is
  still served;
- /metrics (public) and a publish-only principal's topic description after keyed publishes and a
  group pull: no key and no group name anywhere;
- a principal creating group after group over WebSocket subscriptions on two replicas: refused with
  403 groups-limit past max_groups_per_principal, while joining an existing group stays free.

Each test prints one summary line with the number of cases tried and their outcomes (``-s`` shows
them).
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import re
import uuid
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestClient
from auth_config import api_keys, rule, secured_client

from gateway.observe.exposition import group_pseudonym
from gateway.settings import GatewaySettings

Client = TestClient[Any, Any]
WRITER_KEY, OUTSIDER_KEY, PUBLISHER_KEY = (
    "sgk_list-writer-key",
    "sgk_list-outsider-key",
    "sgk_list-publisher-key",
)
JOINER_KEY = "sgk_list-joiner-key"
WRITER, OUTSIDER, PUBLISHER, JOINER = (
    {"X-API-Key": key} for key in (WRITER_KEY, OUTSIDER_KEY, PUBLISHER_KEY, JOINER_KEY)
)
GROUP, SECRET_KEY = "payroll-consumers", "customer-4711-secret"
BIG_PARTITIONS = 64
CONFIG = (api_keys({"writer": WRITER_KEY, "outsider": OUTSIDER_KEY, "publisher": PUBLISHER_KEY,
                    "joiner": JOINER_KEY})
          + rule(["writer"], ["it-*"], ["publish", "subscribe", "admin"])
          + rule(["joiner"], ["it-*"], ["subscribe"])
          + rule(["outsider"], ["outsider-*"], ["publish", "subscribe", "admin"])
          + rule(["publisher"], ["it-*"], ["publish"]))
REDIS_CALL = re.compile(
    r'^streamgate_redis_latency_seconds_count\{operation="(groups|state)"\} (\S+)$', re.M
)
OWNED = re.compile(r"^streamgate_partitions_owned (\S+)$", re.M)


async def secured_gateway(
    aiohttp_client: Any, settings: GatewaySettings, tmp_path: Path, **changes: Any
) -> Client:
    # The owners' sweep and lag duty read groups too: far apart, so every counted call
    # is a listing's.
    return await secured_client(aiohttp_client, settings, tmp_path, CONFIG, sweep_interval_s=3600.0,
                                lag_interval_s=3600.0, **changes)


@pytest.fixture
async def secured(aiohttp_client: Any, gateway_settings: GatewaySettings, tmp_path: Path) -> Client:
    return await secured_gateway(aiohttp_client, gateway_settings, tmp_path)


async def big_topic_with_a_group(client: Client, name: str) -> None:
    created = await client.post(
        "/v1/topics", json={"name": name, "partitions": BIG_PARTITIONS}, headers=WRITER
    )
    assert created.status == 201, await created.text()
    published = await client.post(
        f"/v1/topics/{name}/messages",
        headers=WRITER,
        json={"messages": [{"value": i, "key": SECRET_KEY} for i in range(20)]},
    )
    assert published.status == 200, await published.text()
    pulled = await client.post(
        f"/v1/groups/{GROUP}/pull", json={"topic": name, "max_messages": 5}, headers=WRITER
    )
    assert pulled.status == 200, await pulled.text()


async def redis_group_calls(client: Client) -> float:
    """Redis group reads (XINFO GROUPS and group state) this gateway has made so far."""
    text = await (await client.get("/metrics")).text()
    return sum(float(value) for _, value in REDIS_CALL.findall(text))


async def quiet_group_calls(client: Client) -> float:
    """The gateway's Redis group reads once it owns every partition and each one's first sweep
    (run on taking a partition) is done: the count no longer moves."""
    last = -1.0
    for _ in range(200):
        text = await (await client.get("/metrics")).text()
        owned = OWNED.search(text)
        calls = sum(float(value) for _, value in REDIS_CALL.findall(text))
        # a first sweep reads its partition's groups after the partition's retention pass, which
        # can take a while with every partition's pass at once: wait for one read per partition
        if (owned is not None and float(owned.group(1)) >= BIG_PARTITIONS
                and calls >= BIG_PARTITIONS and calls == last):
            return calls
        last = calls
        await asyncio.sleep(0.5)
    raise AssertionError("the gateway's own group reads never settled")


async def test_listings_for_a_blind_principal_make_no_redis_call(
        secured: Client, topic_name: str) -> None:
    await big_topic_with_a_group(secured, topic_name)
    paths = [
        "/v1/groups", f"/v1/groups/{GROUP}", f"/v1/groups/{GROUP}?topic={topic_name}", "/v1/topics",
        f"/v1/topics/{topic_name}",
    ]
    before = await quiet_group_calls(secured)
    outcomes: collections.Counter[int] = collections.Counter()
    for _ in range(20):
        for path in paths:
            response = await secured.get(path, headers=OUTSIDER)
            body = await response.json()
            assert response.status in (200, 403, 404), (path, response.status, body)
            assert topic_name not in str(body) or response.status == 403, (path, body)
            outcomes[response.status] += 1
    outsider_calls = await redis_group_calls(secured) - before
    assert outsider_calls == 0, (
        f"{outsider_calls} Redis group calls for a principal who may see nothing"
    )
    listed = await (await secured.get("/v1/groups", headers=WRITER)).json()
    assert {"topic": topic_name, "group": GROUP} in listed["groups"]
    writer_calls = await redis_group_calls(secured) - before
    assert writer_calls >= BIG_PARTITIONS, (
        "the writer's listing looks at every partition it may see"
    )
    print(
        f"\nlistings by a principal who may see nothing: {sum(outcomes.values())} requests over "
        f"{len(paths)} routes ({dict(sorted(outcomes.items()))}), {outsider_calls:.0f} Redis group "
        f"calls; one listing by the topic's reader: {writer_calls:.0f} calls "
        f"({BIG_PARTITIONS} partitions)"
    )


async def test_listings_past_the_read_limit_are_429(
    aiohttp_client: Any, gateway_settings: GatewaySettings, tmp_path: Path, topic_name: str
) -> None:
    client = await secured_gateway(
        aiohttp_client, gateway_settings, tmp_path, rate_limit_principal_reads_per_s=2.0
    )
    created = await client.post(
        "/v1/topics", json={"name": topic_name, "partitions": 4}, headers=WRITER
    )
    assert created.status == 201, await created.text()
    paths = ["/v1/groups", f"/v1/groups/{GROUP}", "/v1/topics", f"/v1/topics/{topic_name}"]
    outcomes: dict[str, collections.Counter[int]] = {path: collections.Counter() for path in paths}
    for path in paths:
        for _ in range(8):
            response = await client.get(
                path, headers=OUTSIDER if path != f"/v1/topics/{topic_name}" else WRITER
            )
            outcomes[path][response.status] += 1
            if response.status == 429:
                assert response.headers["Content-Type"].startswith("application/problem+json")
                assert int(response.headers["Retry-After"]) >= 1
    assert all(counts[429] >= 4 for counts in outcomes.values()), outcomes
    served = await client.get("/v1/topics", headers=PUBLISHER)
    assert served.status == 200, "another principal has its own reads bucket"
    summary = "; ".join(
        f"{path.replace(topic_name, '<t>')}: {dict(sorted(c.items()))}"
        for path, c in outcomes.items()
    )
    print(
        "\nlistings past the reads rate limit (2/s): "
        f"{sum(sum(c.values()) for c in outcomes.values())} requests ({summary}); another "
        f"principal served: {served.status}"
    )


async def test_public_metrics_hide_keys_and_group_names(secured: Client, topic_name: str) -> None:
    await big_topic_with_a_group(secured, topic_name)
    await secured.get("/v1/groups", headers=WRITER)
    scrapes = [await (await secured.get("/metrics")).text() for _ in range(3)]
    leaks = sum(SECRET_KEY in text or GROUP in text for text in scrapes)
    assert leaks == 0, "/metrics shows a message key or a group name"
    assert f'group="{group_pseudonym(GROUP)}"' in scrapes[-1], (
        "groups stay apart under a stable pseudonym"
    )
    seen: dict[str, int] = {}
    for who, headers in (("writer", WRITER), ("publisher", PUBLISHER)):
        described = await (await secured.get(f"/v1/topics/{topic_name}", headers=headers)).json()
        seen[who] = sum(len(p["top_keys"]) for p in described["partition_details"])
    assert seen["publisher"] == 0, "a publish-only principal sees no heavy keys"
    assert seen["writer"] >= 1, "a subscriber of the topic does"
    print(
        f"\npublic metrics and topic description: {len(scrapes)} scrapes, {leaks} with a key or "
        f"group name; heavy keys shown to the subscriber: {seen['writer']}, to the publish-only "
        f"principal: {seen['publisher']}"
    )


async def first_message(ws: aiohttp.ClientWebSocketResponse) -> bool:
    """Whether a message arrives (after the assignment frames)."""
    for _ in range(10):
        if (await ws.receive_json(timeout=5))["type"] == "message":
            return True
    return False


async def test_group_cap_is_enforced_on_every_replica(
    aiohttp_client: Any, gateway_settings: GatewaySettings, tmp_path: Path, topic_name: str
) -> None:
    replicas = [
        await secured_gateway(
            aiohttp_client,
            dataclasses.replace(gateway_settings, node_id=f"n{i}"),
            tmp_path,
            max_groups_per_principal=3,
        )
        for i in range(2)
    ]
    created = await replicas[0].post(
        "/v1/topics", json={"name": topic_name, "partitions": 4}, headers=WRITER
    )
    assert created.status == 201, await created.text()
    outcomes: collections.Counter[int] = collections.Counter()
    for index in range(12):
        client, group = replicas[index % 2], f"flood-{uuid.uuid4().hex[:8]}"
        try:
            async with client.ws_connect(
                f"/v1/subscribe?topic={topic_name}&group={group}", headers=WRITER
            ):
                outcomes[101] += 1
        except aiohttp.WSServerHandshakeError as exc:
            outcomes[exc.status] += 1
    assert outcomes == {101: 3, 403: 9}, outcomes
    pulls: collections.Counter[int] = collections.Counter()
    for index in range(4):  # HTTP pull creates groups too
        pulled = await replicas[index % 2].post(
            f"/v1/groups/pull-{index}/pull", json={"topic": topic_name}, headers=WRITER
        )
        pulls[pulled.status] += 1
    assert pulls == {403: 4}, pulls
    refused = await replicas[1].get(
        f"/v1/subscribe?topic={topic_name}&group=one-more", headers=WRITER
    )
    problem = await refused.json()
    assert (refused.status, problem["type"].rsplit("/", 1)[-1], problem["limit"]) == (
        403, "groups-limit", 3
    )
    published = await replicas[0].post(
        f"/v1/topics/{topic_name}/messages", json={"messages": [{"value": 1}]}, headers=WRITER
    )
    assert published.status == 200, await published.text()
    async with replicas[0].ws_connect(
        f"/v1/subscribe?topic={topic_name}&group=shared", headers=JOINER
    ) as ws:
        assert await first_message(ws), "the joiner's group exists now"
    # The writer is at its cap: the upgrade succeeding (no 403) shows an existing
    # group is joined, not charged.
    async with replicas[1].ws_connect(
        f"/v1/subscribe?topic={topic_name}&group=shared", headers=WRITER
    ) as ws:
        assert (await ws.receive_json(timeout=5))["type"] == "assignment"
    print(
        "\ngroups per principal (cap 3) over two replicas: 12 new groups tried -> "
        f"{dict(sorted(outcomes.items()))}; 4 pulls with new groups -> {dict(pulls)}; joining an "
        "existing group at the cap: allowed"
    )
