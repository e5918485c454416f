"""What the failure tests share besides fixtures (a module of its own: ``conftest`` is not a unique
module name when several test directories are collected in one run, so tests import these from
here)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp.test_utils import TestClient

from streamgate_devstack import RedisClusterProcess

# Short enough that a killed primary is failed over in ~2-3 s, long enough not to
# fire on a busy 2-core box.
FAILOVER_NODE_TIMEOUT_MS = 1000
# A request to a dead primary answers 503 after this instead of hanging until the failover is over.
WRITE_DEADLINE_S = 2.0
WAIT_TIMEOUT_MS = 500

Client = TestClient[Any, Any]
GatewayFactory = Callable[[RedisClusterProcess], Awaitable[Client]]


def log_key(topic: str, partition: int) -> str:
    return f"sg:{{{topic}/{partition}}}:log"


async def create(client: Client, topic: str, partitions: int) -> None:
    response = await client.post("/v1/topics", json={"name": topic, "partitions": partitions})
    assert response.status == 201, await response.text()
