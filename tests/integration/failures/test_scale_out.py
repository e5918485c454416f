"""Adding a shard under load: slots migrate (MIGRATE, ASK/MOVED) while producers publish and a group
consumes."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections import Counter

from failure_cluster import WRITE_DEADLINE_S, Client, GatewayFactory, create, log_key
from failure_traffic import GroupConsumer, Producers, duplicated, missing_acked, replay_topic
from redis.crc import key_slot

from storage.codec import offset_key
from streamgate_devstack import RedisClusterProcess

PARTITIONS = 6
DELIVERY_TIMEOUT_S = 20.0
GROUP = "scale-out"
# `redis-cli --cluster rebalance` moves each source primary's lowest slots first;
# with 3 primaries created as 0-5460 / 5461-10922 / 10923-16383 the new primary
# receives about 0-1364, 5461-6826 and 10923-12287.
MOVING_SLOTS = (range(0, 1200), range(5461, 6700), range(10923, 12100))


def topic_with_moving_partitions() -> tuple[str, list[int]]:
    """A topic name with two partitions in slots the rebalance moves to the new primary.

    (Slots of one topic's partitions are related: CRC16 is linear, so the tags `<t>/0`..`<t>/5`
    differ by fixed XOR masks and cannot land in every moving range at once.)
    """
    for _ in range(100_000):
        name = f"scale-{uuid.uuid4().hex[:10]}"
        slots = [key_slot(log_key(name, p).encode()) for p in range(PARTITIONS)]
        moving = [p for p, slot in enumerate(slots) if any(slot in r for r in MOVING_SLOTS)]
        if len(moving) >= 2:
            return name, moving
    raise AssertionError("no topic name found")


async def wait_delivered(
    gateway: Client, consumer: GroupConsumer, acked: dict[str, tuple[int, str]]
) -> None:
    deadline = time.monotonic() + DELIVERY_TIMEOUT_S
    while time.monotonic() < deadline:
        if set(acked) <= set(consumer.received):
            break
        await asyncio.sleep(0.1)
    missing = set(acked) - set(consumer.received)
    if missing:
        per_partition = Counter(acked[v][0] for v in missing)
        first = {
            p: min((acked[v][1] for v in missing if acked[v][0] == p), key=offset_key)
            for p in per_partition
        }
        group = await (await gateway.get(f"/v1/groups/{GROUP}")).text()
        raise AssertionError(
            f"{len(missing)} acknowledged messages never delivered: per partition "
            f"{dict(per_partition)}, first missing offsets {first}; consumer errors "
            f"{consumer.errors}, close code {consumer.close_code}; group {group}"
        )


async def test_shard_added_under_load_keeps_every_acked_message(
        cluster_3x1: RedisClusterProcess, gateway_on: GatewayFactory) -> None:
    cluster = cluster_3x1
    topic, moving = topic_with_moving_partitions()
    gateway = await gateway_on(cluster)
    await create(gateway, topic, PARTITIONS)
    owners_before = {p: cluster.primary_for_key(log_key(topic, p)).port for p in range(PARTITIONS)}
    consumer = await GroupConsumer.join(gateway, topic, GROUP)
    producers = Producers(gateway, topic, PARTITIONS, acks="all", deadline_s=WRITE_DEADLINE_S,
                          per_partition=1, batch=2)
    producers.start()
    try:
        await asyncio.sleep(1.0)
        started = time.monotonic()
        new_primary = await asyncio.to_thread(cluster.add_shard)
        scale_out_s = time.monotonic() - started
        await asyncio.sleep(1.0)  # traffic on the new layout
    finally:
        await producers.finish()
    owners_after = {p: cluster.primary_for_key(log_key(topic, p)).port for p in range(PARTITIONS)}
    moved = sorted(p for p in range(PARTITIONS) if owners_after[p] != owners_before[p])
    print(f"\n[scale-out] add_shard took {scale_out_s:.2f}s; partitions moved {moved}; "
          f"acked {len(producers.acked)}; requests {dict(producers.statuses())}")

    assert cluster.shard_count == 4
    assert set(moving) <= set(moved)
    assert all(owners_after[p] == new_primary.port for p in moved)
    with new_primary.client() as conn:
        assert int(conn.execute_command(
            "CLUSTER", "COUNTKEYSINSLOT", key_slot(log_key(topic, moving[0]).encode()))) > 0
    layout = json.loads(cluster.layout_path.read_text())
    assert (layout["primaries"], len(layout["nodes"])) == (4, 8), (
        "a restart must keep the new shard"
    )
    assert producers.others() == [], "every request must answer 200 or 503 within its deadline"
    assert producers.bad_503s() == []

    stored = await replay_topic(gateway, topic, PARTITIONS)
    assert missing_acked(producers.acked, stored) == []
    assert duplicated(stored) == []
    try:
        waited = time.monotonic()
        await wait_delivered(gateway, consumer, producers.acked)
        print(
            f"[scale-out] consumer had every acked message {time.monotonic() - waited:.2f}s after "
            f"the replay; {sum(consumer.received.values()) - len(consumer.received)} redeliveries"
        )
    finally:
        await consumer.close()
