"""kill -9 of a Redis primary while producers publish with acks=all: no acknowledged message is
lost."""

from __future__ import annotations

import asyncio
import time

from failure_cluster import WRITE_DEADLINE_S, GatewayFactory, create, log_key
from failure_traffic import Producers, duplicated, missing_acked, replay_topic

from streamgate_devstack import RedisClusterProcess, RedisNode
from streamgate_devstack.errors import DevStackError

PARTITIONS = 6
RESUME_TIMEOUT_S = 25.0
OWNER_VIEW_TIMEOUT_S = 10.0
HEALTHY_STALL_LIMIT_S = 1.0


def first_answer(
    producers: Producers, partitions: list[int], status: int, after: float
) -> float | None:
    """When the first request to `partitions` started after `after` answered `status` (None:
    never)."""
    times = [o.answered for o in producers.outcomes
             if o.status == status and o.partition in partitions and o.started > after]
    return min(times) if times else None


async def settled_owner(cluster: RedisClusterProcess, key: str) -> RedisNode:
    """The primary of ``key``'s slot once some live node's CLUSTER SHARDS names an online one: right
    after a failover, under load, every node's view may still lack it for a moment (gossip), though
    writes resumed."""
    deadline = time.monotonic() + OWNER_VIEW_TIMEOUT_S
    while True:
        try:
            return await asyncio.to_thread(cluster.primary_for_key, key)
        except DevStackError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)


async def wait_resumed(producers: Producers, partitions: list[int], since: float) -> float:
    """When every one of `partitions` has had a successful write that started after `since`."""
    deadline = time.monotonic() + RESUME_TIMEOUT_S
    while time.monotonic() < deadline:
        per_partition = [first_answer(producers, [p], 200, since) for p in partitions]
        if all(t is not None for t in per_partition):
            return max(t for t in per_partition if t is not None)
        await asyncio.sleep(0.05)
    raise AssertionError(f"writes to {partitions} did not resume within {RESUME_TIMEOUT_S}s: "
                         f"{producers.statuses()}")


async def test_acked_messages_survive_primary_kill_9_and_writes_resume(
        cluster_3x2: RedisClusterProcess, gateway_on: GatewayFactory, topic_name: str) -> None:
    cluster = cluster_3x2
    gateway = await gateway_on(cluster)
    await create(gateway, topic_name, PARTITIONS)
    victim = cluster.primary_for_key(log_key(topic_name, 0))
    affected = [
        p for p in range(PARTITIONS) if cluster.primary_for_key(log_key(topic_name, p)) is victim
    ]
    producers = Producers(gateway, topic_name, PARTITIONS, acks="all", deadline_s=WRITE_DEADLINE_S)
    producers.start()
    try:
        await asyncio.sleep(1.5)
        killed_at = time.monotonic()
        await asyncio.to_thread(victim.kill)
        resumed_at = await wait_resumed(producers, affected, killed_at)
        await asyncio.sleep(1.0)  # some steady traffic on the new primary too
    finally:
        await producers.finish()
    first_503 = first_answer(producers, affected, 503, killed_at - WRITE_DEADLINE_S)
    statuses = producers.statuses()
    healthy_worst = max(o.answered - o.started for o in producers.outcomes
                        if o.partition not in affected and o.started >= killed_at)
    print(
        f"\n[primary kill -9] affected partitions {affected} of {PARTITIONS}; first 503 after "
        f"{_since(first_503, killed_at)}; writes resumed after {resumed_at - killed_at:.2f}s; "
        f"other partitions' worst latency {healthy_worst:.2f}s; acked messages "
        f"{len(producers.acked)}; requests {dict(statuses)}"
    )

    assert producers.others() == [], "every request must answer 200 or 503 within its deadline"
    assert producers.bad_503s() == [], "a 503 must be problem+json with Retry-After"
    assert healthy_worst < HEALTHY_STALL_LIMIT_S, "a dead primary must not stall the other shards"
    assert await settled_owner(cluster, log_key(topic_name, 0)) is not victim

    await asyncio.to_thread(victim.restart)
    await asyncio.to_thread(cluster.wait_ready, 30)
    assert victim.role == "replica", "the old primary rejoins as a replica of its successor"
    stored = await replay_topic(gateway, topic_name, PARTITIONS)
    assert missing_acked(producers.acked, stored) == []
    assert duplicated(stored) == []


def _since(at: float | None, start: float) -> str:
    return "never" if at is None else f"{at - start:.2f}s"
