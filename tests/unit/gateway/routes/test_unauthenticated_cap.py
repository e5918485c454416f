"""At most ``max_unauthenticated_connections`` WebSockets per process await their auth frame; past
it the upgrade is refused with 503 + Retry-After, and a slot frees as soon as a socket
authenticates, fails or times out."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp.test_utils import TestClient

from gateway.app import app_with_services
from gateway.auth.keys import hash_api_key
from gateway.services import Services
from gateway.settings import GatewaySettings

Client = TestClient[Any, Any]
KEY = "sgk_unit-cap-key"
CAP = 2


@pytest.fixture
def settings(tmp_path: Path) -> GatewaySettings:
    config = tmp_path / "auth.toml"
    config.write_text(
        f'[[api_keys]]\nprincipal = "app"\nsha256 = "{hash_api_key(KEY)}"\n\n'
        '[[rules]]\nprincipals = ["app"]\ntopics = ["*"]\n'
        'actions = ["publish", "subscribe", "admin"]\n'
    )
    return GatewaySettings(auth_config_path=str(config), max_unauthenticated_connections=CAP,
                           auth_frame_timeout_s=30)


@pytest.fixture
async def client(aiohttp_client: Any, services: Services) -> Client:
    client: Client = await aiohttp_client(app_with_services(services))
    response = await client.post(
        "/v1/topics", json={"name": "orders", "partitions": 1}, headers={"X-API-Key": KEY}
    )
    assert response.status == 201, await response.text()
    return client


async def test_upgrades_past_the_cap_are_503_until_one_authenticates(
        client: Client, services: Services) -> None:
    path = "/v1/subscribe?topic=orders&mode=broadcast"
    waiting = [await client.ws_connect(path) for _ in range(CAP)]
    assert services.connections.unauthenticated == CAP
    with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
        await client.ws_connect(path)
    assert refused.value.status == 503
    assert refused.value.headers is not None
    assert "Retry-After" in refused.value.headers
    await waiting[0].send_str(orjson.dumps({"type": "auth", "api_key": KEY}).decode())
    assert orjson.loads((await waiting[0].receive(timeout=5)).data)["type"] == "authenticated"
    assert services.connections.unauthenticated == CAP - 1
    late = await client.ws_connect(path)  # the authenticated socket gave its slot back
    await waiting[1].send_str('{"type": "auth", "api_key": "sgk_wrong"}')
    assert (await waiting[1].receive(timeout=5)).type is aiohttp.WSMsgType.CLOSE
    for _ in range(100):
        if services.connections.unauthenticated == 1:
            break
        await asyncio.sleep(0.01)
    assert services.connections.unauthenticated == 1, "a refused auth frame frees its slot too"
    for ws in (*waiting, late):
        await ws.close()
    for _ in range(100):
        if services.connections.unauthenticated == 0:
            break
        await asyncio.sleep(0.01)
    assert services.connections.unauthenticated == 0, (
        "a socket gone before authenticating frees its slot"
    )


async def test_upgrades_with_credentials_skip_the_cap(client: Client, services: Services) -> None:
    path = "/v1/subscribe?topic=orders&mode=broadcast"
    sockets = [await client.ws_connect(path, headers={"X-API-Key": KEY}) for _ in range(CAP + 1)]
    assert services.connections.unauthenticated == 0
    for ws in sockets:
        await ws.close()
