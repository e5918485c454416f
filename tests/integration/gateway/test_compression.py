"""Compression on real servers: gzip/zstd publish bodies and WebSocket permessage-deflate, end to
end."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp.test_utils import TestClient

from gateway.app import create_app
from gateway.settings import GatewaySettings
from streamgate_client import Admin, Consumer, Producer
from streamgate_client.compression import Compression, compress_body

pytestmark = pytest.mark.integration

Client = TestClient[Any, Any]
BINARY = bytes(range(256)) * 4


def base_url_of(client: Client) -> str:
    return str(client.make_url("")).rstrip("/")


async def stored_values(admin: Admin, topic: str, partitions: int) -> list[Any]:
    messages: list[dict[str, Any]] = []
    for partition in range(partitions):
        messages += await admin.replay_all(topic, partition)
    return sorted(
        (m.get("value") if "value" in m else base64.b64decode(m["value_b64"]) for m in messages),
        key=repr,
    )


@pytest.mark.parametrize("coding", ["gzip", "zstd"])
async def test_compressed_publish_is_stored_exactly(
    gateway: Client, topic_name: str, coding: Compression
) -> None:
    async with Admin(base_url_of(gateway)) as admin:
        await admin.create_topic(topic_name, 3)
        values = [
            {"order": i, "items": [f"sku-{i * 7 % 13}"] * 3, "note": "é ü 😀"} for i in range(100)
        ]
        body = orjson.dumps(
            {
                "acks": "all",
                "messages": [{"key": f"k{i}", "value": v} for i, v in enumerate(values)]
                + [{"value_b64": base64.b64encode(BINARY).decode()}],
            }
        )
        response = await gateway.post(
            f"/v1/topics/{topic_name}/messages",
            data=compress_body(body, coding),
            headers={"Content-Type": "application/json", "Content-Encoding": coding},
        )
        assert response.status == 200, await response.text()
        assert len((await response.json())["results"]) == 101
        assert await stored_values(admin, topic_name, 3) == sorted([*values, BINARY], key=repr)


async def test_producer_with_zstd_compression_publishes_every_message(
    gateway: Client, topic_name: str
) -> None:
    base_url = base_url_of(gateway)
    async with (
        Admin(base_url) as admin,
        Producer(base_url, topic_name, acks="1", compression="zstd") as producer,
    ):
        await admin.create_topic(topic_name, 2)
        results = await asyncio.gather(*(producer.send_and_wait(value={"n": i})
                                         for i in range(300)))
        assert all(result.offset for result in results)
        assert await stored_values(admin, topic_name, 2) == sorted(
            ({"n": i} for i in range(300)), key=repr
        )


async def test_zip_bomb_is_413_and_writes_nothing(
    aiohttp_client: Any, gateway_settings: GatewaySettings, topic_name: str
) -> None:
    settings = dataclasses.replace(gateway_settings, max_batch_bytes=1024 * 1024)
    gateway: Client = await aiohttp_client(create_app(settings))
    bomb = compress_body(
        b'{"messages": [{"value": "' + b"A" * (256 * 1024 * 1024) + b'"}]}', "gzip"
    )
    assert len(bomb) < 1024 * 1024
    async with Admin(base_url_of(gateway)) as admin:
        await admin.create_topic(topic_name, 1)
        response = await gateway.post(f"/v1/topics/{topic_name}/messages", data=bomb,
                                      headers={"Content-Encoding": "gzip"})
        assert response.status == 413
        assert (await response.json())["type"].endswith("/too-large")
        assert (await admin.describe_topic(topic_name))["partition_details"][0]["length"] == 0


@pytest.mark.parametrize("coding", ["gzip", "zstd"])
async def test_corrupt_compressed_body_is_400_and_writes_nothing(gateway: Client, topic_name: str,
                                                                 coding: Compression) -> None:
    body = compress_body(orjson.dumps({"messages": [{"value": i} for i in range(50)]}), coding)
    async with Admin(base_url_of(gateway)) as admin:
        await admin.create_topic(topic_name, 1)
        for broken in (body[: len(body) // 2], body[:4] + bytes(b ^ 0x5A for b in body[4:])):
            response = await gateway.post(f"/v1/topics/{topic_name}/messages", data=broken,
                                          headers={"Content-Encoding": coding})
            assert response.status == 400, await response.text()
            assert (await response.json())["type"].endswith("/undecodable-body")
        assert (await admin.describe_topic(topic_name))["partition_details"][0]["length"] == 0


async def receive(consumer: Consumer, count: int) -> list[Any]:
    values = []
    async for message in consumer:
        values.append(message.value)
        if len(values) == count:
            return values
    raise AssertionError("the subscription ended early")


@pytest.mark.parametrize("asked", [True, False])
async def test_permessage_deflate_only_when_the_client_asks(
    gateway: Client, topic_name: str, asked: bool
) -> None:
    base_url = base_url_of(gateway)
    async with Admin(base_url) as admin:
        await admin.create_topic(topic_name, 2)
        async with Consumer(base_url, topic_name, from_="earliest", compress=asked) as consumer:
            values = [{"n": i, "text": "compressible " * 20} for i in range(200)]
            response = await gateway.post(f"/v1/topics/{topic_name}/messages",
                                          json={"messages": [{"value": v} for v in values]})
            assert response.status == 200
            received = await asyncio.wait_for(receive(consumer, 200), 30)
            assert consumer.compressed is asked
    assert sorted(received, key=repr) == sorted(values, key=repr)


async def test_ws_compression_off_refuses_the_offer(
        aiohttp_client: Any, gateway_settings: GatewaySettings, topic_name: str) -> None:
    gateway: Client = await aiohttp_client(
        create_app(dataclasses.replace(gateway_settings, ws_compression=False))
    )
    base_url = base_url_of(gateway)
    async with Admin(base_url) as admin:
        await admin.create_topic(topic_name, 1)
        async with Consumer(base_url, topic_name, from_="earliest", compress=True) as consumer:
            await gateway.post(
                f"/v1/topics/{topic_name}/messages", json={"messages": [{"value": 1}, {"value": 2}]}
            )
            assert await asyncio.wait_for(receive(consumer, 2), 30) == [1, 2]
            assert consumer.compressed is False


async def test_raw_websocket_client_sees_the_negotiated_extension(
    gateway: Client, topic_name: str
) -> None:
    async with Admin(base_url_of(gateway)) as admin:
        await admin.create_topic(topic_name, 1)
    async with aiohttp.ClientSession() as session, session.ws_connect(
            gateway.make_url("/v1/subscribe"), params={"topic": topic_name}, compress=15) as ws:
        assert ws.compress == 15
