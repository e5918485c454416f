"""Publish rate limits through real gateways: 429 + Retry-After + RateLimit headers, shared across replicas."""

from __future__ import annotations

import dataclasses
from typing import Any

from aiohttp.test_utils import TestClient

from gateway.app import create_app
from gateway.settings import GatewaySettings

Client = TestClient[Any, Any]


async def limited_gateway(aiohttp_client: Any, settings: GatewaySettings, **limits: float) -> Client:
    client: Client = await aiohttp_client(create_app(dataclasses.replace(settings, **limits)))
    return client


async def stored(client: Client, topic: str) -> int:
    page = await (await client.get(f"/v1/topics/{topic}/partitions/0/messages", params={"limit": "1000"})).json()
    return len(page["messages"])


async def test_a_principal_over_its_rate_gets_429_and_nothing_is_written(
        aiohttp_client: Any, gateway_settings: GatewaySettings, topic_name: str) -> None:
    # A very slow refill: the burst of 10 is all there is during the test.
    client = await limited_gateway(aiohttp_client, gateway_settings, rate_limit_principal_messages_per_s=0.5,
                                   rate_limit_burst_s=20)
    assert (await client.post("/v1/topics", json={"name": topic_name, "partitions": 1})).status == 201
    admitted = await client.post(f"/v1/topics/{topic_name}/messages",
                                 json={"messages": [{"value": i} for i in range(8)]})
    assert admitted.status == 200
    assert admitted.headers["RateLimit"].startswith("remaining=2,")
    assert '"messages";q=10;w=20' in admitted.headers["RateLimit-Policy"]
    refused = await client.post(f"/v1/topics/{topic_name}/messages",
                                json={"messages": [{"value": i} for i in range(3)]})
    assert refused.status == 429
    assert refused.content_type == "application/problem+json"
    assert int(refused.headers["Retry-After"]) >= 1
    assert refused.headers["RateLimit"].startswith("remaining=0,")
    assert (await refused.json())["detail"] == "principal rate limit exceeded"
    assert await stored(client, topic_name) == 8, "a refused batch must write nothing"
    fits = await client.post(f"/v1/topics/{topic_name}/messages", json={"messages": [{"value": 8}, {"value": 9}]})
    assert fits.status == 200, "the refused request must not have used up the remaining tokens"
    metrics = await (await client.get("/metrics")).text()
    assert f'streamgate_publish_rate_limited_total{{limit="principal",topic="{topic_name}"}} 1.0' in metrics


async def test_a_topic_limit_is_shared_by_every_gateway_replica(
        aiohttp_client: Any, gateway_settings: GatewaySettings, topic_name: str) -> None:
    limits = {"rate_limit_topic_messages_per_s": 0.5, "rate_limit_burst_s": 20}
    first = await limited_gateway(aiohttp_client, gateway_settings, **limits)
    second = await limited_gateway(aiohttp_client, gateway_settings, **limits)
    assert (await first.post("/v1/topics", json={"name": topic_name, "partitions": 1})).status == 201
    batch = {"messages": [{"value": i} for i in range(6)]}
    assert (await first.post(f"/v1/topics/{topic_name}/messages", json=batch)).status == 200
    refused = await second.post(f"/v1/topics/{topic_name}/messages", json=batch)
    assert refused.status == 429
    assert (await refused.json())["detail"] == "topic rate limit exceeded"


async def test_a_request_larger_than_the_byte_burst_is_413_not_429(
        aiohttp_client: Any, gateway_settings: GatewaySettings, topic_name: str) -> None:
    client = await limited_gateway(aiohttp_client, gateway_settings, rate_limit_topic_bytes_per_s=100)
    assert (await client.post("/v1/topics", json={"name": topic_name, "partitions": 1})).status == 201
    response = await client.post(f"/v1/topics/{topic_name}/messages", json={"messages": [{"value": "x" * 500}]})
    assert response.status == 413
    assert "Retry-After" not in response.headers
    assert await stored(client, topic_name) == 0
