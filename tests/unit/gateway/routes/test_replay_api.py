"""Replaying a partition over HTTP: from earliest, an offset, a time, latest; paging with
next_offset."""

from __future__ import annotations

import base64
from typing import Any

from aiohttp.test_utils import TestClient

Client = TestClient[Any, Any]


async def fill(client: Client, topic: str, count: int) -> list[str]:
    body = {"messages": [{"value": {"n": i}, "partition": 0, "key": "k", "headers": {"h": str(i)}}
                         for i in range(count)]}
    results = (
        await (await client.post(f"/v1/topics/{topic}/messages", json=body)).json()
    )["results"]
    return [r["offset"] for r in results]


async def replay(client: Client, topic: str, query: str) -> Any:
    return await client.get(f"/v1/topics/{topic}/partitions/0/messages?{query}")


async def test_replay_from_earliest_returns_messages_as_published(
    client: Client, orders: str
) -> None:
    offsets = await fill(client, orders, 3)
    body = await (await replay(client, orders, "from=earliest")).json()
    assert [m["offset"] for m in body["messages"]] == offsets
    first = body["messages"][0]
    assert first["value"] == {"n": 0}
    assert first["key"] == "k"
    assert first["headers"] == {"h": "0"}
    assert first["partition"] == 0
    assert first["timestamp_ms"] == int(offsets[0].split("-")[0])


async def test_paging_with_next_offset_visits_every_message_once(
    client: Client, orders: str
) -> None:
    offsets = await fill(client, orders, 25)
    seen: list[str] = []
    cursor = "earliest"
    for _ in range(10):
        body = await (await replay(client, orders, f"from={cursor}&limit=7")).json()
        seen += [m["offset"] for m in body["messages"]]
        cursor = body["next_offset"]
        if not body["messages"]:
            break
    assert seen == offsets


async def test_from_offset_is_inclusive(client: Client, orders: str) -> None:
    offsets = await fill(client, orders, 5)
    body = await (await replay(client, orders, f"from={offsets[2]}")).json()
    assert [m["offset"] for m in body["messages"]] == offsets[2:]


async def test_latest_returns_a_cursor_for_new_messages_only(client: Client, orders: str) -> None:
    await fill(client, orders, 3)
    body = await (await replay(client, orders, "from=latest")).json()
    assert body["messages"] == []
    newer = await fill(client, orders, 2)
    after = await (await replay(client, orders, f"from={body['next_offset']}")).json()
    assert [m["offset"] for m in after["messages"]] == newer


async def test_binary_values_come_back_base64(client: Client, orders: str) -> None:
    raw = b"\x00\xffbinary"
    await client.post(
        f"/v1/topics/{orders}/messages",
        json={"messages": [{"value_b64": base64.b64encode(raw).decode(), "partition": 0}]},
    )
    message = (await (await replay(client, orders, "")).json())["messages"][0]
    assert "value" not in message
    assert base64.b64decode(message["value_b64"]) == raw


async def test_from_time_ms_skips_older_messages(client: Client, orders: str) -> None:
    offsets = await fill(client, orders, 2)
    future = int(offsets[-1].split("-")[0]) + 1
    body = await (await replay(client, orders, f"from_time_ms={future}")).json()
    assert body["messages"] == []
    assert body["next_offset"] == f"{future}-0"
    old = await (await replay(client, orders, "from_time_ms=0")).json()
    assert len(old["messages"]) == 2


async def test_bad_replay_parameters_are_422(client: Client, orders: str) -> None:
    for query, pointer in (
        ("from=yesterday", "/from"), ("limit=0", "/limit"), ("limit=501", "/limit"),
        ("limit=ten", "/limit"), ("from=1-1&from_time_ms=5", "/from_time_ms")
    ):
        response = await replay(client, orders, query)
        assert response.status == 422, query
        assert (await response.json())["pointer"] == pointer, query


async def test_unknown_partition_is_404(client: Client, orders: str) -> None:
    response = await client.get(f"/v1/topics/{orders}/partitions/3/messages")
    assert response.status == 404
    assert (await response.json())["type"].endswith("/partition-not-found")
