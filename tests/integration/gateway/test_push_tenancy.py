"""Push subscriptions and tenants on the real cluster and etcd: a filtered principal's subscription
delivers only its own tenant's messages, and no other tenant can see, change, rotate or delete it;
defining one needs the admin grant."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aiohttp.test_utils import TestClient, TestServer
from auth_config import api_keys, hs256_jwt, rule, secured_client, tenant_filters
from push_receiver import Receiver
from secured_stack import SECRET, as_tenant
from subscribers import wait_until

from gateway.settings import GatewaySettings

Client = TestClient[Any, Any]
PUSHING = {"push_allowed_cidrs": ("127.0.0.0/8",), "push_allow_http": True}


async def test_a_tenants_push_subscription_is_its_own_and_carries_only_its_messages(
        aiohttp_client: Any, aiohttp_server: Any, gateway_settings: GatewaySettings,
        tmp_path: Path, topic_name: str) -> None:
    config = (hs256_jwt() + rule(["claim:tenant=a", "claim:tenant=b"], ["it-*"],
                                 ["publish", "subscribe", "admin"]) + tenant_filters("a", "b"))
    client = await secured_client(aiohttp_client, gateway_settings, tmp_path, config,
                                  {"TEST_JWT_SECRET": SECRET}, lag_interval_s=0.2, **PUSHING)
    state = Receiver()
    server: TestServer = await aiohttp_server(state.app())
    a, b = as_tenant("a"), as_tenant("b")
    created = await client.post("/v1/topics", json={"name": topic_name, "partitions": 1},
                                headers=a)
    assert created.status == 201, await created.text()
    path = f"/v1/topics/{topic_name}/push/hooks"
    defined = await client.put(path, headers=a, json={
        "endpoint": f"http://127.0.0.1:{server.port}/hook", "start": "earliest"})
    assert defined.status == 201, await defined.text()
    assert (await (await client.get(f"/v1/topics/{topic_name}/push", headers=b)).json()) == {
        "subscriptions": []}
    for method, url, body in (("GET", path, None), ("DELETE", path, None),
                              ("PUT", path, {"endpoint": "http://127.0.0.1:9/evil"}),
                              ("POST", f"{path}/rotate-secret", {})):
        refused = await client.request(method, url, headers=b, json=body)
        assert refused.status == 403, (method, url, await refused.text())
    for tenant, headers in (("b", b), ("a", a)):
        published = await client.post(f"/v1/topics/{topic_name}/messages", headers=headers,
                                      json={"messages": [{"key": "k", "value": tenant}]})
        assert published.status == 200, await published.text()
    # tenant b's message came first on the partition: had it passed the filter, it went first
    await wait_until(lambda: state.acked(), 30, "tenant a's message")
    assert [(m["value"], m["headers"]["tenant"]) for m in state.acked()] == [("a", "a")]
    view = await (await client.get(path, headers=a)).json()
    assert view["created_by"] == "app-a"
    assert "forced_filter" not in view


async def test_defining_a_push_subscription_needs_the_admin_grant(
        aiohttp_client: Any, gateway_settings: GatewaySettings, tmp_path: Path,
        topic_name: str) -> None:
    config = (api_keys({"admin": "sgk_push-admin", "reader": "sgk_push-reader"})
              + rule(["admin"], ["*"], ["publish", "subscribe", "admin"])
              + rule(["reader"], ["*"], ["subscribe"]))
    client = await secured_client(aiohttp_client, gateway_settings, tmp_path, config, **PUSHING)
    admin, reader = {"X-API-Key": "sgk_push-admin"}, {"X-API-Key": "sgk_push-reader"}
    created = await client.post("/v1/topics", json={"name": topic_name, "partitions": 1},
                                headers=admin)
    assert created.status == 201
    body = {"endpoint": "http://127.0.0.1:9/hook"}
    path = f"/v1/topics/{topic_name}/push/hooks"
    assert (await client.put(path, json=body, headers=reader)).status == 403
    assert (await client.get(f"/v1/topics/{topic_name}/push", headers=reader)).status == 403
    assert (await client.put(path, json=body, headers=admin)).status == 201
