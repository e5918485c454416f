"""A gateway with an archive on a local path: the owners move entries past the hot retention into
segments, replay from the first offset reads both tiers in order, what a group has not consumed
stays hot for it, a new group reads the archive before the log, and deleting the topic deletes its
segments."""

from __future__ import annotations

import asyncio
import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import requests
from http_reads import replay_all

from storage.keys import log_key
from streamgate_devstack.etcd import EtcdProcess
from streamgate_devstack.redis_cluster import RedisClusterProcess
from tests.served import serve_gateway

pytestmark = pytest.mark.integration

PARTITIONS = 3


@pytest.fixture
def archive_dir(tmp_path: Path) -> Path:
    return tmp_path / "archive"


@pytest.fixture
def archiving_gateway(redis_cluster: RedisClusterProcess, etcd_server: EtcdProcess,
                      archive_dir: Path) -> Iterator[str]:
    yield from serve_gateway(redis_cluster, etcd_server, {
        "STREAMGATE_ARCHIVE_URL": f"file://{archive_dir}",
        "STREAMGATE_HOT_RETENTION_MS": "500",
        "STREAMGATE_ARCHIVE_INTERVAL_S": "0.2",
        "STREAMGATE_RETENTION_INTERVAL_S": "0.3",
        "STREAMGATE_ARCHIVE_SEGMENT_MAX_ENTRIES": "150",
    })


def _publish(url: str, topic: str, start: int, count: int) -> None:
    messages = [{"key": f"k{i % 17}", "value": {"n": i}} for i in range(start, start + count)]
    response = requests.post(f"{url}/v1/topics/{topic}/messages",
                             json={"acks": "all", "messages": messages}, timeout=30)
    assert response.status_code == 200, response.text


def _pull(url: str, topic: str, group: str) -> list[int]:
    """Everything the group is handed now, acked."""
    seen: list[int] = []
    while True:
        pulled = requests.post(f"{url}/v1/groups/{group}/pull",
                               json={"topic": topic, "max_messages": 200}, timeout=30).json()
        if not pulled["messages"]:
            return seen
        requests.post(f"{url}/v1/groups/{group}/ack", timeout=30,
                      json={"receipts": [m["receipt"] for m in pulled["messages"]]})
        seen += [m["value"]["n"] for m in pulled["messages"]]


def _hot_entries(cluster: RedisClusterProcess, topic: str, partitions: int = PARTITIONS) -> int:
    client = cluster.client()
    try:
        return sum(int(client.xlen(log_key(topic, p))) for p in range(partitions))
    finally:
        client.close()


def _until(condition: Any, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.2)


def test_archived_history_replays_whole_and_groups_keep_what_they_need(
        archiving_gateway: str, redis_cluster: RedisClusterProcess, archive_dir: Path) -> None:
    url = archiving_gateway
    topic = f"arch-{uuid.uuid4().hex[:8]}"
    assert requests.post(f"{url}/v1/topics", json={"name": topic, "partitions": PARTITIONS},
                         timeout=30).status_code == 201
    _publish(url, topic, 0, 600)
    assert sorted(_pull(url, topic, "reader")) == list(range(600))
    _publish(url, topic, 600, 600)  # the group has not consumed these: they stay hot for it

    _until(lambda: _hot_entries(redis_cluster, topic) == 600)
    segments = list((archive_dir).rglob("*.parquet"))
    assert segments
    by_partition = {p: replay_all(url, topic, p, page=97) for p in range(PARTITIONS)}
    values = sorted(m["value"]["n"] for messages in by_partition.values() for m in messages)
    assert values == list(range(1200))
    for messages in by_partition.values():  # offset order across the tier boundary
        offsets = [tuple(map(int, m["offset"].split("-"))) for m in messages]
        assert offsets == sorted(offsets)
        assert len(set(offsets)) == len(offsets)
    assert sorted(_pull(url, topic, "reader")) == list(range(600, 1200))

    metrics = requests.get(f"{url}/metrics", timeout=10).text
    archived = re.search(rf'^streamgate_archive_entries_total{{topic="{topic}"}} (\S+)$',
                         metrics, re.M)
    assert archived is not None
    assert float(archived.group(1)) >= 600  # the group acked the rest: those may follow
    assert requests.delete(f"{url}/v1/topics/{topic}", timeout=30).status_code == 204
    # a move under way as the topic went wrote its file after the drop: its commit finds the
    # partition gone and deletes it
    _until(lambda: not list(archive_dir.rglob("*.parquet")))


def _archived(url: str, cluster: RedisClusterProcess, topic: str) -> None:
    """A one-partition topic whose 300 messages all moved into the archive."""
    assert requests.post(f"{url}/v1/topics", json={"name": topic, "partitions": 1},
                         timeout=30).status_code == 201
    _publish(url, topic, 0, 300)
    _until(lambda: _hot_entries(cluster, topic, 1) == 0)


async def _frames_until(ws: aiohttp.ClientWebSocketResponse, kind: str,
                        value: int | None = None, ack: bool = False) -> list[dict[str, Any]]:
    """Frames until one of ``kind`` (with ``value``), each message acked with ``ack``."""
    frames: list[dict[str, Any]] = []
    while True:
        frame = await ws.receive_json(timeout=20)
        frames.append(frame)
        if ack and frame["type"] == "message":
            await ws.send_json({"type": "ack", "messages": [
                {"partition": frame["partition"], "offset": frame["offset"]}]})
        if frame["type"] == kind and (value is None or frame["value"]["n"] == value):
            return frames


async def test_readers_from_the_start_see_the_archive_before_what_follows(
        archiving_gateway: str, redis_cluster: RedisClusterProcess) -> None:
    url = archiving_gateway
    topic = f"arch-{uuid.uuid4().hex[:8]}"
    await asyncio.to_thread(_archived, url, redis_cluster, topic)
    async with aiohttp.ClientSession(url) as session:
        # a new group reads the archive through its catch-up stream, acking as it goes...
        async with session.ws_connect("/v1/subscribe", params={
                "topic": topic, "group": "late", "max_in_flight": "50"}) as ws:
            frames = await _frames_until(ws, "message", 299, ack=True)
            # ...then what comes next, from the log
            await asyncio.to_thread(_publish, url, topic, 300, 5)
            frames += await _frames_until(ws, "message", 304, ack=True)
        assert "gap" not in [f["type"] for f in frames]
        assert [f["value"]["n"] for f in frames if f["type"] == "message"] == list(range(305))
        assert sorted(await asyncio.to_thread(_pull, url, topic, "pulled")) == list(range(305))
        async with session.ws_connect("/v1/subscribe", params={"topic": topic,
                                                               "from": "earliest"}) as ws:
            frames = await _frames_until(ws, "message", 304)
        assert [f["type"] for f in frames] == ["assignment", *["message"] * 305]
        assert [f["value"]["n"] for f in frames[1:]] == list(range(305))
