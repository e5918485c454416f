"""The archive tier under faults, while producers publish with acks=all and owners move entries into
segments every tenth of a second: kill -9 of a Redis primary, kill -9 of gateways that own
partitions. Afterwards every acknowledged message replays from the first offset exactly once, in
offset order, and the manifests' segments never overlap."""

from __future__ import annotations

import asyncio
import itertools
import time
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from archive_gateways import ARCHIVING, GatewayProcesses, gateways_env
from failure_cluster import WAIT_TIMEOUT_MS, WRITE_DEADLINE_S, create, log_key
from failure_traffic import GroupConsumer, Producers, duplicated, missing_acked, replay_topic

from gateway.app import create_app
from gateway.settings import GatewaySettings
from storage.archive.manifest import segment_refs, segments_key
from storage.codec import offset_key
from streamgate_devstack import EtcdProcess, RedisClusterProcess

PARTITIONS = 4


@pytest.fixture
async def gateways(redis_cluster: RedisClusterProcess, etcd_server: EtcdProcess,
                   tmp_path: Path) -> AsyncIterator[GatewayProcesses]:
    """Two ready gateway processes over the session's cluster, archiving into one path; stopped
    after the test."""
    processes = GatewayProcesses(gateways_env(redis_cluster, etcd_server, tmp_path / "archive"),
                                 2)
    try:
        await processes.start()
        yield processes
    finally:
        processes.stop()


def overlapping_segments(cluster: RedisClusterProcess, topic: str) -> list[str]:
    """Manifest entries of a partition that do not start after the one before them."""
    client = cluster.client()
    bad = []
    try:
        for partition in range(PARTITIONS):
            refs = segment_refs(client.xrange(segments_key(topic, partition)))
            for before, after in itertools.pairwise(refs):
                if offset_key(after.first_offset) <= offset_key(before.last_offset):
                    bad.append(f"{partition}: {before.name} / {after.name}")
    finally:
        client.close()
    return bad


def archived_entries(cluster: RedisClusterProcess, topic: str) -> int:
    client = cluster.client()
    try:
        return sum(ref.count for p in range(PARTITIONS)
                   for ref in segment_refs(client.xrange(segments_key(topic, p))))
    finally:
        client.close()


async def test_acked_messages_survive_a_primary_kill_during_moves(
        cluster_3x2: RedisClusterProcess, etcd_server: EtcdProcess, aiohttp_client: Any,
        tmp_path: Path, topic_name: str) -> None:
    settings = GatewaySettings(
        auth_mode="none", etcd_endpoints=(etcd_server.endpoint,),
        redis_nodes=tuple(f"{host}:{port}" for host, port in cluster_3x2.startup_nodes),
        etcd_prefix=f"/archfail-{uuid.uuid4().hex[:8]}/", wait_timeout_ms=WAIT_TIMEOUT_MS,
        redis_write_deadline_s=WRITE_DEADLINE_S, redis_read_deadline_s=WRITE_DEADLINE_S,
        archive_url=f"file://{tmp_path}/archive", **ARCHIVING)
    gateway = await aiohttp_client(create_app(settings))
    await create(gateway, topic_name, PARTITIONS)
    victim = cluster_3x2.primary_for_key(log_key(topic_name, 0))
    producers = Producers(gateway, topic_name, PARTITIONS, acks="all", deadline_s=WRITE_DEADLINE_S)
    producers.start()
    try:
        await asyncio.sleep(2.0)
        await asyncio.to_thread(victim.kill)
        await asyncio.sleep(8.0)  # failover, then moves on the promoted replica
    finally:
        await producers.finish()
    await asyncio.sleep(1.0)  # the last moves
    stored = await replay_topic(gateway, topic_name, PARTITIONS)
    assert producers.acked
    assert archived_entries(cluster_3x2, topic_name) > 0
    assert missing_acked(producers.acked, stored) == []
    assert duplicated(stored) == []
    assert overlapping_segments(cluster_3x2, topic_name) == []
    for entries in stored.values():
        offsets = [offset_key(offset) for offset, _ in entries]
        assert offsets == sorted(set(offsets))


async def until(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.2)


async def test_acked_messages_survive_owners_killed_during_moves(
        redis_cluster: RedisClusterProcess, gateways: GatewayProcesses) -> None:
    topic = f"archkill-{uuid.uuid4().hex[:8]}"
    async with aiohttp.ClientSession(gateways.url(0)) as session:
        await create(session, topic, PARTITIONS)
        producers = Producers(session, topic, PARTITIONS, acks="all",
                              deadline_s=WRITE_DEADLINE_S)
        producers.start()
        try:
            for _ in range(3):  # the second gateway dies mid-move, comes back, dies again
                await asyncio.sleep(1.5)
                gateways.kill(1)
                await gateways.restart(1)
        finally:
            await producers.finish()
        await asyncio.sleep(3.0)  # lease TTL: a killed owner's partitions move on
        stored = await replay_topic(session, topic, PARTITIONS)
    assert producers.acked
    assert archived_entries(redis_cluster, topic) > 0
    assert missing_acked(producers.acked, stored) == []
    assert duplicated(stored) == []
    assert overlapping_segments(redis_cluster, topic) == []


async def test_a_group_reading_the_archive_survives_its_gateway_killed(
        redis_cluster: RedisClusterProcess, gateways: GatewayProcesses) -> None:
    """An exclusive group created from the first offset once most of the topic is archived: the
    gateway serving half its partitions is killed mid catch-up; the other takes them over from
    the catch-up streams' pending lists and the group gets every acknowledged message."""
    topic = f"archlate-{uuid.uuid4().hex[:8]}"
    async with aiohttp.ClientSession(gateways.url(0)) as first, \
            aiohttp.ClientSession(gateways.url(1)) as second:
        await create(first, topic, PARTITIONS)
        producers = Producers(first, topic, PARTITIONS, acks="all", deadline_s=WRITE_DEADLINE_S)
        producers.start()
        await asyncio.sleep(3.0)
        await producers.finish()
        acked = set(producers.acked)
        await until(lambda: archived_entries(redis_cluster, topic) >= len(acked) * 3 // 4,
                    30, "the archive never took most of the topic")
        members = [await GroupConsumer.join(session, topic, "late")
                   for session in (first, second)]
        await until(lambda: sum(members[1].received.values()) >= 50, 30,
                    "the second gateway's member got nothing")
        gateways.kill(1)
        await until(lambda: acked <= set(members[0].received) | set(members[1].received),
                    60, "acknowledged messages never reached the group")
        for member in members:
            await member.close()
    assert len(acked) > 200
