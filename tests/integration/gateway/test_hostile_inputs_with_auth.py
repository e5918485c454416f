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
import base64
import collections
import dataclasses
import json
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import jwt
import orjson
import pytest
from aiohttp.test_utils import TestClient
from hostile import (
    PARTITIONS,
    assert_problem,
    draw_cases,
    hostile_bodies,
    stored_counts,
    valid_messages,
)
from hypothesis import strategies as st

from gateway.app import create_app
from gateway.auth.keys import hash_api_key
from gateway.errors import WS_CLOSE_FORBIDDEN, WS_CLOSE_UNAUTHENTICATED
from gateway.routes.console import console_is_built
from gateway.settings import GatewaySettings

Client = TestClient[Any, Any]
OPENAPI = Path(__file__).resolve().parents[3] / "gateway" / "openapi.json"
SECRET = "h" * 40
WRITER_KEY, OUTSIDER_KEY = "sgk_hostile-writer-key", "sgk_hostile-outsider-key"
GROUP = "writers-g1"
CONFIG = f'''
[jwt]
algorithms = ["HS256"]
hmac_secret_env = "TEST_JWT_SECRET"
audience = "streamgate"
leeway_s = 0

[[api_keys]]
principal = "writer"
sha256 = "{hash_api_key(WRITER_KEY)}"

[[api_keys]]
principal = "outsider"
sha256 = "{hash_api_key(OUTSIDER_KEY)}"

[[rules]]
principals = ["writer"]
topics = ["it-*"]
actions = ["publish", "subscribe", "admin"]

[[rules]]
principals = ["outsider"]
topics = ["outsider-*"]
actions = ["publish", "subscribe", "admin"]

[[rules]]
principals = ["claim:tenant=a"]
topics = ["it-*"]
actions = ["publish", "subscribe"]
groups = ["a-*"]

[[rules]]
principals = ["claim:tenant=b"]
topics = ["it-*"]
actions = ["publish", "subscribe"]
groups = ["b-*"]

[[filters]]
principals = ["claim:tenant=a"]
headers = {{ tenant = "a" }}

[[filters]]
principals = ["claim:tenant=b"]
headers = {{ tenant = "b" }}
'''


def token(tenant: str, ttl_s: float = 300, secret: str = SECRET) -> str:
    claims = {
        "sub": f"app-{tenant}",
        "tenant": tenant,
        "aud": "streamgate",
        "exp": int(time.time() + ttl_s),
    }
    return jwt.encode(claims, secret, algorithm="HS256")


def unsigned_token(tenant: str) -> str:
    """``alg: none`` with a valid-looking body: must never be accepted."""
    def part(doc: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(doc).encode()).rstrip(b"=").decode()
    claims = {"sub": "writer", "tenant": tenant, "aud": "streamgate", "exp": int(time.time() + 300)}
    return f'{part({"alg": "none", "typ": "JWT"})}.{part(claims)}.'


WRITER = {"X-API-Key": WRITER_KEY}
OUTSIDER = {"Authorization": f"ApiKey {OUTSIDER_KEY}"}


def as_tenant(tenant: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token(tenant)}"}


def bad_credentials() -> dict[str, dict[str, str]]:
    """Requests that must be 401: nothing, or credentials that prove nothing."""
    return {
        "none": {},
        "unknown API key": {"X-API-Key": "sgk_" + "x" * 43},
        "wrong scheme": {"Authorization": f"Basic {base64.b64encode(b'writer:x').decode()}"},
        "expired JWT": {"Authorization": f"Bearer {token('a', ttl_s=-120)}"},
        "JWT signed with another key": {"Authorization": f"Bearer {token('a', secret='z' * 40)}"},
        "unsigned JWT (alg none)": {"Authorization": f"Bearer {unsigned_token('a')}"},
    }


def bad_auth_frames() -> dict[str, dict[str, Any] | None]:
    """First frames that must close the socket with 4401 (None: send nothing and wait for the
    timeout)."""
    return {
        "no frame": None,
        "unknown API key": {"type": "auth", "api_key": "sgk_" + "x" * 43},
        "expired JWT": {"type": "auth", "token": token("a", ttl_s=-120)},
        "JWT signed with another key": {"type": "auth", "token": token("a", secret="z" * 40)},
        "unsigned JWT (alg none)": {"type": "auth", "token": unsigned_token("a")},
        "not an auth frame": {"type": "ack", "messages": []},
    }


@pytest.fixture
async def secured(aiohttp_client: Any, gateway_settings: GatewaySettings, tmp_path: Path) -> Client:
    (tmp_path / "auth.toml").write_text(CONFIG)
    settings = dataclasses.replace(gateway_settings, auth_mode="required", auth_frame_timeout_s=0.5,
                                   auth_config_path=str(tmp_path / "auth.toml"))
    client: Client = await aiohttp_client(create_app(settings, {"TEST_JWT_SECRET": SECRET}))
    return client


async def create_topic(client: Client, name: str) -> None:
    response = await client.post(
        "/v1/topics", json={"name": name, "partitions": PARTITIONS}, headers=WRITER
    )
    assert response.status == 201, await response.text()


async def publish(
    client: Client, topic: str, messages: list[dict[str, Any]], headers: dict[str, str]
) -> None:
    response = await client.post(
        f"/v1/topics/{topic}/messages", json={"messages": messages}, headers=headers
    )
    assert response.status == 200, await response.text()


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
        "listSchemas": ("", None), "getSchema": ("", None),
        "settleParkedKey": ("", {"topic": topic, "partition": 0, "key": "k1",
                                 "action": "dead_letter"}),
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
        "positions": [
            (p["last_delivered_offset"], p["pending"])
            for t in group["topics"]
            for p in t["partitions"]
        ],
    }


async def seed_topic_with_a_group(client: Client, topic: str) -> str:
    """Messages in every partition and a group holding one pending delivery; its receipt."""
    await create_topic(client, topic)
    await publish(
        client,
        topic,
        [{"value": i, "partition": i % PARTITIONS, "headers": {"tenant": "a"}} for i in range(12)],
        WRITER,
    )
    pulled = await client.post(f"/v1/groups/{GROUP}/pull", json={"topic": topic, "max_messages": 1},
                               headers=WRITER)
    assert pulled.status == 200, await pulled.text()
    receipt: str = (await pulled.json())["messages"][0]["receipt"]
    return receipt


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


ModeQuery = Callable[[str], str]
MODES: dict[str, ModeQuery] = {
    "broadcast from earliest": lambda tag: "mode=broadcast&from=earliest",
    "broadcast from time 0": lambda tag: "mode=broadcast&from_time_ms=0",
    "broadcast from a cursor": lambda tag: (
        "mode=broadcast&from=" + ",".join(f"{p}:0-0" for p in range(PARTITIONS))
    ),
    "shared group": lambda tag: f"group=b-shared-{tag}&mode=shared&from=earliest",
    "exclusive group": lambda tag: f"group=b-excl-{tag}&mode=exclusive&from=earliest",
    "shared, at-most-once": lambda tag: (
        f"group=b-auto-{tag}&mode=shared&auto_ack=true&from=earliest"
    ),
}


async def closed_with(ws: aiohttp.ClientWebSocketResponse) -> int | None:
    message = await ws.receive(timeout=5)
    assert message.type is aiohttp.WSMsgType.CLOSE, (
        f"expected a close, got {message.type} {message.data!r}"
    )
    return ws.close_code


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
    for mode, query in MODES.items():
        for by_frame in (False, True):
            tag = uuid.uuid4().hex[:6]
            ws = await subscribe_as_b(
                secured, f"/v1/subscribe?topic={topic_name}&{query(tag)}", by_frame
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
