"""Every operation of /openapi.json with auth on: without credentials, with each kind of bad
credentials and as a principal without a grant, 401 / 403, listings filtered, nothing changed; and
every WebSocket subscription mode refusing bad credentials in the upgrade or the auth frame."""

from __future__ import annotations

import collections
import json
import uuid
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from hostile import (
    PARTITIONS,
    assert_problem,
    stored_counts,
)
from secured_stack import (
    GROUP,
    MODES,
    OPENAPI,
    OUTSIDER,
    OUTSIDER_KEY,
    WRITER,
    Client,
    bad_auth_frames,
    bad_credentials,
    closed_with,
    secured_app,
    seed_topic_with_a_group,
)

from gateway.errors import WS_CLOSE_FORBIDDEN, WS_CLOSE_UNAUTHENTICATED
from gateway.routes.console import console_is_built
from gateway.settings import GatewaySettings


@pytest.fixture
async def secured(aiohttp_client: Any, gateway_settings: GatewaySettings,
                  tmp_path: Path) -> Client:
    return await secured_app(aiohttp_client, gateway_settings, tmp_path)


# ---------------------------------------------------------------------------- 2. every route

# what each public operation answers without credentials (the console's page: its index)
PUBLIC = {"healthz": 200, "readyz": 200, "metrics": 200, "openapi": 200, "asyncapi": 200,
          "consoleRedirect": 308, "consoleFile": 200 if console_is_built() else 503}
# answered 200 to anyone authenticated, with only what the caller may see
LISTINGS = {"listTopics", "listGroups", "describeCluster", "describeQuotas"}


def documented_operations() -> list[tuple[str, str, str]]:
    """(operationId, method, path template) of every operation in /openapi.json."""
    paths = json.loads(OPENAPI.read_text())["paths"]
    return [(op["operationId"], method.upper(), path) for path, item in paths.items()
            for method, op in item.items() if method != "parameters"]


def request_for(
    operation: str, path: str, topic: str, receipt: str
) -> tuple[str, dict[str, Any] | None]:
    """A well-formed request (URL, JSON body) for an operation; a new operation must get a case
    here."""
    url = path.format(topic=topic, partition="0", group=GROUP, version="latest")
    cases: dict[str, tuple[str, dict[str, Any] | None]] = {
        "createTopic": ("", {"name": f"{topic}-new", "partitions": 1}),
        "listTopics": ("", None), "describeTopic": ("", None), "deleteTopic": ("", None),
        "updateTopic": ("", {"retention_ms": 1000, "partitions": PARTITIONS + 1}),
        "publish": ("", {"messages": [{"value": "intruder"}]}),
        "replay": ("?from=earliest&limit=1000", None),
        "keyHistory": ("?key=k1", None),
        "snapshot": ("", None),
        "subscribe": (f"?topic={topic}&mode=broadcast&from=earliest", None),
        "streamEvents": ("?from=earliest", None),
        "publishSocket": ("", None),
        "listGroups": ("", None), "describeGroup": (f"?topic={topic}", None),
        "describeCluster": ("", None), "describeQuotas": ("", None),
        "pull": ("", {"topic": topic, "max_messages": 100}),
        "ackReceipts": ("", {"receipts": [receipt]}), "nackReceipts": ("", {"receipts": [receipt]}),
        "extendReceipts": ("", {"receipts": [receipt]}),
        "rejectReceipts": ("", {"receipts": [receipt], "reason": "intruder"}),
        "seekGroup": ("", {"topic": topic, "to": "latest"}),
        "pauseGroup": (f"?topic={topic}", {"until_ms": 4_102_444_800_000}),
        "resumeGroup": (f"?topic={topic}", None),
        "groupScaleHint": (f"?topic={topic}&target_drain_s=60", None),
        "redrive": ("", {"max_messages": 10}),
        "purgeTopic": ("", {"partition": 0}), "purgeDeadLetters": ("", {}),
        "registerSchema": ("", {"schema": {"type": "object"}}),
        "mintEventToken": ("", {"ttl_s": 60}),
        "listSchemas": ("", None), "getSchema": ("", None),
        "settleParkedKey": ("", {"topic": topic, "partition": 0, "key": "k1",
                                 "action": "dead_letter"}),
        "listPushSubscriptions": ("", None), "getPushSubscription": ("", None),
        "putPushSubscription": ("", {"endpoint": "https://hooks.example.com/intruder"}),
        "deletePushSubscription": ("", None),
        "rotatePushSecret": ("", {"previous_expires_in_s": 0}),
    }
    assert operation in cases, f"add a hostile-auth case for the new operation {operation} ({path})"
    query, body = cases[operation]
    return url + query, body


async def state_of(client: Client, redis_cluster: Any, topic: str) -> dict[str, Any]:
    """What an attacker could change: stored entries (from Redis), topics, the topic, groups and
    positions."""
    described = await (await client.get(f"/v1/topics/{topic}", headers=WRITER)).json()
    group = await (await client.get(f"/v1/groups/{GROUP}?topic={topic}", headers=WRITER)).json()
    return {
        "redis": stored_counts(redis_cluster, topic),
        "topics": await (await client.get("/v1/topics", headers=WRITER)).json(),
        "topic": {k: v for k, v in described.items() if k != "partition_details"},
        "partitions": [
            (p["length"], p["first_offset"], p["last_offset"])
            for p in described["partition_details"]
        ],
        "groups": await (await client.get("/v1/groups", headers=WRITER)).json(),
        "push": await (await client.get(f"/v1/topics/{topic}/push", headers=WRITER)).json(),
        "positions": [
            (p["last_delivered_offset"], p["pending"])
            for t in group["topics"]
            for p in t["partitions"]
        ],
    }


async def refused_frame_status(client: Client, topic: str) -> int:
    """The status of the problem answering the outsider's publish frame to ``topic`` on a publish
    socket it may open (it publishes to topics of its own)."""
    async with client.ws_connect("/v1/publish", headers=OUTSIDER) as ws:
        assert (await ws.receive_json(timeout=5))["type"] == "ready"
        await ws.send_json({"type": "publish", "id": "1", "topic": topic,
                            "messages": [{"value": "intruder"}]})
        answer = await ws.receive_json(timeout=5)
    assert answer["type"] == "problem", answer
    assert answer["problem"]["type"].endswith("/forbidden"), answer
    status: int = answer["problem"]["status"]
    return status


async def test_every_route_refuses_bad_credentials(
    secured: Client, topic_name: str, redis_cluster: Any
) -> None:
    receipt = await seed_topic_with_a_group(secured, topic_name)
    before = await state_of(secured, redis_cluster, topic_name)
    missing = f"it-missing-{uuid.uuid4().hex[:8]}"
    outcomes: collections.Counter[str] = collections.Counter()
    operations = documented_operations()
    for operation, method, path in operations:
        if operation in PUBLIC:
            answer = await secured.request(method, path.replace("{path}", "index.html"),
                                           allow_redirects=False)
            assert answer.status == PUBLIC[operation], path
            outcomes[f"public {answer.status}"] += 1
            continue
        for topic in (topic_name, missing):
            url, body = request_for(operation, path, topic, receipt)
            for what, headers in bad_credentials().items():
                response = await secured.request(method, url, json=body, headers=headers)
                assert response.status == 401, (what, method, url, await response.text())
                assert "Bearer" in response.headers["WWW-Authenticate"]
                await assert_problem(response, f"{what} {method} {url}")
                outcomes["401"] += 1
            if operation == "publishSocket":  # its ACL is the frames': each names its topic
                assert await refused_frame_status(secured, topic) == 403
                outcomes["403 frame"] += 1
                continue
            response = await secured.request(method, url, json=body, headers=OUTSIDER)
            if operation in LISTINGS:
                assert response.status == 200, (method, url, await response.text())
                assert topic_name not in await response.text(), f"{operation} leaked {topic_name}"
                outcomes["listing filtered"] += 1
            else:
                assert response.status == 403, (method, url, await response.text())
                assert (await response.json())["type"].endswith("/forbidden")
                outcomes["403"] += 1
    assert await state_of(secured, redis_cluster, topic_name) == before, (
        "a refused request changed something"
    )
    assert (await secured.get(f"/v1/topics/{missing}", headers=WRITER)).status == 404
    print(
        f"\nevery route with auth on: {len(operations)} operations, {sum(outcomes.values())} "
        f"requests ({dict(outcomes)}); 0 changes (Redis entries, topics, group positions)"
    )


async def test_every_subscription_mode_refuses_bad_credentials(
        secured: Client, topic_name: str) -> None:
    await seed_topic_with_a_group(secured, topic_name)
    outcomes: collections.Counter[str] = collections.Counter()
    for mode, query in MODES.items():
        url = f"/v1/subscribe?topic={topic_name}&{query(uuid.uuid4().hex[:6])}"
        for what, headers in [*bad_credentials().items(), ("outsider", OUTSIDER)]:
            if not headers:
                # without credentials the socket is upgraded and waits for the auth frame (below)
                continue
            with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                await secured.ws_connect(url, headers=headers)
            expected = 403 if what == "outsider" else 401
            assert refused.value.status == expected, (mode, what, refused.value.status)
            outcomes[f"upgrade refused {expected}"] += 1
        for what, frame in [
            *bad_auth_frames().items(),
            ("outsider", {"type": "auth", "api_key": OUTSIDER_KEY}),
        ]:
            async with secured.ws_connect(url) as ws:
                if frame is not None:
                    await ws.send_json(frame)
                code = await closed_with(ws)
            expected_code = WS_CLOSE_FORBIDDEN if what == "outsider" else WS_CLOSE_UNAUTHENTICATED
            assert code == expected_code, (mode, what, code)
            outcomes[f"closed {code}"] += 1
    print(
        f"\nwebsocket auth with auth on: {len(MODES)} modes, {sum(outcomes.values())} attempts "
        f"({dict(outcomes)}); no message frame delivered"
    )
