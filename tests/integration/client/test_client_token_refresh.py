"""Token providers against a real gateway whose JWTs live about three seconds: producers and
consumers go on across several expiries over one connection (a fresh token goes over the open
socket before each ``exp``), and reconnect when no fresh token comes (the gateway's 4401)."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from pathlib import Path
from typing import Any

import jwt
import pytest
from aiohttp.test_utils import TestClient

from gateway.app import create_app
from gateway.settings import GatewaySettings
from streamgate_client import Admin, Consumer, Message, Producer
from streamgate_client.producer import Transport

pytestmark = pytest.mark.integration

SECRET = "s" * 40
TOKEN_LIFE_S = 3
CONFIG = """
[jwt]
algorithms = ["HS256"]
hmac_secret_env = "TEST_JWT_SECRET"
audience = "streamgate"
leeway_s = 0

[[rules]]
principals = ["app"]
topics = ["*"]
actions = ["publish", "subscribe", "admin"]
"""


class Minter:
    """A token provider, as an identity provider would be: each call mints a JWT for ``app``
    living ``life_s``."""

    def __init__(self, life_s: float = TOKEN_LIFE_S) -> None:
        self.life_s = life_s
        self.calls = 0

    def __call__(self) -> str:
        self.calls += 1
        now = int(time.time())
        claims = {"sub": "app", "aud": "streamgate", "iat": now, "exp": now + self.life_s}
        return jwt.encode(claims, SECRET, algorithm="HS256")


@pytest.fixture
async def base_url(aiohttp_client: Any, gateway_settings: GatewaySettings, tmp_path: Path) -> str:
    (tmp_path / "auth.toml").write_text(CONFIG)
    settings = dataclasses.replace(gateway_settings, auth_mode="required",
                                   auth_config_path=str(tmp_path / "auth.toml"))
    client: TestClient[Any, Any] = await aiohttp_client(
        create_app(settings, {"TEST_JWT_SECRET": SECRET}))
    return str(client.make_url("")).rstrip("/")


async def create_topic(base_url: str, topic: str, partitions: int) -> None:
    async with Admin(base_url, token=Minter(life_s=600)) as admin:
        await admin.create_topic(topic, partitions)


async def publish_slowly(producer: Producer, values: range, pause_s: float) -> None:
    """One message at a time, so publishing spans several token lives."""
    for value in values:
        await producer.send_and_wait({"n": value}, key=f"k{value % 5}")
        await asyncio.sleep(pause_s)


async def stored_values(base_url: str, topic: str, partitions: int) -> list[int]:
    async with Admin(base_url, token=Minter(life_s=600)) as admin:
        pages = [await admin.replay_all(topic, p) for p in range(partitions)]
    return sorted(m["value"]["n"] for page in pages for m in page)


@pytest.mark.parametrize("transport", ["websocket", "http"])
async def test_a_producer_keeps_publishing_across_token_expiries(
        base_url: str, topic_name: str, transport: Transport) -> None:
    await create_topic(base_url, topic_name, 2)
    minter = Minter()
    async with Producer(base_url, topic_name, token=minter, transport=transport,
                        max_retries=0) as producer:
        await publish_slowly(producer, range(80), 0.08)  # about three token lives
        socket = producer._socket
    assert await stored_values(base_url, topic_name, 2) == list(range(80))
    assert minter.calls >= 3
    if transport == "websocket":  # every fresh token went over the one socket
        assert socket is not None
        assert socket.connections == 1


async def test_a_group_consumer_keeps_receiving_across_token_expiries(
        base_url: str, topic_name: str) -> None:
    await create_topic(base_url, topic_name, 2)
    minter = Minter()
    received: list[Message] = []
    async with Consumer(base_url, topic_name, group="billing", from_="earliest",
                        token=minter, ack_timeout_ms=1000, max_reconnects=3) as consumer:
        async with Producer(base_url, topic_name, token=Minter(life_s=600)) as producer:
            publishing = asyncio.create_task(publish_slowly(producer, range(100), 0.08))
            async for message in consumer:
                received.append(message)
                await message.ack()
                if {m.value["n"] for m in received} == set(range(100)):
                    break
            await publishing
        assert consumer.connections == 1
    assert minter.calls >= 3
    # no reconnect at an expiry: no ack was lost with a connection, nothing came twice
    assert sorted(m.value["n"] for m in received) == list(range(100))
    assert {m.delivery_count for m in received} == {1}
    await until_nothing_pending(base_url, topic_name, "billing")


async def until_nothing_pending(base_url: str, topic: str, group: str) -> None:
    """Every delivered message was acked: the group holds none pending (the last acks land a
    few milliseconds after the consumer closed)."""
    async with Admin(base_url, token=Minter(life_s=600)) as admin:
        for _ in range(100):
            described = await admin.describe_group(group, topic)
            partitions = described["topics"][0]["partitions"]
            if all(p["pending"] == 0 and p["lag"] == 0 for p in partitions):
                return
            await asyncio.sleep(0.1)
    raise AssertionError(f"{group} still has messages pending: {partitions}")


async def broadcast_while_publishing(base_url: str, topic: str, minter: Minter,
                                     count: int) -> tuple[list[Message], int]:
    """What a broadcast consumer with ``minter`` receives while ``count`` messages are published
    slowly, and over how many connections."""
    received: list[Message] = []
    async with Consumer(base_url, topic, from_="earliest", token=minter,
                        max_reconnects=3) as consumer:
        async with Producer(base_url, topic, token=Minter(life_s=600)) as producer:
            publishing = asyncio.create_task(publish_slowly(producer, range(count), 0.08))
            async for message in consumer:
                received.append(message)
                if len(received) == count:
                    break
            await publishing
        return received, consumer.connections


async def test_a_broadcast_consumer_receives_across_token_expiries_over_one_connection(
        base_url: str, topic_name: str) -> None:
    await create_topic(base_url, topic_name, 2)
    received, connections = await broadcast_while_publishing(base_url, topic_name, Minter(), 100)
    assert connections == 1
    assert sorted(m.value["n"] for m in received) == list(range(100))
    assert len({(m.partition, m.offset) for m in received}) == 100


class CachingMinter(Minter):
    """A provider that hands out its token again until it has expired: no fresh token comes
    before an ``exp``, so the gateway closes the socket (4401) and the client reconnects."""

    def __init__(self) -> None:
        super().__init__()
        self.token = ""
        self.expires_at_s = 0.0

    def __call__(self) -> str:
        if time.time() >= self.expires_at_s:
            self.token = super().__call__()
            self.expires_at_s = jwt.decode(self.token, options={"verify_signature": False})["exp"]
        return self.token


async def test_without_a_fresh_token_before_the_expiry_a_consumer_reconnects_and_resumes(
        base_url: str, topic_name: str) -> None:
    await create_topic(base_url, topic_name, 1)
    received, connections = await broadcast_while_publishing(base_url, topic_name,
                                                             CachingMinter(), 60)
    assert connections >= 2
    assert [m.value["n"] for m in received] == list(range(60))
