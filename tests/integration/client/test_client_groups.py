"""Admin group calls (list, describe, seek) and dead-letter redrive against a real gateway."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from typed_records import assert_typed

from streamgate_client import Admin, Consumer, Message, ProblemError, Producer


async def consume(
    base_url: str, topic: str, group: str, count: int, **options: Any
) -> list[Message]:
    received: list[Message] = []
    async with Consumer(base_url, topic, group=group, **options) as consumer:
        while len(received) < count:
            message = await asyncio.wait_for(anext(consumer), 20)
            received.append(message)
            await message.ack()
    return received


async def wait_for_dead_letters(admin: Admin, dlq: str, count: int) -> None:
    for _ in range(200):
        try:
            if len(await admin.replay_all(dlq, 0)) >= count:
                return
        except ProblemError as exc:
            if exc.status != 404:  # the DLQ topic is created with its first dead letter
                raise
        await asyncio.sleep(0.1)
    raise AssertionError(f"{dlq} never got {count} dead letters")


async def test_groups_are_listed_described_and_seek_replays_them(
    base_url: str, topic_name: str
) -> None:
    async with Admin(base_url) as admin, Producer(base_url, topic_name) as producer:
        await admin.create_topic(topic_name, 2)
        await producer.send_many([{"key": f"k{i}", "value": i} for i in range(10)])
        first = await consume(base_url, topic_name, "audit", 10, from_="earliest")
        assert {"topic": topic_name, "group": "audit"} in await admin.list_groups()
        described = await admin.describe_group("audit", topic=topic_name)
        [on_topic] = described["topics"]
        assert on_topic["topic"] == topic_name
        assert sum(p["pending"] for p in on_topic["partitions"]) == 0
        sought = await admin.seek("audit", topic_name, "earliest")
        assert sought["positions"] == {"0": "earliest", "1": "earliest"}
        again = await consume(base_url, topic_name, "audit", 10)
        with pytest.raises(ProblemError) as missing:
            await admin.describe_group("nobody", topic=topic_name)
    assert sorted(m.value for m in first) == sorted(m.value for m in again) == list(range(10))
    assert missing.value.status == 404


async def test_dead_letters_are_redriven_to_their_topic(base_url: str, topic_name: str) -> None:
    async with Admin(base_url) as admin, Producer(base_url, topic_name) as producer:
        await admin.create_topic(topic_name, 1)
        await producer.send_many([{"value": i} for i in range(3)])
        async with Consumer(
            base_url, topic_name, group="fails", from_="earliest", max_deliveries=1
        ) as consumer:
            for _ in range(3):
                await (await asyncio.wait_for(anext(consumer), 20)).nack()
            await wait_for_dead_letters(admin, f"{topic_name}.dlq", 3)
        redriven = await admin.redrive(topic_name, max_messages=10)
        stored = await admin.replay_all(topic_name, 0)
    assert redriven == {"redriven": 3}
    assert [m["value"] for m in stored] == [0, 1, 2, 0, 1, 2]


async def parked_keys(admin: Admin, group: str, topic: str) -> list[tuple[str | None, str]]:
    """The group's parked keys and offsets, once it has some."""
    for _ in range(200):
        [on_topic] = (await admin.describe_group(group, topic=topic)).topics
        parked = [(k.key, k.offset) for p in on_topic.partitions for k in p.parked_keys or ()]
        if parked:
            return parked
        await asyncio.sleep(0.1)
    raise AssertionError(f"{group} never parked a key of {topic}")


async def test_group_calls_return_typed_records_and_settle_parked_keys(
        base_url: str, topic_name: str) -> None:
    async with Admin(base_url) as admin, Producer(base_url, topic_name) as producer:
        await admin.create_topic(topic_name, 1)
        failed = [await producer.send_and_wait(key, key=key) for key in ("poison-a", "poison-b")]
        async with Consumer(base_url, topic_name, group="typed", mode="key_shared",
                            from_="earliest", retry_backoff_ms=60_000) as consumer:
            for _ in failed:
                await (await asyncio.wait_for(anext(consumer), 20)).nack()
            parked = await parked_keys(admin, "typed", topic_name)
            described = await admin.describe_group("typed", topic=topic_name)
            released = await admin.settle_parked_key("typed", topic_name, 0, "poison-a")
            dead = await admin.settle_parked_key("typed", topic_name, 0, "poison-b",
                                                 dead_letter=True, reason="typed test")
            again = await asyncio.wait_for(anext(consumer), 20)
            await again.ack()
        await wait_for_dead_letters(admin, f"{topic_name}.dlq", 1)
        records = [described, released, dead, *await admin.list_groups(),
                   sought := await admin.seek("typed", topic_name, "latest"),
                   redriven := await admin.redrive(topic_name)]
    for record in records:
        assert_typed(record)
    assert sorted(parked) == [("poison-a", failed[0].offset), ("poison-b", failed[1].offset)]
    assert [(r.key, r.offset, r.action) for r in (released, dead)] == [
        ("poison-a", failed[0].offset, "release"), ("poison-b", failed[1].offset, "dead_letter")]
    assert (again.key, again.offset, again.delivery_count) == ("poison-a", failed[0].offset, 2)
    assert described.topics[0].members[0].member_id
    assert (sought.topic, redriven.redriven) == (topic_name, 1)
