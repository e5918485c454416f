"""Authentication and authorization on the real gateway: every route 401 without credentials, 403
for a principal without a grant, tenants isolated on replay and subscribe, WebSocket auth and token
expiry."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from pathlib import Path
from typing import Any

import aiohttp
import jwt
import pytest
from aiohttp.test_utils import TestClient
from processes import until_ready

from gateway.app import create_app
from gateway.auth.keys import hash_api_key
from gateway.delivery.receipts import Receipt, ReceiptSigner
from gateway.errors import WS_CLOSE_FORBIDDEN, WS_CLOSE_UNAUTHENTICATED
from gateway.settings import GatewaySettings

Client = TestClient[Any, Any]
SECRET = "t" * 40
ADMIN_KEY, OUTSIDER_KEY = "sgk_admin-key-for-tests", "sgk_outsider-key-for-tests"
WRITER_KEY = "sgk_publish-only-key-for-tests"
CONFIG = f'''
[jwt]
algorithms = ["HS256"]
hmac_secret_env = "TEST_JWT_SECRET"
audience = "streamgate"
leeway_s = 0

[[api_keys]]
principal = "admin"
sha256 = "{hash_api_key(ADMIN_KEY)}"

[[api_keys]]
principal = "outsider"
sha256 = "{hash_api_key(OUTSIDER_KEY)}"

[[api_keys]]
principal = "writer"
sha256 = "{hash_api_key(WRITER_KEY)}"

[[rules]]
principals = ["admin"]
topics = ["*"]
actions = ["publish", "subscribe", "admin"]

[[rules]]
principals = ["outsider"]
topics = ["outsider-*"]
actions = ["subscribe"]

[[rules]]
principals = ["writer"]
topics = ["it-*"]
actions = ["publish"]

[[rules]]
principals = ["claim:tenant=a", "claim:tenant=b"]
topics = ["it-*"]
actions = ["publish", "subscribe"]

[[filters]]
principals = ["claim:tenant=a"]
headers = {{ tenant = "a" }}

[[filters]]
principals = ["claim:tenant=b"]
headers = {{ tenant = "b" }}
'''


def token(tenant: str, ttl_s: float = 300, **claims: Any) -> str:
    body = {
        "sub": f"app-{tenant}", "tenant": tenant, "aud": "streamgate",
        "exp": int(time.time() + ttl_s), **claims,
    }
    return jwt.encode(body, SECRET, algorithm="HS256")


def as_key(key: str) -> dict[str, str]:
    return {"Authorization": f"ApiKey {key}"}


def as_tenant(tenant: str, ttl_s: float = 300) -> dict[str, str]:
    return {"Authorization": f"Bearer {token(tenant, ttl_s)}"}


ADMIN, OUTSIDER = as_key(ADMIN_KEY), {"X-API-Key": OUTSIDER_KEY}


@pytest.fixture
async def secured(aiohttp_client: Any, gateway_settings: GatewaySettings, tmp_path: Path) -> Client:
    (tmp_path / "auth.toml").write_text(CONFIG)
    settings = dataclasses.replace(gateway_settings, auth_mode="required", auth_frame_timeout_s=1.0,
                                   auth_config_path=str(tmp_path / "auth.toml"))
    client: Client = await aiohttp_client(create_app(settings, {"TEST_JWT_SECRET": SECRET}))
    return client


@pytest.fixture
async def topic(secured: Client, topic_name: str) -> str:
    response = await secured.post(
        "/v1/topics", json={"name": topic_name, "partitions": 2}, headers=ADMIN
    )
    assert response.status == 201, await response.text()
    assert (await response.json())["owner"] == "admin"
    return topic_name


def every_route(topic: str) -> list[tuple[str, str, dict[str, Any] | None]]:
    receipt = ReceiptSigner.random().issue(
        Receipt(topic, 0, "1-0", 30_000, int(time.time() * 1000)), "admin", "g1"
    )
    return [
        ("POST", "/v1/topics", {"name": topic + "-new", "partitions": 1}),
        ("GET", "/v1/topics", None),
        ("GET", f"/v1/topics/{topic}", None),
        ("PATCH", f"/v1/topics/{topic}", {"retention_ms": 1000}),
        ("DELETE", f"/v1/topics/{topic}", None),
        ("POST", f"/v1/topics/{topic}/messages", {"messages": [{"value": 1}]}),
        ("GET", f"/v1/topics/{topic}/partitions/0/messages", None),
        ("GET", f"/v1/topics/{topic}/history?key=k1", None),
        ("GET", f"/v1/subscribe?topic={topic}", None),
        ("GET", "/v1/groups", None),
        ("GET", f"/v1/groups/g1?topic={topic}", None),
        ("POST", "/v1/groups/g1/pull", {"topic": topic}),
        ("POST", "/v1/groups/g1/ack", {"receipts": [receipt]}),
        ("POST", "/v1/groups/g1/nack", {"receipts": [receipt]}),
        ("POST", "/v1/groups/g1/extend", {"receipts": [receipt]}),
        ("POST", "/v1/groups/g1/seek", {"topic": topic, "to": "earliest"}),
        ("POST", f"/v1/topics/{topic}/dlq/redrive", {}),
    ]


async def test_every_route_without_credentials_is_401_with_a_challenge(
    secured: Client, topic: str
) -> None:
    tried = 0
    for method, path, body in every_route(topic):
        response = await secured.request(method, path, json=body)
        assert response.status == 401, (method, path, await response.text())
        assert response.content_type == "application/problem+json"
        assert "Bearer" in response.headers["WWW-Authenticate"]
        tried += 1
    for bad in (
        {"Authorization": "ApiKey wrong"},
        {"Authorization": "Bearer not.a.jwt"},
        {"Authorization": "Basic x"},
        {"Authorization": f"Bearer {token('a', -60)}"},
        {"X-API-Key": ADMIN_KEY + "x"},
    ):
        response = await secured.get("/v1/topics", headers=bad)
        assert response.status == 401, bad
        assert 'error="invalid_token"' in response.headers["WWW-Authenticate"]
        tried += 1
    print(f"unauthenticated attempts: {tried}, all 401")
    # nothing was changed
    assert (await secured.get(f"/v1/topics/{topic}", headers=ADMIN)).status == 200


async def test_ungranted_principal_gets_403_on_every_route(secured: Client, topic: str) -> None:
    tried = 0
    for name in (topic, "it-no-such-topic"):
        for method, path, body in every_route(name):
            if method == "GET" and path in ("/v1/groups", "/v1/topics"):
                continue  # listings are filtered, not refused (below)
            response = await secured.request(method, path, json=body, headers=OUTSIDER)
            assert response.status == 403, (method, path, await response.text())
            assert (await response.json())["type"].endswith("/forbidden")
            tried += 1
    print(f"wrong-principal attempts: {tried}, all 403")
    listing = await secured.get("/v1/topics", headers=OUTSIDER)
    assert listing.status == 200
    assert (await listing.json())["topics"] == []
    assert (await (await secured.get("/v1/groups", headers=OUTSIDER)).json())["groups"] == []


async def test_operational_routes_are_public(secured: Client) -> None:
    await until_ready(secured)  # without credentials: readiness itself is public
    for path in ("/healthz", "/readyz", "/metrics", "/openapi.json", "/asyncapi.json"):
        assert (await secured.get(path)).status == 200, path


async def publish_mixed(secured: Client, topic: str) -> None:
    messages = [
        {
            "key": f"k{i}",
            "value": {"i": i, "tenant": t},
            "headers": {"tenant": t},
            "partition": i % 2,
        }
        for i, t in enumerate(["a", "b", "a", "b", "b", "a"])
    ]
    response = await secured.post(
        f"/v1/topics/{topic}/messages", json={"messages": messages}, headers=ADMIN
    )
    assert response.status == 200, await response.text()


async def test_a_tenant_replays_only_its_own_messages(secured: Client, topic: str) -> None:
    await publish_mixed(secured, topic)
    for tenant in ("a", "b"):
        seen = []
        for partition in (0, 1):
            response = await secured.get(f"/v1/topics/{topic}/partitions/{partition}/messages",
                                         headers=as_tenant(tenant))
            assert response.status == 200
            seen += (await response.json())["messages"]
        assert len(seen) == 3
        assert {m["headers"]["tenant"] for m in seen} == {tenant}
    described = await (await secured.get(f"/v1/topics/{topic}", headers=as_tenant("a"))).json()
    assert all(p["top_keys"] == [] for p in described["partition_details"])


async def test_tenant_publish_is_stamped_and_foreign_tenant_refused(
        secured: Client, topic: str) -> None:
    url = f"/v1/topics/{topic}/messages"
    ok = await secured.post(
        url, json={"messages": [{"value": 1, "partition": 0}]}, headers=as_tenant("a")
    )
    assert ok.status == 200, await ok.text()
    refused = await secured.post(url, json={"messages": [{"value": 2, "headers": {"tenant": "b"}}]},
                                 headers=as_tenant("a"))
    assert refused.status == 403
    replay = await secured.get(f"/v1/topics/{topic}/partitions/0/messages", headers=ADMIN)
    assert [m["headers"] for m in (await replay.json())["messages"]] == [{"tenant": "a"}]
    plain = await secured.post(
        url, json={"messages": [{"key": "k", "value": 3}]}, headers=as_tenant("b")
    )
    # a plain message too (the columnar path) gets the header
    assert plain.status == 200, await plain.text()
    (result,) = (await plain.json())["results"]
    replay = await secured.get(
        f"/v1/topics/{topic}/partitions/{result['partition']}/messages", headers=ADMIN
    )
    assert [(m["value"], m["headers"]) for m in (await replay.json())["messages"]
            if m["offset"] == result["offset"]] == [(3, {"tenant": "b"})]


async def receive_messages(ws: aiohttp.ClientWebSocketResponse, count: int, timeout_s: float = 10
                           ) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    deadline = asyncio.get_running_loop().time() + timeout_s
    while len(messages) < count:
        frame = await ws.receive_json(
            timeout=max(0.1, deadline - asyncio.get_running_loop().time())
        )
        if frame["type"] == "message":
            messages.append(frame)
    return messages


async def no_more_messages(ws: aiohttp.ClientWebSocketResponse, wait_s: float = 0.5) -> bool:
    try:
        while True:
            frame = await ws.receive_json(timeout=wait_s)
            if frame["type"] == "message":
                return False
    except TimeoutError:
        return True


@pytest.mark.parametrize("query", ["from=earliest", "group=tenant-group&mode=shared",
                                   "group=tenant-group-x&mode=exclusive"])
async def test_a_tenant_subscription_delivers_only_its_own_messages(
        secured: Client, topic: str, query: str) -> None:
    await publish_mixed(secured, topic)
    group = query.split("group=")[1].split("&")[0] if "group=" in query else None
    for tenant in ("a", "b"):
        tenant_query = query.replace(group, f"{group}-{tenant}") if group else query
        async with secured.ws_connect(f"/v1/subscribe?topic={topic}&{tenant_query}",
                                      headers=as_tenant(tenant)) as ws:
            messages = await receive_messages(ws, 3)
            assert {m["headers"]["tenant"] for m in messages} == {tenant}
            if group:
                await ws.send_json(
                    {
                        "type": "ack",
                        "messages": [
                            {"partition": m["partition"], "offset": m["offset"]} for m in messages
                        ],
                    }
                )
            assert await no_more_messages(ws)


async def test_a_tenant_cannot_pull_over_http(secured: Client, topic: str) -> None:
    response = await secured.post(
        "/v1/groups/g1/pull", json={"topic": topic}, headers=as_tenant("a")
    )
    assert response.status == 403
    assert "forced header filter" in (await response.json())["detail"]


async def test_tenant_reads_only_its_own_history(secured: Client, topic_name: str) -> None:
    created = await secured.post("/v1/topics", json={"name": topic_name, "partitions": 1,
                                                     "key_index": True}, headers=ADMIN)
    assert created.status == 201
    for tenant in ("a", "b"):
        response = await secured.post(f"/v1/topics/{topic_name}/messages",
                                      json={"messages": [{"key": "shared", "value": tenant}]},
                                      headers=as_tenant(tenant))
        assert response.status == 200
    b_offset = (await response.json())["results"][0]["offset"]
    history = await secured.get(f"/v1/topics/{topic_name}/history?key=shared",
                                headers=as_tenant("b"))
    assert [m["value"] for m in (await history.json())["messages"]] == ["b"]
    # a key's position is the tenant's own key's; a partition's involves every tenant's messages:
    # it would tell b of a's, and let b block a
    moved = await secured.post(f"/v1/topics/{topic_name}/messages", headers=as_tenant("b"),
                               json={"messages": [{"key": "shared", "value": 1,
                                                   "expected_offset": "none"}]})
    assert (moved.status, (await moved.json())["current"]) == (409, b_offset)
    refused = await secured.post(f"/v1/topics/{topic_name}/messages", headers=as_tenant("b"),
                                 json={"expected_last_offset": "none", "messages": [{"value": 1}]})
    assert refused.status == 403
    assert "forced header filter" in (await refused.json())["detail"]
    # each tenant's keys are its own: an unfiltered reader's key is the unfiltered writers'
    everything = await secured.get(f"/v1/topics/{topic_name}/history?key=shared", headers=ADMIN)
    assert (await everything.json())["messages"] == []


async def test_a_publish_only_principal_learns_no_position_from_a_409(
        secured: Client, topic_name: str) -> None:
    created = await secured.post("/v1/topics", json={"name": topic_name, "partitions": 1,
                                                     "key_index": True}, headers=ADMIN)
    assert created.status == 201
    await secured.post(f"/v1/topics/{topic_name}/messages", headers=ADMIN,
                       json={"messages": [{"key": "k", "value": 1}]})
    conditional = {"messages": [{"key": "k", "value": 2, "expected_offset": "none"}]}
    blind = await secured.post(f"/v1/topics/{topic_name}/messages", json=conditional,
                               headers=as_key(WRITER_KEY))
    told = await secured.post(f"/v1/topics/{topic_name}/messages", json=conditional,
                              headers=ADMIN)
    blind_doc, told_doc = await blind.json(), await told.json()
    assert (blind.status, told.status) == (409, 409)
    assert "current" not in blind_doc
    assert "-" not in blind_doc["detail"].replace("expected offset none", "")
    assert told_doc["current"] != "none"


async def test_websocket_authenticates_by_header(secured: Client, topic: str) -> None:
    await publish_mixed(secured, topic)
    async with secured.ws_connect(
        f"/v1/subscribe?topic={topic}&from=earliest", headers=ADMIN
    ) as ws:
        assert len(await receive_messages(ws, 6)) == 6


async def test_websocket_authenticates_by_first_frame(secured: Client, topic: str) -> None:
    await publish_mixed(secured, topic)
    async with secured.ws_connect(f"/v1/subscribe?topic={topic}&from=earliest") as ws:
        await ws.send_json({"type": "auth", "token": token("b")})
        assert await ws.receive_json(timeout=5) == {"type": "authenticated", "principal": "app-b"}
        messages = await receive_messages(ws, 3)
        assert {m["headers"]["tenant"] for m in messages} == {"b"}
    async with secured.ws_connect(f"/v1/subscribe?topic={topic}&from=earliest") as ws:
        await ws.send_json({"type": "auth", "api_key": ADMIN_KEY})
        assert (await ws.receive_json(timeout=5))["principal"] == "admin"


@pytest.mark.parametrize(("frame", "code"), [
    (None, WS_CLOSE_UNAUTHENTICATED),
    ({"type": "auth", "token": "not-a-token"}, WS_CLOSE_UNAUTHENTICATED),
    ({"type": "ack", "messages": []}, WS_CLOSE_UNAUTHENTICATED),
    ({"type": "auth", "api_key": OUTSIDER_KEY}, WS_CLOSE_FORBIDDEN),
])
async def test_websocket_without_a_valid_auth_frame_is_closed(
        secured: Client, topic: str, frame: dict[str, Any] | None, code: int) -> None:
    async with secured.ws_connect(f"/v1/subscribe?topic={topic}") as ws:
        if frame is not None:
            await ws.send_json(frame)
        closed = await ws.receive(timeout=5)
        assert (closed.type, closed.data) == (aiohttp.WSMsgType.CLOSE, code)


async def test_websocket_forbidden_by_header_is_403_before_the_upgrade(secured: Client) -> None:
    response = await secured.get("/v1/subscribe?topic=it-no-such-topic", headers=OUTSIDER)
    assert response.status == 403


async def test_websocket_is_closed_with_4401_when_its_token_expires(
    secured: Client, topic: str
) -> None:
    started = time.monotonic()
    async with secured.ws_connect(
        f"/v1/subscribe?topic={topic}", headers=as_tenant("a", ttl_s=2)
    ) as ws:
        while True:
            frame = await ws.receive(timeout=10)
            if frame.type is not aiohttp.WSMsgType.TEXT:
                break
    assert frame.type is aiohttp.WSMsgType.CLOSE
    assert frame.data == WS_CLOSE_UNAUTHENTICATED
    assert frame.extra == "token expired"
    assert 0.5 < time.monotonic() - started < 5


async def publish_frame(ws: aiohttp.ClientWebSocketResponse, frame_id: str, topic: str,
                        **message: Any) -> dict[str, Any]:
    await ws.send_json({"type": "publish", "id": frame_id, "topic": topic,
                        "messages": [{"partition": 0, **message}]})
    answer: dict[str, Any] = await ws.receive_json(timeout=5)
    assert answer["id"] == frame_id
    return answer


async def test_a_publish_socket_stamps_its_tenant_and_refuses_a_foreign_one(
        secured: Client, topic: str) -> None:
    async with secured.ws_connect("/v1/publish", headers=as_tenant("a")) as ws:
        assert (await ws.receive_json(timeout=5))["type"] == "ready"
        ok = await publish_frame(ws, "ok", topic, value=1)
        refused = await publish_frame(ws, "foreign", topic, value=2, headers={"tenant": "b"})
    assert ok["type"] == "published"
    assert (refused["type"], refused["problem"]["status"]) == ("problem", 403)
    replay = await secured.get(f"/v1/topics/{topic}/partitions/0/messages", headers=ADMIN)
    assert [(m["value"], m["headers"]) for m in (await replay.json())["messages"]] == [
        (1, {"tenant": "a"})]


async def test_a_publish_socket_authenticates_by_first_frame_and_ignores_a_later_auth(
        secured: Client, topic: str) -> None:
    async with secured.ws_connect("/v1/publish") as ws:
        await ws.send_json({"type": "auth", "api_key": WRITER_KEY})
        assert await ws.receive_json(timeout=5) == {"type": "authenticated", "principal": "writer"}
        assert (await ws.receive_json(timeout=5))["type"] == "ready"
        ok = await publish_frame(ws, "one", topic, value=1)
        # a later auth frame changes nothing: the socket stays the writer's, who may not publish
        # outside it-* (the admin would learn the topic does not exist: 404)
        await ws.send_json({"type": "auth", "api_key": ADMIN_KEY})
        error = await ws.receive_json(timeout=5)
        elsewhere = await publish_frame(ws, "two", "outsider-topic", value=2)
    assert ok["type"] == "published"
    assert (error["type"], error["code"]) == ("error", "bad-frame")
    assert elsewhere["problem"]["status"] == 403


async def test_a_principal_that_may_publish_nowhere_gets_no_publish_socket(
        secured: Client) -> None:
    refused = await secured.get("/v1/publish", headers=OUTSIDER)
    assert refused.status == 403
    async with secured.ws_connect("/v1/publish") as ws:
        await ws.send_json({"type": "auth", "api_key": OUTSIDER_KEY})
        closed = await ws.receive(timeout=5)
    assert (closed.type, closed.data) == (aiohttp.WSMsgType.CLOSE, WS_CLOSE_FORBIDDEN)


@pytest.mark.parametrize("frame", [None, {"type": "auth", "token": "not-a-token"},
                                   {"type": "publish", "id": "1", "topic": "t", "messages": []}])
async def test_a_publish_socket_without_a_valid_auth_frame_is_closed_with_4401(
        secured: Client, frame: dict[str, Any] | None) -> None:
    async with secured.ws_connect("/v1/publish") as ws:
        if frame is not None:
            await ws.send_json(frame)
        closed = await ws.receive(timeout=5)
    assert (closed.type, closed.data) == (aiohttp.WSMsgType.CLOSE, WS_CLOSE_UNAUTHENTICATED)


async def test_a_publish_socket_is_closed_with_4401_when_its_token_expires(
        secured: Client, topic: str) -> None:
    async with secured.ws_connect("/v1/publish", headers=as_tenant("a", ttl_s=2)) as ws:
        assert (await ws.receive_json(timeout=5))["type"] == "ready"
        closed = await ws.receive(timeout=10)
    assert (closed.type, closed.data) == (aiohttp.WSMsgType.CLOSE, WS_CLOSE_UNAUTHENTICATED)
