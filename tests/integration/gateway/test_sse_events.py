"""``GET /v1/topics/{topic}/events`` on the real stack: a broadcast as Server-Sent Events whose ids
are resume cursors (a reconnect with Last-Event-ID loses and repeats nothing), gaps, heartbeats,
slow clients, auth, tenants and connection caps."""

from __future__ import annotations

import asyncio
import dataclasses
import socket
import time
import uuid
from pathlib import Path
from typing import Any

import aiohttp
import orjson
from aiohttp.test_utils import TestClient
from secured_stack import OUTSIDER, WRITER, as_tenant, secured_app
from subscribers import wait_until
from test_resume_gaps import published_offsets, trim_before

from gateway.app import create_app
from gateway.delivery.sse import SseStream
from gateway.routes.subscribe import close_sessions_on_shutdown
from gateway.services import SERVICES
from gateway.settings import GatewaySettings
from streamgate_devstack import RedisClusterProcess

Client = TestClient[Any, Any]
Event = dict[str, Any]  # "event", "id", "data" (parsed JSON) of one SSE event, or "comment"


class EventReader:
    """Reads a ``text/event-stream`` response event by event."""

    def __init__(self, response: aiohttp.ClientResponse, client: Client) -> None:
        self.response = response
        self.client = client
        self.retry_ms: int | None = None

    async def next(self, timeout_s: float = 10.0) -> Event | None:
        """The next event or comment; None at the end of the stream."""
        fields: Event = {}
        while True:
            line = await asyncio.wait_for(self.response.content.readline(), timeout_s)
            if not line:
                return None
            text = line.decode().rstrip("\n")
            if text == "":
                if fields:
                    return fields
                continue
            name, _, value = text.partition(":")
            value = value.removeprefix(" ")
            if name == "":
                return {"comment": value}
            if name == "retry":
                self.retry_ms = int(value)
                fields["retry"] = value
            elif name == "data":
                fields["data"] = orjson.loads(value)
            else:
                fields[name] = value

    async def events(self, count: int, kind: str = "message") -> list[Event]:
        """The next ``count`` events of ``kind``, with every other event kept before them."""
        got: list[Event] = []
        while sum(event.get("event") == kind for event in got) < count:
            event = await self.next()
            assert event is not None, f"the stream ended after {got}"
            if "event" in event:
                got.append(event)
        return got

    async def started(self) -> EventReader:
        """Past the ``retry`` line that starts every stream (the start positions are pinned)."""
        while self.retry_ms is None:
            event = await self.next()
            assert event is not None, "the stream ended before it started"
            assert "event" not in event, f"an event before the retry line: {event}"
        return self


async def open_stream(client: Client, topic: str, headers: dict[str, str] | None = None,
                      params: dict[str, str] | None = None) -> EventReader:
    response = await client.get(f"/v1/topics/{topic}/events", params=params, headers=headers)
    assert response.status == 200, await response.text()
    assert response.headers["Content-Type"] == "text/event-stream; charset=utf-8"
    assert response.headers["Cache-Control"] == "no-cache"
    assert response.headers["X-Accel-Buffering"] == "no"
    return await EventReader(response, client).started()


async def stream_from_latest(aiohttp_client: Any, gateway_settings: GatewaySettings, topic: str,
                             **settings: Any) -> EventReader:
    """A stream on a new one-partition topic of a gateway with these settings changed."""
    client: Client = await aiohttp_client(create_app(dataclasses.replace(gateway_settings,
                                                                         **settings)))
    await create(client, topic, 1)
    return await open_stream(client, topic)


async def create(client: Client, topic: str, partitions: int,
                 headers: dict[str, str] | None = None) -> None:
    response = await client.post("/v1/topics", json={"name": topic, "partitions": partitions},
                                 headers=headers)
    assert response.status == 201, await response.text()


async def publish(client: Client, topic: str, messages: list[dict[str, Any]],
                  headers: dict[str, str] | None = None) -> list[dict[str, Any]]:
    response = await client.post(f"/v1/topics/{topic}/messages",
                                 json={"acks": "all", "messages": messages}, headers=headers)
    assert response.status == 200, await response.text()
    results: list[dict[str, Any]] = (await response.json())["results"]
    return results


def parse_cursor(event_id: str) -> dict[int, str]:
    return {int(p): o for p, _, o in (part.partition(":") for part in event_id.split(","))}


def offset_order(offset: str) -> tuple[int, int]:
    ms, seq = offset.split("-")
    return int(ms), int(seq)


async def test_a_stream_from_earliest_resumes_with_last_event_id_without_gap_or_duplicate(
        gateway: Client, topic_name: str) -> None:
    await create(gateway, topic_name, 3)
    await publish(gateway, topic_name, [{"key": f"k{n % 7}", "value": n} for n in range(30)])
    reader = await open_stream(gateway, topic_name, params={"from": "earliest"})
    assert reader.retry_ms == 1000
    first = await reader.events(12)
    reader.response.close()
    messages = [event for event in first if event["event"] == "message"]
    assert len(messages) == 12
    for event in messages:  # each id is the cursor right after its message
        cursor = parse_cursor(event["id"])
        assert cursor[event["data"]["partition"]] == event["data"]["offset"]
    last_seen: dict[int, str] = {}
    for event in messages:  # in order per partition
        partition, offset = event["data"]["partition"], event["data"]["offset"]
        if partition in last_seen:
            assert offset_order(offset) > offset_order(last_seen[partition])
        last_seen[partition] = offset

    publishing = asyncio.create_task(publish(
        gateway, topic_name, [{"key": f"k{n % 7}", "value": n} for n in range(30, 60)]))
    response = await gateway.get(f"/v1/topics/{topic_name}/events",
                                 headers={"Last-Event-ID": messages[-1]["id"]})
    assert response.status == 200
    resumed = EventReader(response, gateway)
    await resumed.started()
    rest = await resumed.events(48)
    await publishing
    response.close()
    values = [e["data"]["value"] for e in messages + rest if e["event"] == "message"]
    assert sorted(values) == list(range(60)), "a gap or a duplicate across the resume"
    assert all(e["event"] == "message" for e in rest)


async def test_a_stream_from_latest_gets_only_what_is_published_after_it_starts(
        gateway: Client, topic_name: str) -> None:
    await create(gateway, topic_name, 2)
    await publish(gateway, topic_name, [{"value": "old"}] * 5)
    reader = await open_stream(gateway, topic_name)
    await publish(gateway, topic_name, [{"value": n} for n in range(4)])
    got = await reader.events(4)
    reader.response.close()
    assert sorted(e["data"]["value"] for e in got) == [0, 1, 2, 3]


async def test_a_stream_from_a_time_starts_at_the_first_message_of_that_time(
        gateway: Client, topic_name: str) -> None:
    await create(gateway, topic_name, 1)
    before = await publish(gateway, topic_name, [{"value": "before"}] * 3)
    last_before_ms = offset_order(before[-1]["offset"])[0]
    await asyncio.sleep(0.01)  # so that the next message gets a later millisecond
    after = await publish(gateway, topic_name, [{"value": n} for n in range(3)])
    assert offset_order(after[0]["offset"])[0] > last_before_ms
    reader = await open_stream(gateway, topic_name, params={
        "from_time_ms": str(offset_order(after[0]["offset"])[0])})
    got = await reader.events(3)
    reader.response.close()
    assert [e["data"]["value"] for e in got] == [0, 1, 2]


async def test_a_resume_of_a_stream_from_a_time_keeps_to_that_time_where_nothing_was_read(
        gateway: Client, topic_name: str) -> None:
    await create(gateway, topic_name, 2)
    old = await publish(gateway, topic_name, [{"value": "old", "partition": 1}] * 2)
    await asyncio.sleep(0.01)  # so that the next messages get a later millisecond
    new = await publish(gateway, topic_name, [{"value": n, "partition": 0} for n in range(3)])
    since_ms = offset_order(new[0]["offset"])[0]
    assert since_ms > offset_order(old[-1]["offset"])[0]
    reader = await open_stream(gateway, topic_name, params={"from_time_ms": str(since_ms)})
    [first] = await reader.events(1)
    reader.response.close()
    assert first["data"]["value"] == 0
    assert set(parse_cursor(first["id"])) == {0, 1}  # partition 1: right before the time

    resumed = await open_stream(gateway, topic_name, headers={"Last-Event-ID": first["id"]})
    await publish(gateway, topic_name, [{"value": "live", "partition": 1}])
    got = await resumed.events(3)
    resumed.response.close()
    messages = [e["data"] for e in got if e["event"] == "message"]
    assert [m["value"] for m in messages if m["partition"] == 0] == [1, 2]
    assert [m["value"] for m in messages if m["partition"] == 1] == ["live"]


async def test_a_header_filter_and_a_partitions_subset_narrow_the_stream(
        gateway: Client, topic_name: str) -> None:
    await create(gateway, topic_name, 3)
    await publish(gateway, topic_name, [
        {"value": n, "partition": n % 3, "headers": {"color": "red" if n % 2 else "blue"}}
        for n in range(30)])
    reader = await open_stream(gateway, topic_name, params={
        "from": "earliest", "filter": "color:red", "partitions": "1,2"})
    expected = [n for n in range(30) if n % 2 and n % 3 in (1, 2)]
    got = await reader.events(len(expected))
    reader.response.close()
    assert sorted(e["data"]["value"] for e in got) == expected
    assert set(parse_cursor(got[-1]["id"])) <= {1, 2}

    refused = await gateway.get(f"/v1/topics/{topic_name}/events", params={"partitions": "3"})
    assert refused.status == 422
    assert (await refused.json())["pointer"] == "/partitions"
    refused = await gateway.get(f"/v1/topics/{topic_name}/events", params={"from": "zz"})
    assert refused.status == 422
    assert (await refused.json())["pointer"] == "/from"


async def test_a_resume_past_retention_gets_the_gap_event_first(
        gateway: Client, redis_cluster: RedisClusterProcess) -> None:
    topic = f"gap-{uuid.uuid4().hex[:8]}"
    offsets = await published_offsets(gateway, topic, 10)
    trim_before(redis_cluster, topic, offsets[6])
    response = await gateway.get(f"/v1/topics/{topic}/events",
                                 headers={"Last-Event-ID": f"0:{offsets[2]}"})
    reader = await EventReader(response, gateway).started()
    got = await reader.events(4)
    response.close()
    assert [e["event"] for e in got] == ["gap", *["message"] * 4]
    assert got[0]["data"]["first_kept"] == offsets[6]
    assert [e["data"]["value"] for e in got[1:]] == [6, 7, 8, 9]


async def test_an_idle_stream_gets_heartbeat_comments(
        aiohttp_client: Any, gateway_settings: GatewaySettings, topic_name: str) -> None:
    reader = await stream_from_latest(aiohttp_client, gateway_settings, topic_name,
                                      sse_heartbeat_s=0.2)
    assert await reader.next() == {"comment": "ping"}
    reader.response.close()


async def test_a_gateway_drain_ends_the_stream_cleanly(gateway: Client, topic_name: str) -> None:
    await create(gateway, topic_name, 1)
    reader = await open_stream(gateway, topic_name)
    await close_sessions_on_shutdown(gateway.app)
    assert await reader.next() is None  # the end of the response: the browser reconnects


def never_reading_stream(host: str, port: int, path: str) -> socket.socket:
    """A raw HTTP client socket with a tiny receive buffer that sends its request and reads
    nothing."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect((host, port))
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
    return sock


def read_to_end(sock: socket.socket) -> bytes:
    sock.settimeout(20)
    chunks: list[bytes] = []
    while chunk := sock.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks)


def sse_events_of(raw: bytes) -> list[Event]:
    """The events of a raw chunked HTTP response (chunk framing removed)."""
    body = raw.partition(b"\r\n\r\n")[2]
    data = bytearray()
    while body:
        size_line, _, body = body.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            break
        data += body[:size]
        body = body[size + 2:]
    events: list[Event] = []
    for block in bytes(data).decode().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        if "event" in fields:
            events.append({**fields, "data": orjson.loads(fields["data"])})
    return events


async def test_a_client_that_never_reads_ends_with_the_slow_consumer_error_and_bounded_outbox(
        aiohttp_client: Any, gateway_settings: GatewaySettings, topic_name: str) -> None:
    bound = 256 * 1024
    settings = dataclasses.replace(gateway_settings, slow_client_timeout_s=1.0,
                                   ws_max_outbox_bytes=bound)
    client: Client = await aiohttp_client(create_app(settings))
    services = client.app[SERVICES]
    await create(client, topic_name, 2)
    pad = "v" * 100_000
    for start in range(0, 120, 20):
        await publish(client, topic_name, [{"value": {"n": n, "pad": pad}}
                                           for n in range(start, start + 20)])
    assert client.port is not None
    sock = await asyncio.to_thread(never_reading_stream, client.host, client.port,
                                   f"/v1/topics/{topic_name}/events?from=earliest")
    try:
        await wait_until(lambda: any(isinstance(s, SseStream) for s in services.subscriptions),
                         what="the stream to start")
        [stream] = [s for s in services.subscriptions if isinstance(s, SseStream)]
        session = stream.session
        assert session is not None
        largest = 0

        def ended() -> bool:
            nonlocal largest
            largest = max(largest, session.outbox_bytes)
            return stream not in services.subscriptions and not services.connections.open_count(
                "anonymous")

        await wait_until(ended, what="the slow client's stream to end")
        # past the bound by at most one message frame (a page always takes its first)
        assert largest <= bound + 101_000, largest
        raw = await asyncio.to_thread(read_to_end, sock)
    finally:
        sock.close()
    events = sse_events_of(raw)
    messages = [e for e in events if e["event"] == "message"]
    assert 0 < len(messages) < 120
    last = events[-1]
    assert last["event"] == "error", last
    assert last["data"]["code"] == "slow-consumer"
    assert last["data"]["cursor"] == messages[-1]["id"]


async def test_auth_401_403_and_tenants_see_only_their_own(
        aiohttp_client: Any, gateway_settings: GatewaySettings, tmp_path: Path) -> None:
    client = await secured_app(aiohttp_client, gateway_settings, tmp_path)
    topic = f"it-{uuid.uuid4().hex[:8]}"
    await create(client, topic, 1, WRITER)
    assert (await client.get(f"/v1/topics/{topic}/events")).status == 401
    forbidden = await client.get(f"/v1/topics/{topic}/events", headers=OUTSIDER)
    assert forbidden.status == 403
    assert (await forbidden.json())["type"].endswith("/forbidden")
    await publish(client, topic, [{"value": n, "headers": {"tenant": "ab"[n % 2]}}
                                  for n in range(10)], WRITER)
    reader = await open_stream(client, topic, as_tenant("b"), {"from": "earliest"})
    await publish(client, topic, [{"value": "last", "headers": {"tenant": "b"}}], WRITER)
    got: list[Event] = []
    while not got or got[-1]["data"]["value"] != "last":
        got.extend(await reader.events(1))
    reader.response.close()
    assert [e["data"]["value"] for e in got] == [1, 3, 5, 7, 9, "last"]


async def test_a_stream_past_the_principals_connection_cap_is_refused_with_429(
        aiohttp_client: Any, gateway_settings: GatewaySettings, topic_name: str) -> None:
    reader = await stream_from_latest(aiohttp_client, gateway_settings, topic_name,
                                      max_connections_per_principal=1)
    refused = await reader.client.get(f"/v1/topics/{topic_name}/events")
    assert refused.status == 429
    assert "Retry-After" in refused.headers
    assert (await refused.json())["type"].endswith("/too-many-connections")
    reader.response.close()


async def open_event_streams(client: Client) -> float:
    text = await (await client.get("/metrics")).text()
    line = next(line for line in text.splitlines() if line.startswith("streamgate_event_streams "))
    return float(line.split()[1])


async def test_open_streams_are_counted_while_they_last(gateway: Client, topic_name: str) -> None:
    await create(gateway, topic_name, 1)
    readers = [await open_stream(gateway, topic_name) for _ in range(2)]
    assert await open_event_streams(gateway) == 2
    for reader in readers:
        reader.response.close()
    deadline = time.monotonic() + 10
    while await open_event_streams(gateway) != 0:
        assert time.monotonic() < deadline, "closed streams still counted"
        await asyncio.sleep(0.05)
