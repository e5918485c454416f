"""One Python producer publishing to three topics of a real gateway (cluster and etcd): every
message lands once in its own topic in per-key order, over the one publish socket."""

from __future__ import annotations

import re
from typing import Any

from aiohttp.test_utils import TestClient

from streamgate_client import Admin, Producer

KEYS = 4
PUBLISH_SOCKETS = re.compile(r'^streamgate_websocket_connections\{mode="publish"\} (\S+)$', re.M)


async def open_publish_sockets(gateway: TestClient[Any, Any]) -> float:
    """The gateway's gauge of open publish-only sockets."""
    response = await gateway.get("/metrics")
    found = PUBLISH_SOCKETS.search(await response.text())
    return float(found.group(1)) if found else 0.0


async def stored(admin: Admin, topic: str, partitions: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    for partition in range(partitions):
        messages += await admin.replay_all(topic, partition)
    return messages


async def test_one_producer_lands_each_topics_messages_in_key_order_over_one_socket(
    gateway: TestClient[Any, Any], base_url: str, topic_name: str,
) -> None:
    topics = [f"{topic_name}-{n}" for n in range(3)]
    async with Admin(base_url) as admin, Producer(base_url, batch_size=20,
                                                 transport="websocket") as producer:
        for topic in topics:
            await admin.create_topic(topic, 3)
        futures = [await producer.send({"n": n}, key=f"k{n % KEYS}", topic=topics[n % 3])
                   for n in range(1500)]
        await producer.send_many([{"value": {"n": n}, "key": "k0"} for n in range(1500, 1600)],
                                 topic=topics[0])
        await producer.flush()
        assert producer._socket is not None
        assert producer._socket.connections == 1
        assert await open_publish_sockets(gateway) == 1
        written = {topic: await stored(admin, topic, 3) for topic in topics}
    assert not any(f.result().duplicate for f in futures)
    for index, topic in enumerate(topics):
        sent = [n for n in range(1500) if n % 3 == index] + (
            list(range(1500, 1600)) if index == 0 else [])
        assert sorted(m["value"]["n"] for m in written[topic]) == sent
        for key in {m["key"] for m in written[topic]}:
            ns = [m["value"]["n"] for m in written[topic] if m["key"] == key]
            assert ns == sorted(ns), (topic, key)
