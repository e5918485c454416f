"""A principal may hold at most max_connections_per_principal subscriptions on one gateway."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestClient

from gateway.app import create_app
from gateway.settings import GatewaySettings

Client = TestClient[Any, Any]


async def test_subscription_over_the_cap_is_429_until_one_closes(
        aiohttp_client: Any, gateway_settings: GatewaySettings, topic_name: str) -> None:
    client: Client = await aiohttp_client(create_app(dataclasses.replace(gateway_settings,
                                                                         max_connections_per_principal=2)))
    assert (
        await client.post("/v1/topics", json={"name": topic_name, "partitions": 1})
    ).status == 201
    params = {"topic": topic_name, "mode": "broadcast"}
    first = await client.ws_connect("/v1/subscribe", params=params)
    second = await client.ws_connect("/v1/subscribe", params=params)
    with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
        await client.ws_connect("/v1/subscribe", params=params)
    assert refused.value.status == 429
    assert refused.value.headers is not None
    assert "Retry-After" in refused.value.headers
    await first.close()
    for _ in range(50):  # the server notices the close asynchronously
        try:
            third = await client.ws_connect("/v1/subscribe", params=params)
            break
        except aiohttp.WSServerHandshakeError:
            await asyncio.sleep(0.05)
    else:
        raise AssertionError("a slot never freed up after a subscription closed")
    await second.close()
    await third.close()
