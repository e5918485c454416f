"""Producer: batching, idempotency keys and the retry policy, against a fake publish endpoint."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from streamgate_client import ConnectionFailed, ProblemError, Producer, RetryPolicy, SendResult
from streamgate_client.producer import encode_message


@dataclass
class FakeLog:
    """The fake gateway's partition log: one record per idempotency key (a message's own, else
    ``<Idempotency-Key header>:<index>``), like the real dedup."""

    records: dict[str, tuple[int, str, Any]] = field(default_factory=dict)
    requests: list[dict[str, Any]] = field(default_factory=list)
    fail_first: int = 0
    fail_status: int = 503
    retry_after: str | None = "0.2"
    stall_first: int = 0
    stall_s: float = 1.0
    problem: dict[str, Any] | None = None
    partitions: int | None = None  # what GET /v1/topics/{topic} says, or 404

    def write(self, message: dict[str, Any], key: str) -> dict[str, Any]:
        if key in self.records:
            partition, offset, _ = self.records[key]
            return {"partition": partition, "offset": offset, "duplicate": True}
        partition = message.get("partition", 0)
        offset = f"{len(self.records) + 1}-0"
        self.records[key] = (partition, offset, message.get("value", message.get("value_b64")))
        return {"partition": partition, "offset": offset, "duplicate": False}


async def start_fake(aiohttp_server: Any, log: FakeLog) -> TestServer:
    async def publish(request: web.Request) -> web.Response:
        body = orjson.loads(await request.read())
        log.requests.append(body)
        if log.problem is not None:
            return web.json_response(log.problem, status=log.problem["status"],
                                     content_type="application/problem+json")
        if len(log.requests) <= log.fail_first:
            headers = {"Retry-After": log.retry_after} if log.retry_after else {}
            return web.json_response(
                {
                    "status": log.fail_status, "title": "Service unavailable",
                    "detail": "redis is down"
                },
                status=log.fail_status,
                headers=headers,
            )
        # written before a possible stall: a lost answer
        batch_key = request.headers["Idempotency-Key"]
        results = [log.write(m, m.get("idempotency_key", f"{batch_key}:{i}"))
                   for i, m in enumerate(body["messages"])]
        if len(log.requests) <= log.fail_first + log.stall_first:
            await asyncio.sleep(log.stall_s)
        if body["acks"] == "0":
            return web.json_response({"accepted": len(results)}, status=202)
        return web.json_response({"results": results})

    async def describe(request: web.Request) -> web.Response:
        if log.partitions is None:
            return web.json_response({"status": 404, "title": "Not found"}, status=404)
        return web.json_response({"name": request.match_info["topic"],
                                  "partitions": log.partitions})

    app = web.Application()
    app.router.add_post("/v1/topics/{topic}/messages", publish)
    app.router.add_get("/v1/topics/{topic}", describe)
    server: TestServer = await aiohttp_server(app)
    return server


def url_of(server: TestServer) -> str:
    return str(server.make_url("")).rstrip("/")


async def send_many_to_fake(aiohttp_server: Any, log: FakeLog, messages: list[dict[str, Any]],
                            **options: Any) -> list[SendResult]:
    """``send_many`` of ``messages`` by a producer made with ``options``, against the fake."""
    server = await start_fake(aiohttp_server, log)
    async with Producer(url_of(server), "t", **options) as producer:
        return await producer.send_many(messages)


async def test_concurrent_sends_are_batched_up_to_batch_size(aiohttp_server: Any) -> None:
    log = FakeLog()
    server = await start_fake(aiohttp_server, log)
    async with Producer(url_of(server), "t", batch_size=100, max_in_flight=1) as producer:
        results = await asyncio.gather(*(producer.send_and_wait(value={"n": i})
                                         for i in range(1000)))
    assert [len(r["messages"]) for r in log.requests] == [100] * 10
    assert len({r.offset for r in results}) == 1000


async def test_a_lone_send_leaves_at_once_without_a_linger(aiohttp_server: Any) -> None:
    log = FakeLog(stall_first=1, stall_s=0.0)
    server = await start_fake(aiohttp_server, log)
    async with Producer(url_of(server), "t", linger_ms=0) as producer:
        future = await producer.send(value="hi")
        await asyncio.sleep(0.05)  # far less than any linger: it must be answered already
        assert future.done()
        assert (await future).offset == "1-0"


async def test_a_lone_send_goes_out_after_a_linger_when_one_is_set(aiohttp_server: Any) -> None:
    log = FakeLog()
    server = await start_fake(aiohttp_server, log)
    async with Producer(url_of(server), "t", linger_ms=100) as producer:
        started = time.monotonic()
        result = await producer.send_and_wait(value="hi", key="k", headers={"a": "b"},
                                              partition=0)
        elapsed = time.monotonic() - started
    assert 0.09 <= elapsed < 1.0
    assert result == SendResult(0, "1-0", False)
    assert log.requests[0]["messages"][0] == {
        "value": "hi", "key": "k", "headers": {"a": "b"}, "partition": 0}


async def test_sends_during_a_batch_gather_into_the_next(aiohttp_server: Any) -> None:
    log = FakeLog(stall_first=1, stall_s=0.3)
    server = await start_fake(aiohttp_server, log)
    async with Producer(url_of(server), "t", max_in_flight=1) as producer:
        first = await producer.send(value=0)
        await asyncio.sleep(0.1)  # the first request is in flight, stalled
        rest = [await producer.send(value=n) for n in range(1, 51)]
        await asyncio.gather(first, *rest)
    assert [len(r["messages"]) for r in log.requests] == [1, 50]


async def test_several_batches_are_in_flight_at_once(aiohttp_server: Any) -> None:
    log = FakeLog(stall_first=4, stall_s=0.3)
    server = await start_fake(aiohttp_server, log)
    async with Producer(url_of(server), "t", max_in_flight=4, batch_size=10) as producer:
        started = time.monotonic()
        await producer.send_many([{"value": n, "key": f"k{n}"} for n in range(400)])
        elapsed = time.monotonic() - started
    # four stalled requests waited side by side, not one after another
    assert elapsed < 4 * 0.3
    assert sum(len(r["messages"]) for r in log.requests) == 400


@pytest.mark.parametrize("fail_first", [1, 3])
async def test_key_order_holds_across_retries(aiohttp_server: Any, fail_first: int) -> None:
    log = FakeLog(fail_first=fail_first, retry_after="0.05")
    keys = [f"k{n % 10}" for n in range(300)]
    results = await send_many_to_fake(aiohttp_server, log, [{"value": n, "key": key}
                                                            for n, key in enumerate(keys)],
                                      max_in_flight=4, batch_size=7)
    assert len(log.records) == 300
    for key in set(keys):
        written = [int(r.offset.split("-")[0]) for r, k in zip(results, keys, strict=True)
                   if k == key and r.offset is not None]
        assert written == sorted(written), key


async def test_one_partition_topic_keeps_send_order(aiohttp_server: Any) -> None:
    log = FakeLog(fail_first=1, retry_after="0.05", partitions=1)
    messages = [{"value": n, "key": f"k{n % 5}" if n % 2 else None} for n in range(100)]
    results = await send_many_to_fake(aiohttp_server, log, messages, max_in_flight=4, batch_size=7)
    written = [int((r.offset or "").split("-")[0]) for r in results]
    assert written == sorted(written)
    assert len(log.records) == 100


async def test_send_waits_for_room_once_the_buffer_is_full(aiohttp_server: Any) -> None:
    log = FakeLog(stall_first=1, stall_s=0.3)
    server = await start_fake(aiohttp_server, log)
    async with Producer(url_of(server), "t", max_in_flight=1, max_batch_bytes=1000,
                        max_buffer_bytes=1000) as producer:
        first = await producer.send(value="x" * 1000)
        await asyncio.sleep(0.05)  # in flight, stalled, holding the whole buffer
        blocked = asyncio.ensure_future(producer.send(value="y"))
        await asyncio.sleep(0.1)
        assert not blocked.done()
        await first
        second = await asyncio.wait_for(blocked, 2)
        assert (await second).offset == "2-0"


async def test_every_batch_gets_a_distinct_idempotency_key(aiohttp_server: Any) -> None:
    log = FakeLog()
    server = await start_fake(aiohttp_server, log)
    async with Producer(url_of(server), "t", batch_size=2, max_in_flight=1) as first, \
            Producer(url_of(server), "t") as second:
        await first.send_many([{"value": i} for i in range(3)])
        await second.send_and_wait(value=3)
    assert sorted(log.records) == sorted([f"{first.producer_id}-1:0", f"{first.producer_id}-1:1",
                                          f"{first.producer_id}-2:0",
                                          f"{second.producer_id}-1:0"])
    assert first.producer_id != second.producer_id


async def test_503_is_retried_after_retry_after_without_duplicates(aiohttp_server: Any) -> None:
    log = FakeLog(fail_first=2, retry_after="0.2")
    server = await start_fake(aiohttp_server, log)
    started = time.monotonic()
    async with Producer(url_of(server), "t", batch_size=50, max_in_flight=1) as producer:
        results = await producer.send_many([{"value": i} for i in range(50)])
    assert time.monotonic() - started >= 0.4
    assert len(log.requests) == 3
    assert len(log.records) == 50
    assert [r.offset for r in results] == [f"{n}-0" for n in range(1, 51)]


async def test_429_is_retried(aiohttp_server: Any) -> None:
    log = FakeLog(fail_first=1, fail_status=429, retry_after="0")
    server = await start_fake(aiohttp_server, log)
    async with Producer(url_of(server), "t") as producer:
        assert (await producer.send_and_wait(value=1)).offset == "1-0"
    assert len(log.requests) == 2


async def test_a_timed_out_batch_is_retried_and_answered_as_duplicates(aiohttp_server: Any) -> None:
    log = FakeLog(stall_first=1, stall_s=2.0)
    results = await send_many_to_fake(aiohttp_server, log, [{"value": i} for i in range(20)],
                                      timeout_s=0.3, batch_size=20, max_in_flight=1)
    assert len(log.requests) == 2
    assert len(log.records) == 20  # the server wrote the first attempt; the retry wrote nothing new
    assert all(r.duplicate for r in results)
    assert sorted(r.offset or "" for r in results) == sorted(o for _, o, _ in log.records.values())


async def test_retries_stop_after_max_retries_with_the_last_problem(aiohttp_server: Any) -> None:
    log = FakeLog(fail_first=100, retry_after=None)
    server = await start_fake(aiohttp_server, log)
    async with Producer(url_of(server), "t", max_retries=2,
                        retry=RetryPolicy(max_retries=2, base_s=0.01)) as producer:
        with pytest.raises(ProblemError) as caught:
            await producer.send_and_wait(value=1)
    assert caught.value.status == 503
    assert caught.value.retriable
    assert len(log.requests) == 3


async def test_a_422_raises_a_typed_problem_at_once(aiohttp_server: Any) -> None:
    problem = {
        "type": "https://streamgate.dev/problems/invalid-field", "title": "Invalid field",
        "status": 422, "detail": "'partition' must be between 0 and 2",
        "pointer": "/messages/0/partition"
    }
    log = FakeLog(problem=problem)
    server = await start_fake(aiohttp_server, log)
    async with Producer(url_of(server), "t") as producer:
        with pytest.raises(ProblemError) as caught:
            await producer.send_and_wait(value=1, partition=9)
    error = caught.value
    assert (error.status, error.type, error.pointer) == (
        422, problem["type"], "/messages/0/partition"
    )
    assert error.detail == problem["detail"]
    assert not error.retriable
    assert len(log.requests) == 1


async def test_unreachable_gateway_raises_connection_failed() -> None:
    async with Producer(
        "http://127.0.0.1:1", "t", retry=RetryPolicy(max_retries=1, base_s=0.01)
    ) as producer:
        with pytest.raises(ConnectionFailed):
            await producer.send_and_wait(value=1)


async def test_acks_0_returns_no_offsets(aiohttp_server: Any) -> None:
    log = FakeLog()
    server = await start_fake(aiohttp_server, log)
    async with Producer(url_of(server), "t", acks="0") as producer:
        result = await producer.send_and_wait(value=1)
    assert result == SendResult(None, None, False)
    assert log.requests[0]["acks"] == "0"


async def test_bytes_values_are_sent_as_value_b64(aiohttp_server: Any) -> None:
    log = FakeLog()
    server = await start_fake(aiohttp_server, log)
    async with Producer(url_of(server), "t") as producer:
        await producer.send_and_wait(b"\x00\x01\x02")
        await producer.send_and_wait(value_b64=b"\xff")
    sent = [m for r in log.requests for m in r["messages"]]
    assert [m["value_b64"] for m in sent] == ["AAEC", "/w=="]
    assert all("value" not in m for m in sent)


async def test_flush_sends_the_open_batch_without_waiting_for_linger(aiohttp_server: Any) -> None:
    log = FakeLog()
    server = await start_fake(aiohttp_server, log)
    async with Producer(url_of(server), "t", linger_ms=10_000) as producer:
        pending = await producer.send(value=1)
        await asyncio.wait_for(producer.flush(), 2)
        assert pending.done()


def test_backoff_grows_is_capped_and_honours_retry_after() -> None:
    policy = RetryPolicy(max_retries=3, base_s=0.1, max_s=1.0)
    assert all(0 <= policy.delay_s(1) <= 0.1 for _ in range(100))
    assert all(0 <= policy.delay_s(10) <= 1.0 for _ in range(100))
    assert policy.delay_s(1, retry_after_s=3.0) == 3.0
    retriable = ProblemError(503, {})
    assert policy.should_retry(3, retriable)
    assert not policy.should_retry(4, retriable)
    assert not policy.should_retry(1, ProblemError(404, {}))
    assert policy.should_retry(1, ProblemError(408, {}))


async def test_concurrent_calls_of_one_key_are_written_in_call_order(aiohttp_server: Any) -> None:
    log = FakeLog(partitions=4)
    server = await start_fake(aiohttp_server, log)
    async with Producer(url_of(server), "t", batch_size=7, max_buffer_bytes=1) as producer:
        calls = [asyncio.ensure_future(producer.send_encoded(
            [encode_message(f"{call}-{n}", key="k") for n in range(20)], key="k"))
            for call in range(6)]
        calls.append(asyncio.ensure_future(producer.send_many(
            [{"value": f"6-{n}", "key": "k"} for n in range(20)])))
        results = [r for call in calls for r in await call]
    written = [m["value"] for r in log.requests for m in r["messages"]]
    assert written == [f"{call}-{n}" for call in range(7) for n in range(20)]
    assert [r.offset for r in results] == [f"{n}-0" for n in range(1, 141)]


async def test_busy_loop_still_sends_while_queueing(aiohttp_server: Any) -> None:
    log = FakeLog()
    server = await start_fake(aiohttp_server, log)
    async with Producer(url_of(server), "t", batch_size=10, max_in_flight=1) as producer:
        futures = [await producer.send(n) for n in range(100)]
        sent_while_queueing = len(log.requests)
        await producer.flush()
    assert sent_while_queueing >= 1
    assert [f.result().offset for f in futures] == [f"{n}-0" for n in range(1, 101)]


async def test_sends_queued_behind_send_and_wait_keep_order(aiohttp_server: Any) -> None:
    log = FakeLog(stall_first=1, stall_s=0.3)
    server = await start_fake(aiohttp_server, log)
    async with Producer(url_of(server), "t", max_in_flight=1) as producer:
        first = asyncio.ensure_future(producer.send_and_wait("a", key="k"))
        await asyncio.sleep(0.1)
        later = [await producer.send(value, key="k") for value in ("b", "c")]
        assert (await first).offset == "1-0"
        assert [(await f).offset for f in later] == ["2-0", "3-0"]
    assert [[m["value"] for m in r["messages"]] for r in log.requests] == [["a"], ["b", "c"]]
