"""Producer over the publish WebSocket: ids, problems, resends after a close, the HTTP fallback and
the in-flight bound, against a small gateway that speaks the protocol on loopback."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import orjson
import pytest
from aiohttp import WSMsgType, web
from aiohttp.test_utils import TestServer

from streamgate_client import ConnectionFailed, ProblemError, Producer, SendResult
from streamgate_client.publish_socket import PublishNotOffered

TOO_MANY = "https://streamgate.dev/problems/too-many-in-flight"


@dataclass
class SocketGateway:
    """The fake's state across its connections: one record per message idempotency key
    (``<frame idempotency_key>:<index>``), every frame received, what each connection saw."""

    records: dict[str, tuple[str, Any]] = field(default_factory=dict)
    frames: list[dict[str, Any]] = field(default_factory=list)
    posts: list[dict[str, Any]] = field(default_factory=list)
    offer_socket: bool = True
    max_in_flight: int = 64
    max_frame_bytes: int = 1 << 20
    max_in_flight_bytes: int = 1 << 30
    hold: bool = False  # answers wait until max_in_flight frames do (or a pause), then reversed
    problems: list[tuple[dict[str, Any], float | None]] = field(default_factory=list)
    close_after: dict[int, int] = field(default_factory=dict)  # frame number -> close code
    refuse_with: int | None = None  # close code sent instead of ready
    silent: set[int] = field(default_factory=set)  # frame numbers written but never answered
    most_unanswered: int = 0
    most_unanswered_bytes: int = 0
    refused_in_flight: int = 0
    client_close_codes: list[int | None] = field(default_factory=list)
    upgrade_credentials: list[str | None] = field(default_factory=list)

    def answer(self, frame: dict[str, Any]) -> dict[str, Any]:
        """Write the frame's messages (or answer the next queued problem) and say so."""
        if self.problems:
            problem, retry_after = self.problems.pop(0)
            answer = {"type": "problem", "id": frame["id"], "problem": problem}
            return answer if retry_after is None else {**answer, "retry_after_s": retry_after}
        results = [self.write(f"{frame['idempotency_key']}:{i}", m)
                   for i, m in enumerate(frame["messages"])]
        return {"type": "published", "id": frame["id"], "results": results}

    def write(self, key: str, message: dict[str, Any]) -> dict[str, Any]:
        duplicate = key in self.records
        if not duplicate:
            self.records[key] = (f"{len(self.records) + 1}-0", message["value"])
        return {"partition": 0, "offset": self.records[key][0], "duplicate": duplicate}

    def stored_values(self) -> list[Any]:
        return [value for _, value in self.records.values()]


async def serve_socket(gateway: SocketGateway, request: web.Request) -> web.WebSocketResponse:
    gateway.upgrade_credentials.append(request.headers.get("Authorization"))
    ws = web.WebSocketResponse()
    await ws.prepare(request)
    if gateway.refuse_with is not None:
        await ws.close(code=gateway.refuse_with, message=b"refused")
        return ws
    await ws.send_json({"type": "ready", "max_in_flight": gateway.max_in_flight,
                        "max_frame_bytes": gateway.max_frame_bytes,
                        "max_in_flight_bytes": gateway.max_in_flight_bytes})
    held: list[tuple[dict[str, Any], int]] = []
    while True:
        try:
            message = await ws.receive(timeout=0.05 if held else None)
        except TimeoutError:
            await answer_held(ws, held)
            continue
        if message.type is not WSMsgType.TEXT:
            break
        frame = orjson.loads(message.data)
        gateway.frames.append(frame)
        held_bytes = sum(size for _, size in held)
        if len(held) >= gateway.max_in_flight or (
                held and held_bytes + len(message.data) > gateway.max_in_flight_bytes):
            gateway.refused_in_flight += 1
            await ws.send_str(orjson.dumps({
                "type": "problem", "id": frame["id"], "retry_after_s": 1,
                "problem": {"type": TOO_MANY, "status": 429, "title": "Too many in flight"},
            }).decode())
            continue
        answer = gateway.answer(frame)
        if (code := gateway.close_after.get(len(gateway.frames))) is not None:
            await ws.close(code=code, message=b"going away")  # written, answer lost
            break
        if len(gateway.frames) in gateway.silent:
            continue
        held.append((answer, len(message.data)))
        gateway.most_unanswered = max(gateway.most_unanswered, len(held))
        gateway.most_unanswered_bytes = max(gateway.most_unanswered_bytes,
                                            held_bytes + len(message.data))
        if not gateway.hold or len(held) >= gateway.max_in_flight:
            await answer_held(ws, held)
    gateway.client_close_codes.append(ws.close_code)
    return ws


async def answer_held(ws: web.WebSocketResponse, held: list[tuple[dict[str, Any], int]]) -> None:
    """Send the held answers, the newest first: answers come in any order."""
    for answer, _ in reversed(held):
        await ws.send_str(orjson.dumps(answer).decode())
    held.clear()


async def start_gateway(aiohttp_server: Any, gateway: SocketGateway) -> str:
    async def publish(request: web.Request) -> web.Response:
        body = orjson.loads(await request.read())
        gateway.posts.append(body)
        key = request.headers["Idempotency-Key"]
        return web.json_response({"results": [gateway.write(f"{key}:{i}", m)
                                              for i, m in enumerate(body["messages"])]})

    async def describe(request: web.Request) -> web.Response:
        return web.json_response({"status": 404, "title": "Not found"}, status=404)

    async def socket(request: web.Request) -> web.WebSocketResponse:
        return await serve_socket(gateway, request)

    app = web.Application()
    app.router.add_post("/v1/topics/{topic}/messages", publish)
    app.router.add_get("/v1/topics/{topic}", describe)
    if gateway.offer_socket:
        app.router.add_get("/v1/publish", socket)
    server: TestServer = await aiohttp_server(app)
    return str(server.make_url("")).rstrip("/")


def keyed(count: int, keys: int) -> list[dict[str, Any]]:
    return [{"key": f"k{n % keys}", "value": {"n": n, "key": f"k{n % keys}"}}
            for n in range(count)]


async def send_many_over(aiohttp_server: Any, gateway: SocketGateway,
                         messages: list[dict[str, Any]], **options: Any
                         ) -> tuple[list[SendResult], int]:
    """``send_many`` by a producer made with ``options``: the results and the connections it
    opened."""
    url = await start_gateway(aiohttp_server, gateway)
    async with Producer(url, "orders", **options) as producer:
        results = await producer.send_many(messages)
        assert producer._socket is not None
        return results, producer._socket.connections


def offsets_match_values(gateway: SocketGateway, messages: list[dict[str, Any]],
                         results: list[SendResult]) -> bool:
    """Each result's offset is the record of the message it answers."""
    by_offset = {offset: value for offset, value in gateway.records.values()}
    return all(by_offset[r.offset] == m["value"]  # type: ignore[index]
               for m, r in zip(messages, results, strict=True))


async def test_batches_go_as_frames_on_one_socket_and_answers_find_their_frames(
    aiohttp_server: Any,
) -> None:
    gateway = SocketGateway(hold=True, max_in_flight=4)
    messages = keyed(400, 16)
    results, connections = await send_many_over(aiohttp_server, gateway, messages,
                                                batch_size=10, max_in_flight=4)
    assert (connections, gateway.posts) == (1, [])
    assert {(f["type"], f["topic"], f["acks"]) for f in gateway.frames} == {
        ("publish", "orders", "1")}
    assert len({f["id"] for f in gateway.frames}) == len(gateway.frames)
    assert offsets_match_values(gateway, messages, results)
    assert gateway.client_close_codes == [1000]


async def test_send_and_wait_answers_each_message_over_the_socket(aiohttp_server: Any) -> None:
    gateway = SocketGateway()
    url = await start_gateway(aiohttp_server, gateway)
    async with Producer(url, "t", transport="websocket") as producer:
        results = [await producer.send_and_wait({"n": n}, key="a") for n in range(20)]
    assert [r.offset for r in results] == [f"{n}-0" for n in range(1, 21)]
    assert gateway.stored_values() == [{"n": n} for n in range(20)]
    assert [f["idempotency_key"] for f in gateway.frames] == [
        f"{producer.producer_id}-{n}" for n in range(1, 21)]


async def test_a_problem_frame_raises_the_problem_error_http_would(aiohttp_server: Any) -> None:
    problem = {"type": "https://streamgate.dev/problems/invalid-message", "status": 422,
               "title": "Invalid message", "detail": "value is missing",
               "pointer": "/messages/0/value"}
    gateway = SocketGateway(problems=[(problem, None)])
    url = await start_gateway(aiohttp_server, gateway)
    async with Producer(url, "t") as producer:
        with pytest.raises(ProblemError) as raised:
            await producer.send_and_wait({"n": 1})
    assert (raised.value.status, raised.value.pointer, raised.value.retriable) == (
        422, "/messages/0/value", False)
    assert len(gateway.frames) == 1


async def test_a_503_problem_carries_retry_after_and_is_retried_under_the_same_key(
    aiohttp_server: Any,
) -> None:
    unavailable = {"status": 503, "title": "Service unavailable", "detail": "redis is down"}
    gateway = SocketGateway(problems=[(unavailable, 0.05), (unavailable, 2.5)])
    url = await start_gateway(aiohttp_server, gateway)
    async with Producer(url, "t", max_retries=1) as producer:
        with pytest.raises(ProblemError) as raised:
            await producer.send_and_wait({"n": 1})
        result = await producer.send_and_wait({"n": 2})
    assert (raised.value.status, raised.value.retry_after_s) == (503, 2.5)
    assert gateway.frames[0]["idempotency_key"] == gateway.frames[1]["idempotency_key"]
    assert (result.offset, gateway.stored_values()) == ("1-0", [{"n": 2}])


@pytest.mark.parametrize("code", [1001, 4503])
async def test_frames_unanswered_at_a_close_are_resent_in_order_without_duplicates(
    aiohttp_server: Any, code: int,
) -> None:
    gateway = SocketGateway(hold=True, max_in_flight=4, close_after={3: code, 9: code})
    messages = keyed(200, 8)
    results, connections = await send_many_over(aiohttp_server, gateway, messages,
                                                batch_size=5, max_in_flight=4)
    assert connections == 3
    assert sorted(gateway.stored_values(), key=lambda v: v["n"]) == [m["value"] for m in messages]
    for key in {m["key"] for m in messages}:
        ns = [v["n"] for v in gateway.stored_values() if v["key"] == key]
        assert ns == sorted(ns)
    lost = gateway.frames[2]["idempotency_key"]
    assert [f["idempotency_key"] for f in gateway.frames].count(lost) >= 2
    assert offsets_match_values(gateway, messages, results)


async def test_a_refused_connection_for_bad_credentials_is_not_retried(
    aiohttp_server: Any,
) -> None:
    gateway = SocketGateway(refuse_with=4401)
    url = await start_gateway(aiohttp_server, gateway)
    async with Producer(url, "t", token="expired") as producer:
        with pytest.raises(ProblemError) as raised:
            await producer.send_and_wait({"n": 1})
    assert (raised.value.status, raised.value.retriable) == (401, False)
    assert (gateway.upgrade_credentials, gateway.posts) == (["Bearer expired"], [])


async def test_auto_publishes_over_http_when_the_upgrade_answers_404(aiohttp_server: Any) -> None:
    gateway = SocketGateway(offer_socket=False)
    url = await start_gateway(aiohttp_server, gateway)
    async with Producer(url, "t") as producer:
        results = [await producer.send_and_wait({"n": n}) for n in range(3)]
        assert producer._socket is not None
        assert not producer._socket.offered
    assert [r.offset for r in results] == ["1-0", "2-0", "3-0"]
    assert len(gateway.posts) == 3


async def test_websocket_transport_fails_clearly_when_the_gateway_lacks_it(
    aiohttp_server: Any,
) -> None:
    gateway = SocketGateway(offer_socket=False)
    url = await start_gateway(aiohttp_server, gateway)
    async with Producer(url, "t", transport="websocket") as producer:
        with pytest.raises(PublishNotOffered, match="404"):
            await producer.send_and_wait({"n": 1})
    assert gateway.posts == []


async def test_an_aiohttp_the_take_over_does_not_know_publishes_over_http(
        aiohttp_server: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    def unknown_internals(*args: object, **kwargs: object) -> None:
        raise RuntimeError("this aiohttp keeps a WebSocket's connection otherwise")

    monkeypatch.setattr("streamgate_client.publish_socket.take_over", unknown_internals)
    gateway = SocketGateway()
    url = await start_gateway(aiohttp_server, gateway)
    async with Producer(url, "t") as producer:
        assert (await producer.send_and_wait({"n": 1})).offset == "1-0"
    async with Producer(url, "t", transport="websocket") as producer:
        with pytest.raises(RuntimeError, match="otherwise"):
            await producer.send_and_wait({"n": 2})
    assert (len(gateway.posts), gateway.frames) == (1, [])


async def test_http_transport_never_opens_the_socket(aiohttp_server: Any) -> None:
    gateway = SocketGateway()
    url = await start_gateway(aiohttp_server, gateway)
    async with Producer(url, "t", transport="http") as producer:
        await producer.send_and_wait({"n": 1})
    assert (len(gateway.posts), gateway.frames) == (1, [])


async def test_a_frame_larger_than_the_gateway_takes_goes_over_http(aiohttp_server: Any) -> None:
    gateway = SocketGateway(max_frame_bytes=300)
    url = await start_gateway(aiohttp_server, gateway)
    async with Producer(url, "t") as producer:
        await producer.send_and_wait({"n": 1})
        await producer.send_and_wait({"text": "x" * 400})
    assert [len(f["messages"]) for f in gateway.frames] == [1]
    assert [p["messages"][0]["value"] for p in gateway.posts] == [{"text": "x" * 400}]


async def test_no_more_frames_than_max_in_flight_await_their_answers(aiohttp_server: Any) -> None:
    gateway = SocketGateway(hold=True, max_in_flight=2)
    messages = keyed(300, 32)
    results, _ = await send_many_over(aiohttp_server, gateway, messages, batch_size=3,
                                      max_in_flight=8)
    assert (gateway.most_unanswered, gateway.refused_in_flight) == (2, 0)
    assert offsets_match_values(gateway, messages, results)


async def test_no_more_bytes_than_max_in_flight_bytes_await_their_answers(
    aiohttp_server: Any,
) -> None:
    gateway = SocketGateway(hold=True, max_in_flight=64, max_in_flight_bytes=1000)
    messages = [{"key": f"k{n % 16}", "value": {"n": n, "pad": "x" * 100}} for n in range(60)]
    results, _ = await send_many_over(aiohttp_server, gateway, messages, batch_size=3,
                                      max_in_flight=16)
    assert gateway.refused_in_flight == 0
    assert gateway.most_unanswered_bytes <= 1000
    assert gateway.most_unanswered >= 2
    assert offsets_match_values(gateway, messages, results)


async def test_an_unreachable_gateway_raises_connection_failed() -> None:
    async with Producer("http://127.0.0.1:9", "t", max_retries=1,
                        transport="websocket") as producer:
        with pytest.raises(ConnectionFailed):
            await producer.send_and_wait({"n": 1})


async def test_acks_0_frames_answer_without_offsets(aiohttp_server: Any) -> None:
    gateway = SocketGateway()
    url = await start_gateway(aiohttp_server, gateway)
    async with Producer(url, "t", acks="0") as producer:
        results = await asyncio.gather(*(producer.send_and_wait({"n": n}) for n in range(5)))
    assert {(r.partition, r.offset) for r in results} == {(None, None)}
    assert {f["acks"] for f in gateway.frames} == {"0"}


async def test_a_frame_left_unanswered_is_resent_on_a_new_socket_once_it_times_out(
    aiohttp_server: Any,
) -> None:
    gateway = SocketGateway(silent={2})
    url = await start_gateway(aiohttp_server, gateway)
    async with Producer(url, "t", timeout_s=0.2) as producer:
        results = [await producer.send_and_wait({"n": n}) for n in range(3)]
        assert producer._socket is not None
        assert producer._socket.connections == 2
    assert [r.duplicate for r in results] == [False, True, False]
    assert gateway.stored_values() == [{"n": 0}, {"n": 1}, {"n": 2}]
    assert gateway.frames[1]["idempotency_key"] == gateway.frames[2]["idempotency_key"]


@pytest.mark.parametrize(("compression", "deflated"), [(None, False), ("gzip", True)])
async def test_frames_are_deflated_only_when_compression_is_asked_for(
    aiohttp_server: Any, compression: Any, deflated: bool,
) -> None:
    gateway = SocketGateway()
    url = await start_gateway(aiohttp_server, gateway)
    async with Producer(url, "t", compression=compression) as producer:
        await producer.send_and_wait({"n": 1})
        assert producer._socket is not None
        connection = producer._socket._connection
        assert connection is not None
        assert bool(connection.ws.compress) is deflated
    assert gateway.stored_values() == [{"n": 1}]
