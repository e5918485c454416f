"""Hostile inputs against the real gateway (issue 6, item 6): malformed publish bodies, WebSocket abuse, bad params.

Hypothesis drives the generated cases, but ``@given`` cannot wrap an async test with function-scoped fixtures:
each test draws its cases with a ``@given``-decorated inner sync function (derandomized, no database), then
awaits every case against the gateway. Each test prints one summary line with the number of cases tried.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import json
import time
import uuid
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp.test_utils import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway import errors

Client = TestClient[Any, Any]

PARTITIONS = 4
MAX_KEY_BYTES = 4096  # GatewaySettings defaults (docs/api.md)
MAX_HEADERS = 64
MAX_HEADER_BYTES = 16 * 1024
MAX_VALUE_BYTES = 1024 * 1024
WS_MAX_FRAME_BYTES = 1024 * 1024
MAX_DELAY_MS = 366 * 24 * 3600 * 1000
WS_CLOSE_CODES = {value for name, value in vars(errors).items() if name.startswith("WS_CLOSE_")}
WS_MESSAGE_TOO_BIG = 1009  # RFC 6455: aiohttp's answer to a frame over max_msg_size


def draw_cases(strategy: st.SearchStrategy[Any], count: int) -> list[Any]:
    """``count`` deterministic examples of ``strategy`` (hypothesis may stop early when it runs out of ideas)."""
    drawn: list[Any] = []

    @settings(max_examples=count, database=None, deadline=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(strategy)
    def collect(case: Any) -> None:
        drawn.append(case)

    collect()
    return drawn


# ---------------------------------------------------------------------------------------------- strategies

SMALL_TEXT = st.text(max_size=20)
JSON_LEAVES = (st.none() | st.booleans() | st.integers(-(2**53), 2**53)
               | st.floats(allow_nan=False, allow_infinity=False) | SMALL_TEXT)
JSON_VALUES = st.recursive(JSON_LEAVES, lambda children: st.lists(children, max_size=4)
                           | st.dictionaries(SMALL_TEXT, children, max_size=4), max_leaves=12)
HEADERS = st.dictionaries(st.text(min_size=1, max_size=12), st.text(max_size=24), max_size=5)


@st.composite
def valid_messages(draw: st.DrawFn, with_idempotency: bool = True) -> dict[str, Any]:
    message: dict[str, Any] = {}
    if draw(st.booleans()):
        message["value"] = draw(JSON_VALUES)
    else:
        message["value_b64"] = base64.b64encode(draw(st.binary(max_size=64))).decode()
    if draw(st.booleans()):
        message["key"] = draw(st.text(min_size=1, max_size=40))
    if draw(st.booleans()):
        message["headers"] = draw(HEADERS)
    if draw(st.booleans()):
        message["partition"] = draw(st.integers(0, PARTITIONS - 1))
    if with_idempotency and draw(st.integers(0, 4)) == 0:
        message["idempotency_key"] = uuid.uuid4().hex
    return message


NOT_STRING = st.one_of(st.integers(), st.booleans(), st.floats(allow_nan=False), st.lists(st.integers(), max_size=3),
                       st.dictionaries(SMALL_TEXT, st.integers(), max_size=3))
NOT_INT = st.one_of(st.floats(allow_nan=False, allow_infinity=False), st.booleans(), SMALL_TEXT,
                    st.lists(st.integers(), max_size=2), st.dictionaries(SMALL_TEXT, st.integers(), max_size=2))
GARBAGE = st.recursive(st.none() | st.booleans() | st.integers() | SMALL_TEXT,
                       lambda c: st.lists(c, max_size=3) | st.dictionaries(SMALL_TEXT, c, max_size=3), max_leaves=8)
UNKNOWN_FIELD = st.text(min_size=1, max_size=16).filter(
    lambda f: f not in {"key", "value", "value_b64", "headers", "partition", "idempotency_key", "delay_ms",
                        "deliver_at_ms"})


@st.composite
def invalid_messages(draw: st.DrawFn) -> tuple[str, Any]:
    """(kind, a message that must be rejected)."""
    base = draw(valid_messages(with_idempotency=False))
    kind = draw(st.sampled_from([
        "no-value", "both-values", "value_b64-type", "value_b64-garbage", "key-type", "key-oversized",
        "headers-type", "header-value-type", "too-many-headers", "headers-oversized", "partition-negative",
        "partition-out-of-range", "partition-type", "partition-huge", "unknown-field", "delay-negative",
        "delay-too-long", "delay-type", "deliver-at-negative", "delay-and-deliver-at", "idempotency-type",
        "idempotency-empty", "idempotency-long", "not-an-object", "value-oversized"]))
    base.pop("value", None)
    base.pop("value_b64", None)
    base["value"] = draw(JSON_VALUES)
    if kind == "no-value":
        del base["value"]
    elif kind == "both-values":
        base["value_b64"] = "AAEC"
    elif kind == "value_b64-type":
        del base["value"]
        base["value_b64"] = draw(NOT_STRING | st.none())
    elif kind == "value_b64-garbage":
        del base["value"]
        base["value_b64"] = draw(st.sampled_from(["@@@", "A", "AAE", "not base64!", "AA==AA", "\u00e9\u00e9"]))
    elif kind == "key-type":
        base["key"] = draw(NOT_STRING)
    elif kind == "key-oversized":
        base["key"] = draw(st.sampled_from(["k", "\u00e9", "\U0001f600"])) * (MAX_KEY_BYTES + 1)
    elif kind == "headers-type":
        base["headers"] = draw(st.lists(SMALL_TEXT, max_size=3) | st.integers() | SMALL_TEXT | st.booleans())
    elif kind == "header-value-type":
        base["headers"] = {**draw(HEADERS), draw(st.text(min_size=1, max_size=8)): draw(NOT_STRING | st.none())}
    elif kind == "too-many-headers":
        base["headers"] = {f"h{i}": "v" for i in range(MAX_HEADERS + draw(st.integers(1, 50)))}
    elif kind == "headers-oversized":
        base["headers"] = {"big": "x" * (MAX_HEADER_BYTES + draw(st.integers(0, 1000)))}
    elif kind == "partition-negative":
        base["partition"] = draw(st.integers(max_value=-1))
    elif kind == "partition-out-of-range":
        base["partition"] = draw(st.integers(PARTITIONS, 2**63 - 1))
    elif kind == "partition-type":
        base["partition"] = draw(NOT_INT)
    elif kind == "partition-huge":
        base["partition"] = draw(st.integers(2**64, 10**40))
    elif kind == "unknown-field":
        base[draw(UNKNOWN_FIELD)] = draw(GARBAGE)
    elif kind == "delay-negative":
        base["delay_ms"] = draw(st.integers(max_value=-1))
    elif kind == "delay-too-long":
        base["delay_ms"] = draw(st.integers(MAX_DELAY_MS + 1, 10**30))
    elif kind == "delay-type":
        base["delay_ms"] = draw(NOT_INT)
    elif kind == "deliver-at-negative":
        base["deliver_at_ms"] = draw(st.integers(max_value=-1))
    elif kind == "delay-and-deliver-at":
        base["delay_ms"], base["deliver_at_ms"] = draw(st.integers(0, 1000)), int(time.time() * 1000)
    elif kind == "idempotency-type":
        base["idempotency_key"] = draw(NOT_STRING.filter(lambda v: v is not None))
    elif kind == "idempotency-empty":
        base["idempotency_key"] = ""
    elif kind == "idempotency-long":
        base["idempotency_key"] = "i" * draw(st.integers(257, 2000))
    elif kind == "not-an-object":
        base = draw(st.lists(GARBAGE, max_size=3) | st.integers() | SMALL_TEXT | st.none() | st.booleans())
    elif kind == "value-oversized":
        base["value"] = "v" * (MAX_VALUE_BYTES + 1)
    return kind, base


def _bigint_json(doc: Any) -> bytes:
    """JSON with integers of any size (orjson refuses integers past 64 bits)."""
    return json.dumps(doc).encode()


@st.composite
def hostile_bodies(draw: st.DrawFn) -> tuple[str, bytes]:
    """(kind, a raw request body that must be rejected with 4xx and write nothing)."""
    valid = draw(st.lists(valid_messages(), max_size=6))
    how = draw(st.sampled_from(["bad-message"] * 6 + [
        "non-utf8", "truncated", "top-level-type", "messages-type", "messages-empty", "acks", "body-field",
        "too-many-messages"]))
    acks = draw(st.sampled_from(["1", "all", "0", 1]))
    if how == "bad-message":
        kind, bad = draw(invalid_messages())
        messages = list(valid)
        messages.insert(draw(st.integers(0, len(messages))), bad)
        return f"message:{kind}", _bigint_json({"messages": messages, "acks": acks})
    if how == "top-level-type":
        return how, _bigint_json(draw(st.lists(GARBAGE, max_size=3) | st.integers() | SMALL_TEXT | st.none()))
    if how == "messages-type":
        return how, _bigint_json({"messages": draw(GARBAGE.filter(lambda g: not isinstance(g, list) or not g)),
                                  "acks": acks})
    if how == "messages-empty":
        return how, _bigint_json({"messages": [], "acks": acks})
    if how == "acks":
        bad_acks = draw(GARBAGE.filter(lambda a: a not in ("0", "1", "all", 0, 1) or isinstance(a, bool)))
        return how, _bigint_json({"messages": valid or [{"value": 1}], "acks": bad_acks})
    if how == "body-field":
        field = draw(st.text(min_size=1, max_size=12).filter(lambda f: f not in ("messages", "acks")))
        return how, _bigint_json({"messages": valid or [{"value": 1}], field: draw(GARBAGE)})
    if how == "too-many-messages":
        return how, _bigint_json({"messages": [{"value": i} for i in range(10_001)], "acks": acks})
    body = orjson.dumps({"messages": valid or [{"value": "x"}], "acks": acks})
    if how == "non-utf8":
        junk = draw(st.sampled_from([b"\xff", b"\xfe\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80"]))
        cut = body.index(b'"messages"') + 1  # inside the first string: a raw invalid byte in a JSON string
        return how, body[:cut] + junk + body[cut:]
    cut = draw(st.integers(0, len(body) - 1))
    return how, body[:cut]  # truncated


# ---------------------------------------------------------------------------------------------- helpers

async def create_topic(client: Client, name: str, partitions: int = PARTITIONS) -> None:
    response = await client.post("/v1/topics", json={"name": name, "partitions": partitions})
    assert response.status == 201, await response.text()


async def lengths(client: Client, topic: str) -> list[int]:
    response = await client.get(f"/v1/topics/{topic}")
    assert response.status == 200, await response.text()
    return [d["length"] for d in (await response.json())["partition_details"]]


def stored_counts(redis_cluster: Any, topic: str) -> tuple[int, int]:
    """(stream entries, scheduled entries) across every partition, read from Redis itself."""
    entries = scheduled = 0
    for partition in range(PARTITIONS):
        log_key, delayed_key = f"sg:{{{topic}/{partition}}}:log", f"sg:{{{topic}/{partition}}}:delayed"
        node = redis_cluster.primary_for_key(log_key).client()
        entries += int(node.xlen(log_key))
        scheduled += int(node.zcard(delayed_key))
    return entries, scheduled


async def assert_problem(response: aiohttp.ClientResponse, what: str) -> int:
    text = await response.text()
    assert 400 <= response.status < 500, f"{what}: {response.status} {text[:500]}"
    assert response.content_type == "application/problem+json", f"{what}: {response.content_type} {text[:300]}"
    doc = orjson.loads(text)
    assert isinstance(doc.get("detail"), str), f"{what}: {doc}"
    assert doc["detail"], f"{what}: {doc}"
    assert doc.get("status") == response.status
    return response.status


async def receive_json(ws: aiohttp.ClientWebSocketResponse, wait_s: float = 5.0) -> dict[str, Any]:
    message = await ws.receive(timeout=wait_s)
    assert message.type is aiohttp.WSMsgType.TEXT, f"expected a text frame, got {message.type} {message.data!r}"
    frame: dict[str, Any] = orjson.loads(message.data)
    return frame


async def next_frame_of(ws: aiohttp.ClientWebSocketResponse, kind: str, wait_s: float = 10.0) -> dict[str, Any]:
    deadline = time.monotonic() + wait_s
    while True:
        frame = await receive_json(ws, max(0.1, deadline - time.monotonic()))
        if frame["type"] == kind:
            return frame


async def prove_alive(client: Client, topic: str) -> None:
    """The gateway still serves a publish and a fresh subscription that receives it."""
    ws = await client.ws_connect(f"/v1/subscribe?topic={topic}&mode=broadcast&from=latest")
    try:
        assert (await next_frame_of(ws, "assignment"))["partitions"] == list(range(PARTITIONS))
        marker = uuid.uuid4().hex
        response = await client.post(f"/v1/topics/{topic}/messages", json={"messages": [{"value": marker}]})
        assert response.status == 200, await response.text()
        assert (await next_frame_of(ws, "message"))["value"] == marker
    finally:
        await ws.close()
    assert (await client.get("/healthz")).status == 200


# ---------------------------------------------------------------------------------------------- 1. publish bodies

async def test_hostile_publish_bodies_are_rejected_and_write_nothing(
        gateway: Client, topic_name: str, redis_cluster: Any) -> None:
    await create_topic(gateway, topic_name)
    seed = await gateway.post(f"/v1/topics/{topic_name}/messages",
                              json={"messages": [{"value": i, "partition": i % PARTITIONS} for i in range(8)]})
    assert seed.status == 200
    cases = draw_cases(hostile_bodies(), 300)
    before_redis = stored_counts(redis_cluster, topic_name)
    before = await lengths(gateway, topic_name)
    statuses: collections.Counter[int] = collections.Counter()
    kinds: collections.Counter[str] = collections.Counter()
    for kind, body in cases:
        response = await gateway.post(f"/v1/topics/{topic_name}/messages", data=body,
                                      headers={"Content-Type": "application/json"})
        statuses[await assert_problem(response, f"{kind} {body[:200]!r}")] += 1
        kinds[kind.split(":")[0]] += 1
        assert await lengths(gateway, topic_name) == before, f"{kind} wrote something: {body[:300]!r}"
    await asyncio.sleep(0.3)  # an acks=0 batch would be written from the gateway's queue, after the response
    after_redis = stored_counts(redis_cluster, topic_name)
    assert await lengths(gateway, topic_name) == before
    assert after_redis == before_redis
    written = after_redis[0] + after_redis[1] - before_redis[0] - before_redis[1]
    print(f"\nhostile publish bodies: {len(cases)} tried, {sum(statuses.values())} rejected with 4xx "
          f"({dict(sorted(statuses.items()))}), {written} written; kinds {dict(kinds)}")


# ---------------------------------------------------------------------------------------------- 2. valid batches

def _canonical(message: dict[str, Any]) -> bytes:
    value = message.get("value") if "value" in message else {"b64": message["value_b64"]}
    return orjson.dumps([message.get("key"), value, message.get("headers") or {}], option=orjson.OPT_SORT_KEYS)


async def test_valid_random_batches_are_written_exactly(
        gateway: Client, topic_name: str, redis_cluster: Any) -> None:
    await create_topic(gateway, topic_name)
    batches = draw_cases(st.tuples(st.lists(valid_messages(with_idempotency=False), min_size=1, max_size=25),
                                   st.sampled_from(["1", "all"])), 60)
    sent: collections.Counter[bytes] = collections.Counter()
    total = 0
    for messages, acks in batches:
        response = await gateway.post(f"/v1/topics/{topic_name}/messages",
                                      json={"messages": messages, "acks": acks})
        assert response.status == 200, f"{await response.text()} for {messages!r}"
        results = (await response.json())["results"]
        assert len(results) == len(messages)
        for message, result in zip(messages, results, strict=True):
            if "partition" in message:
                assert result["partition"] == message["partition"]
            assert result["duplicate"] is False
        total += len(messages)
        sent.update(_canonical(m) for m in messages)
        assert sum(await lengths(gateway, topic_name)) == total
    assert stored_counts(redis_cluster, topic_name) == (total, 0)
    replayed: collections.Counter[bytes] = collections.Counter()
    for partition in range(PARTITIONS):
        start = "earliest"
        while True:
            page = await (await gateway.get(f"/v1/topics/{topic_name}/partitions/{partition}/messages"
                                            f"?limit=1000&from={start}")).json()
            replayed.update(_canonical(m) for m in page["messages"])
            if not page["messages"]:
                break
            start = page["next_offset"]
    assert replayed == sent
    print(f"\nvalid random batches: {len(batches)} batches, {total} messages sent, {total} written and replayed "
          f"identically")


# ---------------------------------------------------------------------------------------------- 3. WebSocket frames

WS_JUNK = st.one_of(
    st.text(max_size=60).map(lambda t: ("text", t)),
    st.binary(min_size=1, max_size=60).map(lambda b: ("binary", b)),
    GARBAGE.map(lambda g: ("text", json.dumps(g))),
    st.fixed_dictionaries({"type": st.text(max_size=10).filter(lambda t: t not in ("ack", "nack", "extend"))},
                          optional={"messages": GARBAGE}).map(lambda d: ("text", json.dumps(d))),
    st.fixed_dictionaries({"type": st.sampled_from(["ack", "nack", "extend"]),
                           "messages": GARBAGE}, optional={"delay_ms": GARBAGE}).map(
        lambda d: ("text", json.dumps(d))),
)


async def _send(ws: aiohttp.ClientWebSocketResponse, frame: tuple[str, Any]) -> None:
    kind, data = frame
    if kind == "binary":
        await ws.send_bytes(data)
    else:
        await ws.send_str(data)


async def _expect_error_or_documented_close(ws: aiohttp.ClientWebSocketResponse, what: str) -> str:
    """'error' if the frame got an error frame, 'closed:<code>' if the socket was closed with a known code."""
    message = await ws.receive(timeout=5)
    if message.type is aiohttp.WSMsgType.TEXT:
        frame = orjson.loads(message.data)
        assert frame["type"] == "error", f"{what}: {frame}"
        assert frame["code"] == "bad-frame", f"{what}: {frame}"
        return "error"
    assert message.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.CLOSING), \
        f"{what}: {message}"
    assert ws.close_code in WS_CLOSE_CODES | {WS_MESSAGE_TOO_BIG}, f"{what}: close code {ws.close_code}"
    return f"closed:{ws.close_code}"


async def test_malformed_websocket_frames_never_crash_the_gateway(gateway: Client, topic_name: str) -> None:
    await create_topic(gateway, topic_name)
    junk = draw_cases(WS_JUNK, 150)
    outcomes: collections.Counter[str] = collections.Counter()

    # Broadcast: every client frame is malformed (settling is for groups), so each gets an error frame.
    ws = await gateway.ws_connect(f"/v1/subscribe?topic={topic_name}&mode=broadcast")
    await next_frame_of(ws, "assignment")
    for frame in junk:
        if ws.closed:
            ws = await gateway.ws_connect(f"/v1/subscribe?topic={topic_name}&mode=broadcast")
            await next_frame_of(ws, "assignment")
        await _send(ws, frame)
        outcomes[await _expect_error_or_documented_close(ws, repr(frame)[:200])] += 1
    await ws.close()

    # Shared group: junk and acks/nacks/extends of offsets never delivered, then real delivery still works.
    group = f"g-{uuid.uuid4().hex[:6]}"
    ws = await gateway.ws_connect(f"/v1/subscribe?topic={topic_name}&group={group}&mode=shared")
    await next_frame_of(ws, "assignment")
    never = [{"partition": p, "offset": f"{1000 + i}-{i}"} for i, p in enumerate([0, 1, 2, 3, 99, -1, 2**40])]
    ghost_frames = [{"type": "ack", "messages": never}, {"type": "nack", "messages": never, "delay_ms": 0},
                    {"type": "extend", "messages": never},
                    {"type": "ack", "messages": [{"partition": 0, "offset": "not-an-offset"}]},
                    {"type": "ack", "messages": [{"partition": True, "offset": ""}]}]
    for ghost in ghost_frames:
        await ws.send_str(orjson.dumps(ghost).decode())
    for frame in junk[:40]:
        await _send(ws, frame)
    response = await gateway.post(f"/v1/topics/{topic_name}/messages", json={"messages": [{"value": "real"}]})
    assert response.status == 200
    delivered = await next_frame_of(ws, "message")
    assert delivered["value"] == "real"
    await ws.send_str(orjson.dumps({"type": "ack", "messages": [
        {"partition": delivered["partition"], "offset": delivered["offset"]}]}).decode())
    await ws.close()

    # A frame over ws_max_frame_bytes: the socket is closed (1009), the gateway goes on.
    ws = await gateway.ws_connect(f"/v1/subscribe?topic={topic_name}&mode=broadcast")
    await next_frame_of(ws, "assignment")
    await ws.send_str("x" * (WS_MAX_FRAME_BYTES + 1))
    huge = await _expect_error_or_documented_close(ws, "huge text frame")
    await ws.close()
    ws = await gateway.ws_connect(f"/v1/subscribe?topic={topic_name}&mode=broadcast")
    await next_frame_of(ws, "assignment")
    await ws.send_bytes(b"\0" * (WS_MAX_FRAME_BYTES + 1))
    huge_binary = await _expect_error_or_documented_close(ws, "huge binary frame")
    await ws.close()
    await prove_alive(gateway, topic_name)
    tried = len(junk) + len(ghost_frames) + 40 + 2
    print(f"\nhostile websocket frames: {tried} tried ({len(junk)} junk on broadcast -> {dict(outcomes)}; "
          f"{len(ghost_frames)} ghost settles + 40 junk on a shared group, delivery still fine; "
          f"huge text -> {huge}, huge binary -> {huge_binary}); gateway alive after")


async def test_websocket_flood_of_small_frames(gateway: Client, topic_name: str) -> None:
    await create_topic(gateway, topic_name)
    ws = await gateway.ws_connect(f"/v1/subscribe?topic={topic_name}&mode=broadcast")
    await next_frame_of(ws, "assignment")
    for i in range(1000):
        await ws.send_str("{" if i % 2 else f"junk {i}")
    errors_seen, closed = 0, None
    while errors_seen < 1000:
        message = await ws.receive(timeout=10)
        if message.type is not aiohttp.WSMsgType.TEXT:
            closed = ws.close_code
            assert closed in WS_CLOSE_CODES, f"flood closed the socket with {closed}"
            break
        assert orjson.loads(message.data)["type"] == "error"
        errors_seen += 1
    await ws.close()

    group = f"g-{uuid.uuid4().hex[:6]}"
    shared = await gateway.ws_connect(f"/v1/subscribe?topic={topic_name}&group={group}&mode=shared")
    await next_frame_of(shared, "assignment")
    ghost = orjson.dumps({"type": "ack", "messages": [{"partition": 0, "offset": "1-0"}]}).decode()
    for _ in range(1000):
        await shared.send_str(ghost)
    response = await gateway.post(f"/v1/topics/{topic_name}/messages", json={"messages": [{"value": "after"}]})
    assert response.status == 200
    assert (await next_frame_of(shared, "message"))["value"] == "after"
    await shared.close()
    await prove_alive(gateway, topic_name)
    print(f"\nwebsocket floods: 2000 small frames tried (1000 junk on broadcast -> {errors_seen} error frames, "
          f"closed={closed}; 1000 ghost acks on a shared group -> delivery still fine); gateway alive after")


# ---------------------------------------------------------------------------------------------- 4. params

LONG = "t" * 5000


def _param_cases(topic: str) -> list[tuple[str, str, Any]]:
    replay = f"/v1/topics/{topic}/partitions"
    cases: list[tuple[str, str, Any]] = []
    for p in ["-1", "abc", "4", "99999999999999999999999", "1.5", "0x1", "%20", "%F0%9F%98%80", "\u0669", "1e3",
              "00000000000000000000000000000000004", "%00"]:
        cases.append(("GET", f"{replay}/{p}/messages", None))
    for start in ["abc", "1-", "-1-0", "1--1", "99999999999999999999999-0", "1-99999999999999999999", "0x1-0",
                  "latest,earliest", "%00", "1-0-0", "\U0001f600", "1e3-0", ""]:
        cases.append(("GET", f"{replay}/0/messages?from={start}", None))
    for limit in ["0", "-1", "1001", "10" * 20, "abc", "1e3", "1.5", "", "%00", " 5"]:
        cases.append(("GET", f"{replay}/0/messages?limit={limit}", None))
    for ms in ["-5", "abc", "9" * 30, "1.5"]:
        cases.append(("GET", f"{replay}/0/messages?from_time_ms={ms}", None))
    cases.append(("GET", f"{replay}/0/messages?from_time_ms=5&from=1-0", None))
    for bad_topic in ["\u0442\u0435\u043c\u0430", "\U0001f600", "a" * 201, LONG, "a%2Fb", "a b", "%00",
                      "a*b"]:
        cases.append(("GET", f"/v1/topics/{bad_topic}", None))
        cases.append(("POST", f"/v1/topics/{bad_topic}/messages", {"messages": [{"value": 1}]}))
        cases.append(("GET", f"/v1/topics/{bad_topic}/partitions/0/messages", None))
        cases.append(("POST", "/v1/topics", {"name": bad_topic, "partitions": 1}))
        cases.append(("GET", f"/v1/subscribe?topic={bad_topic}", None))
    for bad in [0, -1, 5000, "3", 1.5, True, None, 10**30, [1]]:
        cases.append(("POST", "/v1/topics", {"name": f"{topic}-x", "partitions": bad}))
    sub = f"/v1/subscribe?topic={topic}"
    for query in ["&mode=bogus", "&group=a%20b", "&group=" + "g" * 201, "&mode=shared", "&group=g&mode=broadcast",
                  "&max_in_flight=-1", "&max_in_flight=0", "&max_in_flight=" + "9" * 30, "&ack_timeout_ms=abc",
                  "&max_deliveries=0", "&from=garbage", "&from=0:abc", "&from=x:1-0", "&from=-1:1-0",
                  "&from_time_ms=-1", "&group=g&from_time_ms=5", "&auto_ack=maybe", "&filter=nocolon",
                  "&from=0:1-0,,", "&filter=%00"]:
        cases.append(("GET", sub + query, None))
    cases.append(("GET", "/v1/subscribe", None))
    for to in ["nowhere", "9:1-0", "0:abc", "x:1-0", "-1:1-0", {"timestamp_ms": -1}, {"timestamp_ms": "1"}, 5, None,
               ["earliest"], "0:1-0,", "\u0669:1-0"]:
        cases.append(("POST", "/v1/groups/g1/seek", {"topic": topic, "to": to}))
    for group in ["a b", "g" * 201, "\U0001f600"]:
        cases.append(("POST", f"/v1/groups/{group}/seek", {"topic": topic, "to": "earliest"}))
    cases.append(("POST", "/v1/groups/g1/seek", {"topic": topic, "to": "earliest", "extra": 1}))
    cases.append(("POST", "/v1/groups/g1/seek", {"topic": "\u0442", "to": "earliest"}))
    return cases


# Python's str.isdigit() is true for superscripts and other "digits" that int() refuses: see the report.
UNICODE_DIGIT_CASES = [
    ("replay partition", "/v1/topics/{t}/partitions/%C2%B2/messages"),
    ("replay limit", "/v1/topics/{t}/partitions/0/messages?limit=%C2%B2"),
    ("replay from_time_ms", "/v1/topics/{t}/partitions/0/messages?from_time_ms=%C2%B2"),
    ("subscribe max_in_flight", "/v1/subscribe?topic={t}&max_in_flight=%C2%B2"),
    ("subscribe from cursor partition", "/v1/subscribe?topic={t}&from=%C2%B2:1-0"),
    ("group seek partition", "POST /v1/groups/g1/seek"),
]


async def test_malformed_params_are_4xx_never_5xx(gateway: Client, topic_name: str) -> None:
    await create_topic(gateway, topic_name)
    cases = _param_cases(topic_name)
    statuses: collections.Counter[int] = collections.Counter()
    for method, path, body in cases:
        response = await gateway.request(method, path, json=body) if body is not None \
            else await gateway.request(method, path)
        statuses[await assert_problem(response, f"{method} {path[:120]}")] += 1
    await prove_alive(gateway, topic_name)
    print(f"\nmalformed params: {len(cases)} tried, {sum(statuses.values())} rejected with 4xx "
          f"({dict(sorted(statuses.items()))}), 0 5xx")


@pytest.mark.parametrize(("what", "path"), UNICODE_DIGIT_CASES, ids=[c[0] for c in UNICODE_DIGIT_CASES])
async def test_unicode_superscript_digits_in_params_are_4xx(
        gateway: Client, topic_name: str, what: str, path: str) -> None:
    await create_topic(gateway, topic_name)
    if path.startswith("POST "):
        response = await gateway.post(path.removeprefix("POST "), json={"topic": topic_name, "to": "\u00b2:1-0"})
    else:
        response = await gateway.get(path.format(t=topic_name))
    await assert_problem(response, what)
