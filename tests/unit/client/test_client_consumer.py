"""Consumer: batched acks, reconnect-and-resume and close codes, against a scripted fake WebSocket
endpoint."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import orjson
import pytest
from aiohttp import WSMsgType, web
from aiohttp.test_utils import TestServer

from streamgate_client import Assignment, Consumer, ProblemError, SubscriptionClosed
from streamgate_client.cursors import (
    cursor_from_close_reason,
    format_cursor,
    merge_cursors,
    parse_cursor,
    retry_delay_from_close_reason,
)

Script = Callable[[web.WebSocketResponse, int], Awaitable[None]]


@dataclass
class FakeSubscribe:
    """Runs ``script`` for each connection; records queries and client frames."""

    script: Script
    queries: list[dict[str, str]] = field(default_factory=list)
    frames: list[dict[str, Any]] = field(default_factory=list)


def message(partition: int, offset: str, value: Any = None) -> dict[str, Any]:
    return {"type": "message", "topic": "t", "partition": partition, "offset": offset, "key": None,
            "value": value, "headers": {}, "timestamp_ms": 1, "delivery_count": 1}


async def start_fake(aiohttp_server: Any, fake: FakeSubscribe) -> str:
    async def subscribe(request: web.Request) -> web.StreamResponse:
        if request.query.get("topic") == "missing":
            return web.json_response(
                {"status": 404, "title": "Topic not found", "detail": "no topic 'missing'"},
                status=404, content_type="application/problem+json"
            )
        fake.queries.append(dict(request.query))
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        reader = asyncio.create_task(read(ws))
        await fake.script(ws, len(fake.queries))
        await asyncio.sleep(0.05)
        reader.cancel()
        if not ws.closed:
            await ws.close()
        return ws

    async def read(ws: web.WebSocketResponse) -> None:
        async for frame in ws:
            if frame.type is WSMsgType.TEXT:
                fake.frames.append(orjson.loads(frame.data))

    app = web.Application()
    app.router.add_get("/v1/subscribe", subscribe)
    server: TestServer = await aiohttp_server(app)
    return str(server.make_url("")).rstrip("/")


async def take(consumer: Consumer, n: int) -> list[Any]:
    got = []
    async for item in consumer:
        got.append(item)
        if len(got) == n:
            break
    return got


async def test_acks_within_the_linger_go_out_as_one_frame(aiohttp_server: Any) -> None:
    async def script(ws: web.WebSocketResponse, connection: int) -> None:
        await ws.send_json({"type": "assignment", "generation": 3, "partitions": [0, 1]})
        for n in range(5):
            await ws.send_json(message(n % 2, f"{n + 1}-0"))
        await asyncio.sleep(0.3)

    fake = FakeSubscribe(script)
    url = await start_fake(aiohttp_server, fake)
    async with Consumer(url, "t", group="g", ack_linger_ms=20) as consumer:
        for received in await take(consumer, 5):
            await received.ack()
        assert consumer.assignment == Assignment(3, (0, 1))
        await asyncio.sleep(0.1)
    assert fake.frames == [{"type": "ack", "messages": [{"partition": n % 2, "offset": f"{n + 1}-0"}
                                                        for n in range(5)]}]
    assert fake.queries[0] | {"max_in_flight": "x"} == {
        "topic": "t", "group": "g", "mode": "exclusive", "max_in_flight": "x", "batch": "true"
    }


def messages_frame(*docs: dict[str, Any]) -> dict[str, Any]:
    return {"type": "messages", "messages": [{k: v for k, v in d.items() if k != "type"} | {
        "type": "message"} for d in docs]}


async def test_batches_yield_together_and_one_ack_settles(aiohttp_server: Any) -> None:
    async def script(ws: web.WebSocketResponse, connection: int) -> None:
        await ws.send_json({"type": "assignment", "generation": 1, "partitions": [0, 1]})
        await ws.send_json(messages_frame(*(message(n % 2, f"{n + 1}-0", n) for n in range(5))))
        await ws.send_json(message(1, "6-0", 5))
        await ws.send_json(messages_frame(*(message(0, f"{n + 1}-0", n) for n in range(6, 9))))
        await asyncio.sleep(0.3)

    fake = FakeSubscribe(script)
    url = await start_fake(aiohttp_server, fake)
    seen: list[list[Any]] = []
    async with Consumer(url, "t", group="g", ack_linger_ms=20) as consumer:
        async for batch in consumer.batches(max_messages=4):
            seen.append([m.value for m in batch])
            await consumer.ack(batch)
            if sum(map(len, seen)) == 9:
                break
        await asyncio.sleep(0.1)
    assert seen[:2] == [[0, 1, 2, 3], [4]]
    assert [v for batch in seen for v in batch] == list(range(9))
    acked = [m for frame in fake.frames if frame["type"] == "ack" for m in frame["messages"]]
    assert [m["offset"] for m in acked] == [f"{n + 1}-0" for n in range(9)]
    assert len([f for f in fake.frames if f["type"] == "ack"]) <= 2


async def test_messages_frames_are_yielded_one_by_one_in_order(aiohttp_server: Any) -> None:
    async def script(ws: web.WebSocketResponse, connection: int) -> None:
        await ws.send_json(messages_frame(*(message(0, f"{n + 1}-0", n) for n in range(3))))
        await ws.send_json(message(0, "4-0", 3))
        await asyncio.sleep(0.3)

    url = await start_fake(aiohttp_server, FakeSubscribe(script))
    async with Consumer(url, "t", from_="earliest") as consumer:
        got = await take(consumer, 4)
        assert [m.value for m in got] == [0, 1, 2, 3]
        assert consumer.cursor == {0: "4-0"}


async def test_nack_and_extend_are_sent_with_their_own_frames(aiohttp_server: Any) -> None:
    async def script(ws: web.WebSocketResponse, connection: int) -> None:
        await ws.send_json({"type": "assignment", "generation": 0, "partitions": [0]})
        await ws.send_json(message(0, "1-0"))
        await ws.send_json(message(0, "2-0"))
        await asyncio.sleep(0.3)

    fake = FakeSubscribe(script)
    url = await start_fake(aiohttp_server, fake)
    async with Consumer(url, "t", group="g", mode="shared") as consumer:
        first, second = await take(consumer, 2)
        await first.nack(delay_ms=500)
        await second.extend()
        await asyncio.sleep(0.1)
    assert sorted(fake.frames, key=lambda f: str(f["type"])) == [
        {"type": "extend", "messages": [{"partition": 0, "offset": "2-0"}]},
        {"type": "nack", "messages": [{"partition": 0, "offset": "1-0"}], "delay_ms": 500}]


async def test_broadcast_resumes_from_the_cursor_a_4008_close_carries(aiohttp_server: Any) -> None:
    async def script(ws: web.WebSocketResponse, connection: int) -> None:
        if connection == 1:
            await ws.send_json(message(0, "5-0"))
            await ws.close(code=4008, message=b"slow consumer; from=0:5-0,1:7-0")
        else:
            await ws.send_json(message(1, "8-0"))
            await asyncio.sleep(0.3)

    fake = FakeSubscribe(script)
    url = await start_fake(aiohttp_server, fake)
    async with Consumer(url, "t", from_="earliest", backoff_base_s=0.01) as consumer:
        got = await take(consumer, 2)
    assert [(m.partition, m.offset) for m in got] == [(0, "5-0"), (1, "8-0")]
    assert fake.queries[0]["from"] == "earliest"
    assert fake.queries[1]["from"] == "0:5-0,1:7-0"
    assert fake.frames == []  # broadcast messages are never acked


async def test_broadcast_resumes_from_what_it_yielded(aiohttp_server: Any) -> None:
    async def script(ws: web.WebSocketResponse, connection: int) -> None:
        if connection == 1:
            await ws.send_json(message(2, "3-0"))
            await ws.send_json(message(0, "4-0"))
            await ws.close(code=1001)
        else:
            await ws.send_json(message(0, "9-0"))
            await asyncio.sleep(0.3)

    fake = FakeSubscribe(script)
    url = await start_fake(aiohttp_server, fake)
    async with Consumer(url, "t", from_="1:1-0", backoff_base_s=0.01) as consumer:
        await take(consumer, 3)
    assert fake.queries[0]["from"] == "1:1-0"
    assert fake.queries[1]["from"] == "0:4-0,1:1-0,2:3-0"


async def test_group_consumer_rejoins_after_4503(aiohttp_server: Any) -> None:
    async def script(ws: web.WebSocketResponse, connection: int) -> None:
        await ws.send_json(message(0, f"{connection}-0"))
        if connection == 1:
            await ws.close(code=4503, message=b"StorageUnavailable: down")
        else:
            await asyncio.sleep(0.3)

    fake = FakeSubscribe(script)
    url = await start_fake(aiohttp_server, fake)
    async with Consumer(
        url, "t", group="g", from_="earliest", filters=["tag:a,b"], backoff_base_s=0.01
    ) as c:
        got = await take(c, 2)
    assert [m.offset for m in got] == ["1-0", "2-0"]
    assert fake.queries[0] == fake.queries[1]
    assert fake.queries[0]["filter"] == "tag:a,b"


async def test_rate_limited_consumer_waits_then_rejoins(aiohttp_server: Any) -> None:
    closed_at: list[float] = []

    async def script(ws: web.WebSocketResponse, connection: int) -> None:
        if connection == 1:
            closed_at.append(asyncio.get_running_loop().time())
            await ws.close(code=4429, message=b"subscribes rate limit; retry in 0.4 s")
        else:
            closed_at.append(asyncio.get_running_loop().time())
            await ws.send_json(message(0, "1-0"))
            await asyncio.sleep(0.3)

    fake = FakeSubscribe(script)
    url = await start_fake(aiohttp_server, fake)
    async with Consumer(url, "t", group="g", backoff_base_s=0.01) as consumer:
        [got] = await take(consumer, 1)
    assert got.offset == "1-0"
    assert len(fake.queries) == 2
    assert closed_at[1] - closed_at[0] >= 0.4


def test_retry_delay_is_read_from_a_4429_close_reason() -> None:
    assert retry_delay_from_close_reason("connections; retry in 2.5 s") == 2.5
    assert retry_delay_from_close_reason("too many connections") == 1.0


@pytest.mark.parametrize("code", [4404, 4409])
async def test_topic_gone_and_group_conflict_raise(aiohttp_server: Any, code: int) -> None:
    async def script(ws: web.WebSocketResponse, connection: int) -> None:
        await ws.close(code=code, message=b"because")

    fake = FakeSubscribe(script)
    url = await start_fake(aiohttp_server, fake)
    async with Consumer(url, "t", group="g") as consumer:
        with pytest.raises(SubscriptionClosed) as caught:
            await anext(consumer)
    assert (caught.value.code, caught.value.reason) == (code, "because")
    assert len(fake.queries) == 1


async def test_a_refused_upgrade_raises_the_problem_document(aiohttp_server: Any) -> None:
    async def script(ws: web.WebSocketResponse, connection: int) -> None:
        raise AssertionError("never connects")

    url = await start_fake(aiohttp_server, FakeSubscribe(script))
    with pytest.raises(ProblemError) as caught:
        async with Consumer(url, "missing", group="g"):
            pass
    assert (caught.value.status, caught.value.detail) == (404, "no topic 'missing'")


async def test_binary_values_are_decoded_on_request(aiohttp_server: Any) -> None:
    async def script(ws: web.WebSocketResponse, connection: int) -> None:
        doc = message(0, "1-0")
        del doc["value"]
        await ws.send_json(doc | {"value_b64": "AAEC"})
        await asyncio.sleep(0.2)

    url = await start_fake(aiohttp_server, FakeSubscribe(script))
    async with Consumer(url, "t", from_="earliest") as consumer:
        received = await anext(consumer)
    assert received.value_bytes == b"\x00\x01\x02"
    assert received.to_dict()["value_b64"] == "AAEC"
    assert "value" not in received.to_dict()


def test_cursors_round_trip_and_merge_to_the_later_offset() -> None:
    assert parse_cursor(format_cursor({2: "3-0", 0: "10-1"})) == {0: "10-1", 2: "3-0"}
    assert format_cursor({2: "3-0", 0: "10-1"}) == "0:10-1,2:3-0"
    assert merge_cursors({0: "9-0", 1: "1-0"}, {0: "10-0", 1: "0-5", 2: "4-0"}) == {
        0: "10-0", 1: "1-0", 2: "4-0"
    }


def test_a_cut_short_close_reason_drops_its_last_cursor_entry() -> None:
    assert cursor_from_close_reason("slow consumer; from=0:1-0,1:2-0") == {0: "1-0", 1: "2-0"}
    long_reason = (
        "slow consumer; from=" + ",".join(f"{p}:1795418703164-{p}" for p in range(10))
    )[:123]
    cursor = cursor_from_close_reason(long_reason)
    assert cursor
    assert all(offset == f"1795418703164-{p}" for p, offset in cursor.items())
    assert cursor_from_close_reason("no cursor here") == {}


async def test_acks_for_half_the_credit_skip_the_linger(aiohttp_server: Any) -> None:
    async def script(ws: web.WebSocketResponse, connection: int) -> None:
        for n in range(4):
            await ws.send_json(message(0, f"{n + 1}-0"))
        await asyncio.sleep(0.6)

    fake = FakeSubscribe(script)
    url = await start_fake(aiohttp_server, fake)
    async with Consumer(url, "t", group="g", max_in_flight=4, ack_linger_ms=5000) as consumer:
        for received in await take(consumer, 2):
            await received.ack()
        await asyncio.sleep(0.2)
        assert fake.frames == [{"type": "ack", "messages": [
            {"partition": 0, "offset": "1-0"}, {"partition": 0, "offset": "2-0"}]}]
        await (await anext(consumer)).ack()  # below half: waits for the linger (or the close)
        await asyncio.sleep(0.2)
        assert len(fake.frames) == 1
