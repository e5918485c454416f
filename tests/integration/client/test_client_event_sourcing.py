"""The Python client and the CLI on conditional appends and key history, against real gateways."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from dropped_responses import DropFirstResponse
from served import json_lines, streamgate

from streamgate_client import Admin, Consumer, Producer, UnexpectedOffset


async def test_read_model_loses_to_a_faster_writer(base_url: str, topic_name: str) -> None:
    async with Admin(base_url) as admin, Producer(base_url, topic_name, acks="all") as producer:
        await admin.create_topic(topic_name, 2, key_index=True)
        assert await admin.key_position(topic_name, "cart-1") == "none"
        (opened,) = await producer.send_conditional(
            [{"value": {"opened": True}, "key": "cart-1", "expected_offset": "none"}])
        position = await admin.key_position(topic_name, "cart-1")
        assert position == opened.offset
        await producer.send_conditional([{"value": {"added": "pear"}, "key": "cart-1",
                                          "expected_offset": position}])
        with pytest.raises(UnexpectedOffset) as lost:
            await producer.send_conditional([{"value": {"added": "fig"}, "key": "cart-1",
                                              "expected_offset": position}])
        assert lost.value.index == 0
        assert lost.value.expected == position
        assert lost.value.current == await admin.key_position(topic_name, "cart-1")
        page = await admin.key_history(topic_name, "cart-1")
        assert [m["value"] for m in page["messages"]] == [{"opened": True}, {"added": "pear"}]


async def test_lost_conditional_append_is_retried_as_duplicate(
        base_url: str, topic_name: str) -> None:
    drop = DropFirstResponse()
    async with Admin(base_url) as admin, aiohttp.ClientSession(middlewares=(drop,)) as session:
        await admin.create_topic(topic_name, 1, key_index=True)
        async with Producer(base_url, topic_name, session=session,
                            transport="http") as producer:
            (result,) = await producer.send_conditional(
                [{"value": 1, "key": "k", "expected_offset": "none"}])
        assert drop.dropped == 1
        assert result.duplicate
        page = await admin.key_history(topic_name, "k")
        assert [m["offset"] for m in page["messages"]] == [result.offset]


def test_history_prints_a_keys_messages_either_way(served_gateway: str, topic_name: str) -> None:
    async def publish() -> None:
        async with Admin(served_gateway) as admin, Producer(served_gateway,
                                                            topic_name) as producer:
            await admin.create_topic(topic_name, 3, key_index=True)
            await producer.send_many([{"value": n, "key": "ab"[n % 2]} for n in range(10)])

    asyncio.run(publish())
    done = streamgate("history", topic_name, "a", "--url", served_gateway)
    assert done.returncode == 0, done.stderr
    assert [m["value"] for m in json_lines(done.stdout)] == [0, 2, 4, 6, 8]
    done = streamgate("history", topic_name, "b", "--newest-first", "--max-messages", "2",
                      "--url", served_gateway)
    assert [m["value"] for m in json_lines(done.stdout)] == [9, 7]


async def test_snapshot_and_following_stream_give_each_key_once(
        base_url: str, topic_name: str) -> None:
    async with Admin(base_url) as admin, Producer(base_url, topic_name) as producer:
        await admin.create_topic(topic_name, 1, compact=True)
        await producer.send_many([{"value": n, "key": f"k{n % 10}"} for n in range(40)])
        as_of, messages = await admin.snapshot(topic_name, 0, page_size=3)
        assert {m["key"]: m["value"] for m in messages} == {f"k{n}": 30 + n for n in range(10)}
        await producer.send_and_wait(99, key="k0")
        async with Consumer(base_url, topic_name, from_=f"0:{as_of}") as consumer:
            async for message in consumer:
                assert (message.key, message.value) == ("k0", 99)
                break


def test_snapshot_prints_newest_values_and_a_cursor(served_gateway: str, topic_name: str) -> None:
    async def publish() -> None:
        async with Admin(served_gateway) as admin, Producer(served_gateway,
                                                            topic_name) as producer:
            await admin.create_topic(topic_name, 2, compact=True)
            await producer.send_many([{"value": n, "key": f"k{n % 4}"} for n in range(12)])

    asyncio.run(publish())
    done = streamgate("snapshot", topic_name, "--url", served_gateway)
    assert done.returncode == 0, done.stderr
    assert sorted(m["value"] for m in json_lines(done.stdout)) == [8, 9, 10, 11]
    assert done.stderr.startswith("as of 0:")
    assert ",1:" in done.stderr
