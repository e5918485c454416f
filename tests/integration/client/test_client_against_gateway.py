"""The Python client against a real gateway over the session's Redis Cluster and etcd."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import orjson
import pytest
from dropped_responses import DropFirstResponse
from typed_records import assert_typed

from streamgate_client import Admin, Consumer, Message, ProblemError, Producer


async def replay_everything(admin: Admin, topic: str, partitions: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    for partition in range(partitions):
        messages += await admin.replay_all(topic, partition)
    return messages


async def test_producer_writes_once_when_a_response_is_lost(base_url: str, topic_name: str) -> None:
    drop = DropFirstResponse()
    async with Admin(base_url) as admin, aiohttp.ClientSession(middlewares=(drop,)) as session:
        await admin.create_topic(topic_name, 3)
        async with Producer(
            base_url, topic_name, acks="all", batch_size=200, session=session, transport="http"
        ) as producer:
            results = await producer.send_many(
                [{"key": f"k{i % 10}", "value": {"n": i}} for i in range(1000)]
            )
        stored = await replay_everything(admin, topic_name, 3)
    assert drop.dropped == 1
    # the retried batch (one lane's, at most 200) was answered from the dedup window
    assert 1 <= sum(r.duplicate for r in results) <= 200
    assert sorted(m["value"]["n"] for m in stored) == list(range(1000))
    assert {(r.partition, r.offset) for r in results} == {
        (m["partition"], m["offset"]) for m in stored
    }


async def test_admin_creates_lists_describes_and_deletes_a_topic(
    base_url: str, topic_name: str
) -> None:
    async with Admin(base_url) as admin:
        created = await admin.create_topic(topic_name, 2, max_length=1000)
        assert (created["name"], created["partitions"], created["max_length"]) == (
            topic_name, 2, 1000
        )
        with pytest.raises(ProblemError) as exists:
            await admin.create_topic(topic_name, 2)
        assert exists.value.status == 409
        assert exists.value.type.endswith("/topic-exists")
        assert topic_name in [t["name"] for t in await admin.list_topics()]
        described = await admin.describe_topic(topic_name)
        assert [d["partition"] for d in described["partition_details"]] == [0, 1]
        await admin.delete_topic(topic_name)
        with pytest.raises(ProblemError) as gone:
            await admin.describe_topic(topic_name)
        assert gone.value.status == 404


async def test_every_topic_call_returns_a_typed_record_of_the_document_sent(
        base_url: str, topic_name: str) -> None:
    compacted = f"{topic_name}-compacted"
    async with Admin(base_url) as admin, aiohttp.ClientSession() as session:
        created = await admin.create_topic(topic_name, 1, key_index=True)
        await admin.create_topic(compacted, 1, compact=True)
        for topic in (topic_name, compacted):
            async with Producer(base_url, topic) as producer:
                await producer.send_many([{"key": "k", "value": n} for n in range(3)])
        page = await admin.replay(topic_name, 0, from_="earliest")
        async with session.get(f"{base_url}/v1/topics/{topic_name}/partitions/0/messages",
                               params={"from": "earliest"}) as response:
            sent = await response.read()
        records = [created, page, *await admin.list_topics(),
                   await admin.describe_topic(topic_name), *await admin.replay_all(topic_name, 0),
                   history := await admin.key_history(topic_name, "k", newest_first=True),
                   await admin.snapshot_page(compacted, 0)]
        as_of, latest = await admin.snapshot(compacted, 0)
        position = await admin.key_position(topic_name, "k")
        records += [*latest, grown := await admin.grow_topic(topic_name, 2),
                    purged := await admin.purge(topic_name)]
        for topic in (topic_name, compacted):
            await admin.delete_topic(topic)
    for record in records:
        assert_typed(record)
    assert orjson.dumps(page) == orjson.dumps(orjson.loads(sent))  # every field, in its order
    assert (created.partitions, created.key_index, created.compact) == (1, True, False)
    assert [m.value for m in page.messages] == [0, 1, 2]
    assert position == history.messages[0].offset == page.messages[-1].offset
    assert ([(m.key, m.value) for m in latest], as_of) == ([("k", 2)], latest[0].offset)
    assert (grown.partitions, purged.topic, purged.purged) == (2, topic_name, 3)


async def test_replay_pages_through_a_partition_with_next_offset(
    base_url: str, topic_name: str
) -> None:
    async with Admin(base_url) as admin, Producer(base_url, topic_name) as producer:
        await admin.create_topic(topic_name, 1)
        await producer.send_many([{"value": i} for i in range(25)])
        first = await admin.replay(topic_name, 0, from_="earliest", limit=10)
        rest = await admin.replay_all(topic_name, 0, from_=first["next_offset"], page_size=7)
    assert [m["value"] for m in first["messages"] + rest] == list(range(25))


async def test_exclusive_consumer_receives_and_acks_everything(
    base_url: str, topic_name: str
) -> None:
    async with Admin(base_url) as admin, Producer(base_url, topic_name) as producer:
        await admin.create_topic(topic_name, 3)
        sent = await producer.send_many([{"key": f"k{i % 7}", "value": i} for i in range(300)])
    received: list[Message] = []
    async with Consumer(base_url, topic_name, group="billing", from_="earliest", max_in_flight=50,
                        ack_timeout_ms=2000) as consumer:
        async for message in consumer:
            received.append(message)
            await message.ack()
            if len(received) == 300:
                break
        assert consumer.assignment is not None
        assert consumer.assignment.partitions == (0, 1, 2)
    assert {(m.partition, m.offset) for m in received} == {(r.partition, r.offset) for r in sent}
    assert all(m.delivery_count == 1 for m in received)
    for partition in range(3):  # delivered in log order
        offsets = [tuple(map(int, m.offset.split("-"))) for m in received
                   if m.partition == partition]
        assert offsets == sorted(offsets)
    for key in {m.key for m in received}:  # written in send order, key by key
        values = [m.value for m in received if m.key == key]
        assert values == sorted(values)
    # Everything was acked: a new member of the group gets nothing, not even after the ack timeout.
    async with Consumer(base_url, topic_name, group="billing", ack_timeout_ms=500) as again:
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(anext(again), 2.0)


def drop_connection(consumer: Consumer) -> None:
    """Close the consumer's TCP connection under it (no close handshake), as a network failure
    would."""
    ws = consumer._ws
    assert ws is not None
    ws._writer.transport.abort()


async def test_broadcast_consumer_resumes_without_gap_or_duplicate(
        base_url: str, topic_name: str) -> None:
    async with Admin(base_url) as admin, Producer(base_url, topic_name) as producer:
        await admin.create_topic(topic_name, 3)
        await producer.send_many([{"key": f"k{i}", "value": i} for i in range(200)])
        received: list[Message] = []
        async with Consumer(base_url, topic_name, from_="earliest", max_in_flight=20,
                            backoff_base_s=0.05) as consumer:
            async for message in consumer:
                received.append(message)
                if len(received) == 50:
                    drop_connection(consumer)
                    await producer.send_many(
                        [{"key": f"k{i}", "value": i} for i in range(200, 300)]
                    )
                if len(received) == 300:
                    break
            assert consumer.connections == 2
        stored = await replay_everything(admin, topic_name, 3)
    refs = [(m.partition, m.offset) for m in received]
    assert len(set(refs)) == len(refs) == 300
    assert set(refs) == {(m["partition"], m["offset"]) for m in stored}
    assert sorted(m.value for m in received) == list(range(300))


async def test_a_broadcast_consumer_from_latest_sees_only_new_messages(
    base_url: str, topic_name: str
) -> None:
    async with Admin(base_url) as admin, Producer(base_url, topic_name) as producer:
        await admin.create_topic(topic_name, 2)
        await producer.send_many([{"value": "old"} for _ in range(10)])
        async with Consumer(base_url, topic_name) as consumer:
            await producer.send_many([{"value": n} for n in range(5)])
            got = [(await asyncio.wait_for(anext(consumer), 10)).value for _ in range(5)]
    assert sorted(got) == list(range(5))
