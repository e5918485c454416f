"""Hostile inputs with auth on: auth_mode=required, API keys, HS256 JWTs, ACL rules, tenants.

- hostile publish bodies under valid principals (an API key and a tenant's JWT), under a principal
  without a grant and without credentials: every one refused, nothing written (counted in Redis);
- every operation of /openapi.json without credentials, with five kinds of bad credentials and as a
  principal without a grant (on an existing and on a missing topic): 401 / 403, listings filtered,
  nothing changed;
- WebSocket subscriptions in every mode with bad credentials in the upgrade request or in the auth
  frame;
- a tenant on every read path of a topic holding another tenant's messages: refused (403) or
  filtered, and not one of the other tenant's messages delivered.

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

import aiohttp
import orjson
import pytest
from hostile import (
    PARTITIONS,
    assert_problem,
    draw_cases,
    hostile_bodies,
    stored_counts,
    valid_messages,
)
from hypothesis import strategies as st
from secured_stack import (
    GROUP,
    MODES,
    OUTSIDER,
    WRITER,
    Client,
    as_tenant,
    closed_with,
    create_topic,
    publish,
    secured_app,
    seed_topic_with_a_group,
    token,
)

from gateway.errors import WS_CLOSE_FORBIDDEN
from gateway.settings import GatewaySettings


@pytest.fixture
async def secured(aiohttp_client: Any, gateway_settings: GatewaySettings,
                  tmp_path: Path) -> Client:
    return await secured_app(aiohttp_client, gateway_settings, tmp_path)


# ---------------------------------------------------------------------------- 1. publish bodies

PUBLISHERS: dict[str, tuple[dict[str, str], set[int]]] = {
    "writer (API key)": (WRITER, set(range(400, 429)) - {401, 403}),
    # headers set per case: tokens are short-lived
    "tenant a (JWT)": ({}, set(range(400, 429)) - {401, 403}),
    "outsider (no grant)": (OUTSIDER, {403}),
    "no credentials": ({}, {401}),
}


@st.composite
def wrong_tenant_batches(draw: st.DrawFn) -> bytes:
    """A valid batch for tenant a with one message that claims tenant b: 403, nothing written."""
    messages = draw(st.lists(valid_messages(with_idempotency=False), max_size=5))
    intruder = draw(valid_messages(with_idempotency=False))
    intruder["headers"] = {**intruder.get("headers", {}), "tenant": "b"}
    messages.insert(draw(st.integers(0, len(messages))), intruder)
    return orjson.dumps({"messages": messages})


async def test_hostile_publish_bodies_are_refused_with_auth_on(
        secured: Client, topic_name: str, redis_cluster: Any) -> None:
    await create_topic(secured, topic_name)
    await publish(
        secured, topic_name, [{"value": i, "partition": i % PARTITIONS} for i in range(8)], WRITER
    )
    cases = draw_cases(hostile_bodies(), 300)
    intruders = draw_cases(wrong_tenant_batches(), 60)
    before = stored_counts(redis_cluster, topic_name)
    outcomes: dict[str, collections.Counter[int]] = {
        who: collections.Counter() for who in PUBLISHERS
    }
    publishers = list(PUBLISHERS.items())
    for index, (kind, body) in enumerate(cases):
        who, (headers, expected) = publishers[index % len(publishers)]
        if who.startswith("tenant a"):
            headers = as_tenant("a")
        response = await secured.post(f"/v1/topics/{topic_name}/messages", data=body,
                                      headers={**headers, "Content-Type": "application/json"})
        status = await assert_problem(response, f"{who} {kind} {body[:200]!r}")
        assert status in expected, f"{who} {kind}: {status} {body[:200]!r}"
        outcomes[who][status] += 1
    tenant_outcomes: collections.Counter[int] = collections.Counter()
    for body in intruders:
        response = await secured.post(
            f"/v1/topics/{topic_name}/messages",
            data=body,
            headers={**as_tenant("a"), "Content-Type": "application/json"},
        )
        tenant_outcomes[await assert_problem(response, f"tenant a claiming b {body[:200]!r}")] += 1
    assert set(tenant_outcomes) == {403}, tenant_outcomes
    # an acks=0 batch would be written from the gateway's queue, after the response
    await asyncio.sleep(0.3)
    after = stored_counts(redis_cluster, topic_name)
    assert after == before, f"refused publishes wrote something: {before} -> {after}"
    summary = "; ".join(f"{who}: {dict(sorted(c.items()))}" for who, c in outcomes.items())
    print(f"\nhostile publish bodies with auth on: {len(cases)} tried ({summary}), "
          f"+ {len(intruders)} tenant-a batches claiming tenant b -> {dict(tenant_outcomes)}; "
          f"{after[0] - before[0]} written")


# ---------------------------------------------------------------------------- 3. tenants

async def messages_until_markers(ws: aiohttp.ClientWebSocketResponse, markers: set[str],
                                 wait_s: float = 10) -> list[dict[str, Any]]:
    """Message frames until every marker arrived (each partition is read in order, so anything of
    another tenant stored before a partition's marker would come first)."""
    seen: list[dict[str, Any]] = []
    waiting = set(markers)
    deadline = time.monotonic() + wait_s
    while waiting:
        frame = await ws.receive_json(timeout=max(0.1, deadline - time.monotonic()))
        if frame["type"] == "message":
            seen.append(frame)
            waiting.discard(str(frame["value"]))
    return seen


async def subscribe_as_b(
    secured: Client, url: str, by_frame: bool
) -> aiohttp.ClientWebSocketResponse:
    if not by_frame:
        return await secured.ws_connect(url, headers=as_tenant("b"))
    ws = await secured.ws_connect(url)
    await ws.send_json({"type": "auth", "token": token("b")})
    assert (await ws.receive_json(timeout=5))["type"] == "authenticated"
    return ws


async def test_tenant_reads_nothing_of_another_tenant(secured: Client, topic_name: str) -> None:
    writer_receipt = await seed_topic_with_a_group(secured, topic_name)
    await publish(secured, topic_name, [{"value": {"secret": i}, "partition": i % PARTITIONS}
                                        for i in range(20)], as_tenant("a"))
    outcomes: collections.Counter[str] = collections.Counter()
    leaked = 0

    # Replay, every partition, every way to say where to start: filtered to nothing.
    first = await (
        await secured.get(f"/v1/topics/{topic_name}/partitions/0/messages", headers=WRITER)
    ).json()
    for partition in range(PARTITIONS):
        for query in ("", "from=earliest&limit=1000", "from_time_ms=0&limit=1000",
                      f"from={first['messages'][0]['offset']}", "from=latest"):
            response = await secured.get(
                f"/v1/topics/{topic_name}/partitions/{partition}/messages?{query}",
                headers=as_tenant("b"),
            )
            assert response.status == 200, await response.text()
            leaked += len((await response.json())["messages"])
            outcomes["replay filtered"] += 1

    # HTTP pull and settling: refused for a filtered principal, and for another
    # tenant's group names.
    refused: list[tuple[str, str, dict[str, Any] | None]] = [
        ("POST", f"/v1/groups/b-pull-{uuid.uuid4().hex[:6]}/pull", {"topic": topic_name}),
        ("POST", "/v1/groups/a-pull/pull", {"topic": topic_name}),
        ("POST", f"/v1/groups/{GROUP}/pull", {"topic": topic_name}),
        *(
            ("POST", f"/v1/groups/{GROUP}/{action}", {"receipts": [writer_receipt]})
            for action in ("ack", "nack", "extend")
        ),
        *(
            ("POST", f"/v1/groups/b-g/{action}", {"receipts": [writer_receipt]})
            for action in ("ack", "nack", "extend")
        ),
        ("POST", "/v1/groups/b-g/seek", {"topic": topic_name, "to": "earliest"}),
        ("POST", f"/v1/topics/{topic_name}/dlq/redrive", {}),
        ("POST", f"/v1/topics/{topic_name}/purge", {}),
        ("POST", f"/v1/topics/{topic_name}/dlq/purge", {}),
        ("GET", f"/v1/groups/{GROUP}?topic={topic_name}", None),
    ]
    for method, url, body in refused:
        response = await secured.request(method, url, json=body, headers=as_tenant("b"))
        assert response.status == 403, (method, url, await response.text())
        outcomes["pull/settle/admin/describe 403"] += 1
    described = await (await secured.get(f"/v1/topics/{topic_name}", headers=as_tenant("b"))).json()
    assert all(p["top_keys"] == [] for p in described["partition_details"]), (
        "heavy keys are another tenant's"
    )

    # Another tenant's group name is refused before the upgrade and after the auth frame.
    with pytest.raises(aiohttp.WSServerHandshakeError) as foreign:
        await secured.ws_connect(
            f"/v1/subscribe?topic={topic_name}&group=a-g&mode=shared", headers=as_tenant("b")
        )
    assert foreign.value.status == 403
    async with secured.ws_connect(f"/v1/subscribe?topic={topic_name}&group=a-g&mode=shared") as ws:
        await ws.send_json({"type": "auth", "token": token("b")})
        assert await closed_with(ws) == WS_CLOSE_FORBIDDEN
    outcomes["foreign group refused"] += 2

    # Every subscription mode, authenticated by header and by frame: only tenant b's
    # own markers arrive.
    delivered = 0
    for mode, mode_query in MODES.items():
        for by_frame in (False, True):
            tag = uuid.uuid4().hex[:6]
            ws = await subscribe_as_b(
                secured, f"/v1/subscribe?topic={topic_name}&{mode_query(tag)}", by_frame
            )
            try:
                markers = {f"marker-{tag}-{p}" for p in range(PARTITIONS)}
                await publish(secured, topic_name, [{"value": f"marker-{tag}-{p}", "partition": p}
                                                    for p in range(PARTITIONS)], as_tenant("b"))
                seen = await messages_until_markers(ws, markers)
            finally:
                await ws.close()
            foreign_frames = [m for m in seen if m["headers"].get("tenant") != "b"]
            leaked += len(foreign_frames)
            assert not foreign_frames, (
                f"{mode} (by {'frame' if by_frame else 'header'}) leaked {foreign_frames[:3]}"
            )
            delivered += len(seen)
            outcomes["subscription filtered"] += 1
    assert leaked == 0
    print(
        f"\ntenant isolation with auth on: {sum(outcomes.values())} read attempts by tenant b on a "
        f"topic holding 32 messages of others ({dict(outcomes)}); {delivered} own messages "
        f"delivered, {leaked} of tenant a's"
    )
