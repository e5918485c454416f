"""WebSocket subscriptions on the real cluster and etcd: every message delivered, in order where
promised."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from typing import Any

from aiohttp.test_utils import TestClient
from subscribers import Received, Subscriber, subscribe, wait_until

from partitioner.hashing import partition_for

Client = TestClient[Any, Any]


async def create(client: Client, name: str, partitions: int) -> None:
    response = await client.post("/v1/topics", json={"name": name, "partitions": partitions})
    assert response.status == 201, await response.text()


async def publish(
    client: Client, topic: str, messages: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = []
    for start in range(0, len(messages), 500):
        response = await client.post(f"/v1/topics/{topic}/messages",
                                     json={"messages": messages[start:start + 500], "acks": "1"})
        assert response.status == 200, await response.text()
        results += (await response.json())["results"]
    return results


def first_deliveries(subscribers: list[Subscriber]) -> list[Received]:
    everything = sorted((m for s in subscribers for m in s.messages), key=lambda m: m.at)
    seen: set[tuple[int, str]] = set()
    firsts = []
    for message in everything:
        if (message.partition, message.offset) not in seen:
            seen.add((message.partition, message.offset))
            firsts.append(message)
    return firsts


def offset_key(offset: str) -> tuple[int, int]:
    ms, seq = offset.split("-")
    return int(ms), int(seq)


def assert_no_partition_served_twice(subscribers: list[Subscriber]) -> None:
    """Within each generation, no partition is in two members' assignments."""
    by_generation: dict[int, dict[int, str]] = defaultdict(dict)
    for subscriber in subscribers:
        for generation, partitions, _ in subscriber.assignments:
            for partition in partitions:
                owner = by_generation[generation].setdefault(partition, subscriber.name)
                assert owner == subscriber.name, f"gen {generation}: partition {partition} " \
                                                 f"held by {owner} and {subscriber.name}"


IDLE_CLOCK_SLACK_S = 0.002


async def test_exclusive_group_keeps_key_order_across_a_crash(
        gateway: Client, topic_name: str) -> None:
    await create(gateway, topic_name, partitions=6)
    members = [await subscribe(gateway, f"m{i}", topic=topic_name, group="g", mode="exclusive",
                               max_in_flight=200) for i in range(3)]
    await wait_until(lambda: sorted(p for m in members for p in m.partitions) == list(range(6)),
                     what="6 partitions spread over 3 members")
    messages = [{"key": f"user-{i % 50}", "value": {"seq": i}} for i in range(10_000)]
    publishing = asyncio.create_task(publish(gateway, topic_name, messages))
    victim = members[1]
    await wait_until(lambda: len(victim.messages) >= 200, what="the victim to get messages")
    victim.auto = False  # it stops acking, then dies with un-acked messages
    await asyncio.sleep(0.2)
    await victim.ws.close()
    results = await publishing
    survivors = [members[0], members[2]]
    published = {(r["partition"], r["offset"]) for r in results}
    unacked_by_victim = {(m.partition, m.offset) for m in victim.messages if not m.acked}
    assert unacked_by_victim, "the victim should have died holding un-acked messages"
    await wait_until(lambda: published <= acked_by_someone(members), timeout_s=60,
                     what="every message delivered and acked")
    redelivered = {(m.partition, m.offset) for s in survivors for m in s.messages}
    assert unacked_by_victim <= redelivered, (
        "the dead member's un-acked messages were not redelivered"
    )
    per_key: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for message in first_deliveries(members):
        per_key[message.key or ""].append(offset_key(message.offset))
    assert all(offsets == sorted(offsets) for offsets in per_key.values()), "per-key order broken"
    assert_no_partition_served_twice(members)
    assert sorted(p for s in survivors for p in s.partitions) == list(range(6))
    for subscriber in survivors:
        await subscriber.close()


def acked_by_someone(members: list[Subscriber]) -> set[tuple[int, str]]:
    """Messages some member received and acked."""
    return {(m.partition, m.offset) for s in members for m in s.messages if m.acked}


async def test_shared_group_spreads_two_partitions_over_eight_members(
    gateway: Client, topic_name: str
) -> None:
    await create(gateway, topic_name, partitions=2)
    members = [await subscribe(gateway, f"s{i}", topic=topic_name, group="workers", mode="shared",
                               max_in_flight=5) for i in range(8)]
    await wait_until(
        lambda: all(m.partitions == [0, 1] for m in members), what="shared assignments"
    )
    results = await publish(gateway, topic_name, [{"value": i} for i in range(2000)])
    published = {(r["partition"], r["offset"]) for r in results}
    await wait_until(
        lambda: published <= {(m.partition, m.offset) for s in members for m in s.messages},
        timeout_s=30,
        what="all messages delivered",
    )
    counts = [len(m.messages) for m in members]
    assert all(count > 0 for count in counts), f"load not spread: {counts}"
    for member in members:
        await member.close()


async def test_unacked_message_is_redelivered_then_dead_lettered(
        gateway: Client, topic_name: str) -> None:
    await create(gateway, topic_name, partitions=1)
    member = await subscribe(gateway, "never-acks", auto=False, topic=topic_name, group="g",
                             ack_timeout_ms=300, max_deliveries=2)
    await wait_until(lambda: member.partitions == [0], what="assignment")
    [result] = await publish(gateway, topic_name, [{"value": "poison", "headers": {"tag": "x"}}])
    await wait_until(lambda: len(member.messages) >= 2, what="a redelivery")
    assert [m.delivery_count for m in member.messages[:2]] == [1, 2]
    # Not before the ack timeout; Redis counts idle time in whole milliseconds
    # (XPENDING IDLE on truncated clock readings), so 300 may be up to ~1 ms less of
    # real time between the two arrivals.
    assert member.messages[1].at - member.messages[0].at >= 0.3 - IDLE_CLOCK_SLACK_S
    dlq_page: dict[str, Any] = {}

    async def dead_lettered() -> bool:
        response = await gateway.get(f"/v1/topics/{topic_name}.dlq/partitions/0/messages")
        if response.status != 200:
            return False
        dlq_page.update(await response.json())
        return bool(dlq_page["messages"])

    for _ in range(100):
        if await dead_lettered():
            break
        await asyncio.sleep(0.1)
    [dead] = dlq_page["messages"]
    assert dead["value"] == "poison"
    assert dead["headers"]["sg-dlq-topic"] == topic_name
    assert dead["headers"]["sg-dlq-partition"] == "0"
    assert dead["headers"]["sg-dlq-offset"] == result["offset"]
    assert dead["headers"]["sg-dlq-delivery-count"] == "2"
    assert dead["headers"]["tag"] == "x"
    await asyncio.sleep(0.8)
    assert len(member.messages) == 2, "a dead-lettered message must not be delivered again"
    await member.close()


async def test_filter_delivers_matching_headers_and_acks_the_rest(
    gateway: Client, topic_name: str
) -> None:
    await create(gateway, topic_name, partitions=1)
    member = await subscribe(gateway, "filtered", topic=topic_name, group="g", filter=["tag:a,b"])
    await wait_until(lambda: member.partitions == [0], what="assignment")
    tags = ["a", "c", "b", None, "a"]
    await publish(gateway, topic_name, [{"value": i, **({"headers": {"tag": t}} if t else {})}
                                        for i, t in enumerate(tags)])
    await wait_until(lambda: len(member.messages) == 3, what="three matching messages")
    assert [m.value for m in member.messages] == [0, 2, 4]
    await asyncio.sleep(0.5)
    assert len(member.messages) == 3
    await member.close()


async def test_never_more_than_max_in_flight_unacked(gateway: Client, topic_name: str) -> None:
    await create(gateway, topic_name, partitions=2)
    member = await subscribe(
        gateway, "slow", auto=False, topic=topic_name, group="g", max_in_flight=5
    )
    await wait_until(lambda: member.partitions == [0, 1], what="assignment")
    await publish(gateway, topic_name, [{"value": i} for i in range(50)])
    await wait_until(lambda: len(member.messages) == 5, what="five deliveries")
    await asyncio.sleep(0.5)
    assert len(member.messages) == 5
    await member.ack([(m.partition, m.offset) for m in member.messages[:2]])
    await wait_until(lambda: len(member.messages) == 7, what="two more after two acks")
    await asyncio.sleep(0.5)
    assert len(member.messages) == 7
    await member.close()


async def test_member_giving_up_a_partition_keeps_its_window(
        gateway: Client, topic_name: str) -> None:
    await create(gateway, topic_name, partitions=2)
    key_of = {partition_for(f"user-{i}".encode(), 2): f"user-{i}" for i in range(20)}
    first = await subscribe(
        gateway, "first", auto=False, topic=topic_name, group="g", mode="exclusive",
        max_in_flight=10,
    )
    await wait_until(
        lambda: first.partitions == [0, 1], what="both partitions for the first member"
    )
    # five un-acked deliveries from each partition fill its window
    for expected, partition in ((5, 0), (10, 1)):
        await publish(
            gateway, topic_name, [{"key": key_of[partition], "value": i} for i in range(5)]
        )
        await wait_until(lambda n=expected: len(first.messages) == n, what="five more deliveries")
    await publish(gateway, topic_name, [{"key": key_of[i % 2], "value": i} for i in range(100)])
    second = await subscribe(gateway, "second", topic=topic_name, group="g", mode="exclusive")
    await wait_until(
        lambda: len(first.partitions) == 1 and len(second.partitions) == 1, what="a rebalance"
    )
    kept = first.partitions[0]
    # The five deliveries of the partition it gave up went back to the group with
    # their credit, so its window is all for the partition it kept (before, it stayed
    # five short for the life of the socket).
    await wait_until(lambda: sum(m.partition == kept for m in first.messages) == 10,
                     what="ten un-acked deliveries of the kept partition")
    await asyncio.sleep(0.3)
    assert sum(m.partition == kept for m in first.messages) == 10, "never more than max_in_flight"
    for member in (first, second):
        await member.close()


async def test_nack_with_delay_redelivers_after_the_delay(gateway: Client, topic_name: str) -> None:
    await create(gateway, topic_name, partitions=1)
    member = await subscribe(
        gateway, "nacker", auto=False, topic=topic_name, group="g", ack_timeout_ms=30_000
    )
    await wait_until(lambda: member.partitions == [0], what="assignment")
    await publish(gateway, topic_name, [{"value": "retry-me"}])
    await wait_until(lambda: len(member.messages) == 1, what="first delivery")
    first = member.messages[0]
    await member.nack([(first.partition, first.offset)], delay_ms=700)
    await wait_until(lambda: len(member.messages) == 2, timeout_s=10, what="redelivery after nack")
    second = member.messages[1]
    assert second.offset == first.offset
    assert second.delivery_count == 2
    assert 0.6 <= second.at - first.at < 5
    await member.close()


async def test_broadcast_resumes_from_cursor_without_gap_or_duplicate(
    gateway: Client, topic_name: str
) -> None:
    await create(gateway, topic_name, partitions=3)
    results = await publish(gateway, topic_name, [{"key": f"k{i}", "value": i} for i in range(300)])
    first = await subscribe(gateway, "b1", topic=topic_name, **{"from": "earliest"})
    await wait_until(lambda: len(first.messages) == 300, what="300 messages")
    await first.close()
    cursor = {}
    for message in first.messages:
        cursor[message.partition] = message.offset
    more = await publish(
        gateway, topic_name, [{"key": f"k{i}", "value": 300 + i} for i in range(150)]
    )
    resume = ",".join(f"{p}:{o}" for p, o in sorted(cursor.items()))
    second = await subscribe(gateway, "b2", topic=topic_name, **{"from": resume})
    await wait_until(lambda: len(second.messages) == 150, what="the 150 newer messages")
    await asyncio.sleep(0.3)
    assert sorted(m.value for m in second.messages) == list(range(300, 450))
    assert {(m.partition, m.offset) for m in second.messages} == {
        (r["partition"], r["offset"]) for r in more
    }
    assert len(results) == 300
    await second.close()


async def test_subscriptions_follow_added_partitions(gateway: Client, topic_name: str) -> None:
    await create(gateway, topic_name, partitions=1)
    watcher = await subscribe(gateway, "broadcast", topic=topic_name, mode="broadcast")
    worker = await subscribe(gateway, "shared", topic=topic_name, group="growers", mode="shared")
    await wait_until(
        lambda: watcher.partitions == [0] and worker.partitions == [0], what="first assignments"
    )
    response = await gateway.patch(f"/v1/topics/{topic_name}", json={"partitions": 3})
    assert response.status == 200, await response.text()
    await wait_until(
        lambda: watcher.partitions == [0, 1, 2] and worker.partitions == [0, 1, 2],
        timeout_s=10,
        what="assignments with the added partitions",
    )
    results = await publish(gateway, topic_name, [{"value": p, "partition": p} for p in (0, 1, 2)])
    published = {(r["partition"], r["offset"]) for r in results}
    for subscriber in (watcher, worker):
        await wait_until(
            lambda s=subscriber: published <= {(m.partition, m.offset) for m in s.messages},
            timeout_s=10,
            what=f"{subscriber.name} receiving every partition",
        )
        await subscriber.close()


async def test_batch_frames_keep_partition_order(gateway: Client, topic_name: str) -> None:
    await create(gateway, topic_name, partitions=2)
    results = await publish(gateway, topic_name,
                            [{"key": f"k{i % 7}", "value": i} for i in range(3000)])
    ws = await gateway.ws_connect("/v1/subscribe", params={
        "topic": topic_name, "group": "g", "batch": "true", "max_in_flight": "5000"})
    kinds: list[str] = []
    got: list[dict[str, Any]] = []
    while len(got) < len(results):
        frame = await ws.receive_json(timeout=10)
        kinds.append(frame["type"])
        if frame["type"] == "messages":
            assert all(m["type"] == "message" for m in frame["messages"])
            got += frame["messages"]
    await ws.send_json({"type": "ack", "messages": [{"partition": m["partition"],
                                                      "offset": m["offset"]} for m in got]})
    await ws.close()
    assert kinds[0] == "assignment"
    assert "message" not in kinds
    assert len(kinds) < len(got) / 10  # many messages per frame
    for partition in (0, 1):
        mine = [m["offset"] for m in got if m["partition"] == partition]
        assert mine == [r["offset"] for r in results if r["partition"] == partition]


async def test_non_boolean_batch_parameter_is_refused(gateway: Client, topic_name: str) -> None:
    await create(gateway, topic_name, partitions=1)
    response = await gateway.get("/v1/subscribe", params={"topic": topic_name, "batch": "yes"})
    assert response.status == 422
    assert (await response.json())["pointer"] == "/batch"
