"""The clients' ``ssl=`` against a real gateway listening with TLS: a private CA trusted, a client
certificate presented for mutual TLS, and a clear ``ConnectionFailed`` without them."""

from __future__ import annotations

import dataclasses
import ssl
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestServer

from gateway.app import create_app
from gateway.settings import GatewaySettings
from gateway.tls import server_ssl_context
from streamgate_client import Admin, ConnectionFailed, Consumer, Producer
from streamgate_devstack.certs import TlsFiles, make_pki

pytestmark = pytest.mark.integration


@pytest.fixture
def pki(tmp_path: Path) -> TlsFiles:
    return make_pki(tmp_path / "pki")


async def serve_tls(aiohttp_server: Any, settings: GatewaySettings, pki: TlsFiles,
                    client_ca: bool) -> str:
    """The gateway over HTTPS/WSS with the PKI's server certificate; ``client_ca``: clients must
    present a certificate the same CA signed."""
    settings = dataclasses.replace(
        settings, tls_cert_path=str(pki.server_cert), tls_key_path=str(pki.server_key),
        tls_client_ca_path=str(pki.ca_cert) if client_ca else None)
    server: TestServer = await aiohttp_server(create_app(settings),
                                              ssl=server_ssl_context(settings))
    return str(server.make_url("")).rstrip("/")


def trusting(pki: TlsFiles, *, with_client_cert: bool = False) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(pki.ca_cert))
    if with_client_cert:
        context.load_cert_chain(pki.client_cert, pki.client_key)
    return context


async def round_trip(base_url: str, topic: str, context: ssl.SSLContext) -> list[Any]:
    """Create a topic, publish over WSS and HTTPS, read it back with a consumer over WSS."""
    async with Admin(base_url, ssl=context) as admin:
        await admin.create_topic(topic, 1)
    for transport in ("websocket", "http"):
        async with Producer(base_url, topic, ssl=context, transport=transport) as producer:
            await producer.send_and_wait({"over": transport})
    values = []
    async with Consumer(base_url, topic, from_="earliest", ssl=context) as consumer:
        async for message in consumer:
            values.append(message.value)
            if len(values) == 2:
                break
    return values


async def unreachable_by_each_client(base_url: str, topic: str,
                                     context: ssl.SSLContext | None) -> list[str]:
    """What Admin, Producer and Consumer fail with, each given ``context`` (None: the system's
    CAs)."""
    failures = []
    with pytest.raises(ConnectionFailed) as raised:
        async with Admin(base_url, ssl=context) as admin:
            await admin.list_topics()
    failures.append(str(raised.value))
    with pytest.raises(ConnectionFailed) as raised:
        async with Producer(base_url, topic, ssl=context, max_retries=0) as producer:
            await producer.send_and_wait({"n": 1})
    failures.append(str(raised.value))
    with pytest.raises(ConnectionFailed) as raised:
        async with Consumer(base_url, topic, from_="earliest", ssl=context, max_reconnects=0):
            pass
    failures.append(str(raised.value))
    return failures


async def test_clients_reach_an_https_gateway_with_its_ca(
        aiohttp_server: Any, gateway_settings: GatewaySettings, pki: TlsFiles,
        topic_name: str) -> None:
    base_url = await serve_tls(aiohttp_server, gateway_settings, pki, client_ca=False)
    assert base_url.startswith("https://")
    assert await round_trip(base_url, topic_name, trusting(pki)) == [
        {"over": "websocket"}, {"over": "http"}]


async def test_clients_without_the_ca_fail_to_verify_the_gateway(
        aiohttp_server: Any, gateway_settings: GatewaySettings, pki: TlsFiles,
        topic_name: str) -> None:
    base_url = await serve_tls(aiohttp_server, gateway_settings, pki, client_ca=False)
    failures = await unreachable_by_each_client(base_url, topic_name, None)
    assert all("CERTIFICATE_VERIFY_FAILED" in failure for failure in failures), failures


async def test_clients_with_a_client_certificate_reach_a_mutual_tls_gateway(
        aiohttp_server: Any, gateway_settings: GatewaySettings, pki: TlsFiles,
        topic_name: str) -> None:
    base_url = await serve_tls(aiohttp_server, gateway_settings, pki, client_ca=True)
    context = trusting(pki, with_client_cert=True)
    assert await round_trip(base_url, topic_name, context) == [
        {"over": "websocket"}, {"over": "http"}]


async def test_clients_without_a_client_certificate_are_refused_by_mutual_tls(
        aiohttp_server: Any, gateway_settings: GatewaySettings, pki: TlsFiles,
        topic_name: str) -> None:
    base_url = await serve_tls(aiohttp_server, gateway_settings, pki, client_ca=True)
    failures = await unreachable_by_each_client(base_url, topic_name, trusting(pki))
    assert all("client certificates" in failure for failure in failures), failures
