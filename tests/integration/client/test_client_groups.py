"""Admin group calls (list, describe, seek) and dead-letter redrive against a real gateway."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from client import Admin, Consumer, Message, ProblemError, Producer


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
