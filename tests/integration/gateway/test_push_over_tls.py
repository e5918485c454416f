"""Push subscriptions over HTTPS on the real cluster and etcd: the endpoint's certificate is
checked against push_ca_path, a certificate from another CA is never sent a message, and plain
http is refused unless allowed."""

from __future__ import annotations

import asyncio
import dataclasses
import ssl
import time
from pathlib import Path
from typing import Any

from aiohttp.test_utils import TestClient, TestServer
from push_receiver import Receiver

from gateway.app import create_app
from gateway.settings import GatewaySettings
from streamgate_devstack.certs import TlsFiles, make_pki

Client = TestClient[Any, Any]


async def tls_receiver(aiohttp_server: Any, pki: TlsFiles) -> tuple[Receiver, str]:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(pki.server_cert, pki.server_key)
    state = Receiver()
    server: TestServer = await aiohttp_server(state.app(), ssl=context)
    return state, f"https://127.0.0.1:{server.port}/hook"


async def pushing_gateway(aiohttp_client: Any, settings: GatewaySettings, ca: Path) -> Client:
    client: Client = await aiohttp_client(create_app(dataclasses.replace(
        settings, push_allowed_cidrs=("127.0.0.0/8",), push_ca_path=str(ca),
        lag_interval_s=0.2)))
    return client


async def subscribed(client: Client, topic: str, endpoint: str) -> None:
    assert (await client.post("/v1/topics", json={"name": topic, "partitions": 1})).status == 201
    response = await client.put(f"/v1/topics/{topic}/push/hooks",
                                json={"endpoint": endpoint, "start": "earliest"})
    assert response.status == 201, await response.text()
    published = await client.post(f"/v1/topics/{topic}/messages",
                                  json={"messages": [{"key": "a", "value": 1}]})
    assert published.status == 200


async def partition_health(client: Client, topic: str, timeout_s: float = 30.0) -> dict[str, Any]:
    """Partition 0's posted health once it names an answer or an error."""
    deadline = time.monotonic() + timeout_s
    while True:
        view = await (await client.get(f"/v1/topics/{topic}/push/hooks")).json()
        health = view["health"]["partitions"]["0"]
        if health is not None and (health["last_status"] or health["last_error"]):
            return dict(health)
        assert time.monotonic() < deadline, view
        await asyncio.sleep(0.1)


async def test_an_endpoint_whose_certificate_the_configured_ca_signed_gets_the_messages(
        aiohttp_client: Any, aiohttp_server: Any, gateway_settings: GatewaySettings,
        tmp_path: Path, topic_name: str) -> None:
    pki = make_pki(tmp_path)
    state, url = await tls_receiver(aiohttp_server, pki)
    client = await pushing_gateway(aiohttp_client, gateway_settings, pki.ca_cert)
    await subscribed(client, topic_name, url)
    health = await partition_health(client, topic_name)
    assert health["last_status"] == 204, health
    assert [m["value"] for m in state.acked()] == [1]


async def test_an_endpoint_with_a_certificate_of_another_ca_is_never_sent_a_message(
        aiohttp_client: Any, aiohttp_server: Any, gateway_settings: GatewaySettings,
        tmp_path: Path, topic_name: str) -> None:
    pki = make_pki(tmp_path)
    other = make_pki(tmp_path, prefix="other-")
    state, url = await tls_receiver(aiohttp_server, pki)
    client = await pushing_gateway(aiohttp_client, gateway_settings, other.ca_cert)
    await subscribed(client, topic_name, url)
    health = await partition_health(client, topic_name)
    assert health["last_status"] is None
    assert "certificate" in health["last_error"].lower(), health
    assert state.requests == []


async def test_plain_http_is_refused_where_the_gateway_does_not_allow_it(
        aiohttp_client: Any, gateway_settings: GatewaySettings, tmp_path: Path,
        topic_name: str) -> None:
    client = await pushing_gateway(aiohttp_client, gateway_settings, make_pki(tmp_path).ca_cert)
    assert (await client.post("/v1/topics", json={"name": topic_name, "partitions": 1})).status \
        == 201
    response = await client.put(f"/v1/topics/{topic_name}/push/hooks",
                                json={"endpoint": "http://127.0.0.1:9/hook"})
    assert response.status == 422
    assert "http://" in (await response.json())["detail"]
