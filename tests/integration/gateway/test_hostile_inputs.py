"""Hostile inputs against the real gateway: malformed publish bodies, WebSocket abuse, bad params.

Hypothesis drives the generated cases, but ``@given`` cannot wrap an async test with function-scoped
fixtures: each test draws its cases with a ``@given``-decorated inner sync function (derandomized,
no database), then awaits every case against the gateway. Each test prints one summary line with the
number of cases tried. The strategies live in ``hostile.py``; ``test_hostile_inputs_with_auth.py``
runs the same cases with auth on (every route: ``test_every_route_with_auth.py``).
"""

from __future__ import annotations

import asyncio
import collections
import json
import uuid
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp.test_utils import TestClient
from hostile import (
    GARBAGE,
    PARTITIONS,
    WS_CLOSE_CODES,
    WS_MAX_FRAME_BYTES,
    WS_MESSAGE_TOO_BIG,
    assert_problem,
    draw_cases,
    hostile_bodies,
    next_frame_of,
    stored_counts,
    valid_messages,
)
from hypothesis import strategies as st

Client = TestClient[Any, Any]


# ---------------------------------------------------------------------------- helpers

async def create_topic(client: Client, name: str, partitions: int = PARTITIONS) -> None:
    response = await client.post("/v1/topics", json={"name": name, "partitions": partitions})
    assert response.status == 201, await response.text()


async def lengths(client: Client, topic: str) -> list[int]:
    response = await client.get(f"/v1/topics/{topic}")
    assert response.status == 200, await response.text()
    return [d["length"] for d in (await response.json())["partition_details"]]


async def prove_alive(client: Client, topic: str) -> None:
    """The gateway still serves a publish and a fresh subscription that receives it."""
    ws = await client.ws_connect(f"/v1/subscribe?topic={topic}&mode=broadcast&from=latest")
    try:
        assert (await next_frame_of(ws, "assignment"))["partitions"] == list(range(PARTITIONS))
        marker = uuid.uuid4().hex
        response = await client.post(
            f"/v1/topics/{topic}/messages", json={"messages": [{"value": marker}]}
        )
        assert response.status == 200, await response.text()
        assert (await next_frame_of(ws, "message"))["value"] == marker
    finally:
        await ws.close()
    assert (await client.get("/healthz")).status == 200


# ---------------------------------------------------------------------------- 1. publish bodies

async def test_hostile_publish_bodies_are_rejected_and_write_nothing(
        gateway: Client, topic_name: str, redis_cluster: Any) -> None:
    await create_topic(gateway, topic_name)
    seed = await gateway.post(
        f"/v1/topics/{topic_name}/messages",
        json={"messages": [{"value": i, "partition": i % PARTITIONS} for i in range(8)]},
    )
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
        assert await lengths(gateway, topic_name) == before, (
            f"{kind} wrote something: {body[:300]!r}"
        )
    # an acks=0 batch would be written from the gateway's queue, after the response
    await asyncio.sleep(0.3)
    after_redis = stored_counts(redis_cluster, topic_name)
    assert await lengths(gateway, topic_name) == before
    assert after_redis == before_redis
    written = after_redis[0] + after_redis[1] - before_redis[0] - before_redis[1]
    print(
        f"\nhostile publish bodies: {len(cases)} tried, {sum(statuses.values())} rejected with 4xx "
        f"({dict(sorted(statuses.items()))}), {written} written; kinds {dict(kinds)}"
    )


# ---------------------------------------------------------------------------- 2. valid batches

def _canonical(message: dict[str, Any]) -> bytes:
    value = message.get("value") if "value" in message else {"b64": message["value_b64"]}
    return orjson.dumps(
        [message.get("key"), value, message.get("headers") or {}], option=orjson.OPT_SORT_KEYS
    )


async def test_valid_random_batches_are_written_exactly(
        gateway: Client, topic_name: str, redis_cluster: Any) -> None:
    await create_topic(gateway, topic_name)
    batches = draw_cases(
        st.tuples(
            st.lists(valid_messages(with_idempotency=False), min_size=1, max_size=25),
            st.sampled_from(["1", "all"]),
        ),
        60,
    )
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
            page = await (
                await gateway.get(
                    f"/v1/topics/{topic_name}/partitions/{partition}/messages"
                    f"?limit=1000&from={start}"
                )
            ).json()
            replayed.update(_canonical(m) for m in page["messages"])
            if not page["messages"]:
                break
            start = page["next_offset"]
    assert replayed == sent
    print(
        f"\nvalid random batches: {len(batches)} batches, {total} messages sent, {total} written "
        "and replayed identically"
    )


# ---------------------------------------------------------------------------- 3. WebSocket frames

WS_JUNK = st.one_of(
    st.text(max_size=60).map(lambda t: ("text", t)),
    st.binary(min_size=1, max_size=60).map(lambda b: ("binary", b)),
    GARBAGE.map(lambda g: ("text", json.dumps(g))),
    st.fixed_dictionaries(
        {"type": st.text(max_size=10).filter(lambda t: t not in ("ack", "nack", "extend"))},
        optional={"messages": GARBAGE},
    ).map(lambda d: ("text", json.dumps(d))),
    st.fixed_dictionaries(
        {"type": st.sampled_from(["ack", "nack", "extend"]), "messages": GARBAGE},
        optional={"delay_ms": GARBAGE},
    ).map(lambda d: ("text", json.dumps(d))),
)


async def _send(ws: aiohttp.ClientWebSocketResponse, frame: tuple[str, Any]) -> None:
    kind, data = frame
    if kind == "binary":
        await ws.send_bytes(data)
    else:
        await ws.send_str(data)


async def _expect_error_or_documented_close(ws: aiohttp.ClientWebSocketResponse, what: str) -> str:
    """'error' if the frame got an error frame, 'closed:<code>' if the socket was closed with a
    known code."""
    message = await ws.receive(timeout=5)
    if message.type is aiohttp.WSMsgType.TEXT:
        frame = orjson.loads(message.data)
        assert frame["type"] == "error", f"{what}: {frame}"
        assert frame["code"] == "bad-frame", f"{what}: {frame}"
        return "error"
    assert message.type in (
        aiohttp.WSMsgType.CLOSE,
        aiohttp.WSMsgType.CLOSED,
        aiohttp.WSMsgType.CLOSING,
    ), f"{what}: {message}"
    assert ws.close_code in WS_CLOSE_CODES | {WS_MESSAGE_TOO_BIG}, (
        f"{what}: close code {ws.close_code}"
    )
    return f"closed:{ws.close_code}"


async def test_malformed_websocket_frames_never_crash_the_gateway(
    gateway: Client, topic_name: str
) -> None:
    await create_topic(gateway, topic_name)
    junk = draw_cases(WS_JUNK, 150)
    outcomes: collections.Counter[str] = collections.Counter()

    # Broadcast: every client frame is malformed (settling is for groups), so each
    # gets an error frame.
    ws = await gateway.ws_connect(f"/v1/subscribe?topic={topic_name}&mode=broadcast")
    await next_frame_of(ws, "assignment")
    for frame in junk:
        if ws.closed:
            ws = await gateway.ws_connect(f"/v1/subscribe?topic={topic_name}&mode=broadcast")
            await next_frame_of(ws, "assignment")
        await _send(ws, frame)
        outcomes[await _expect_error_or_documented_close(ws, repr(frame)[:200])] += 1
    await ws.close()

    # Shared group: junk and acks/nacks/extends of offsets never delivered, then real
    # delivery still works.
    group = f"g-{uuid.uuid4().hex[:6]}"
    ws = await gateway.ws_connect(f"/v1/subscribe?topic={topic_name}&group={group}&mode=shared")
    await next_frame_of(ws, "assignment")
    never = [
        {"partition": p, "offset": f"{1000 + i}-{i}"}
        for i, p in enumerate([0, 1, 2, 3, 99, -1, 2**40])
    ]
    ghost_frames = [
        {"type": "ack", "messages": never},
        {"type": "nack", "messages": never, "delay_ms": 0},
        {"type": "extend", "messages": never},
        {"type": "ack", "messages": [{"partition": 0, "offset": "not-an-offset"}]},
        {"type": "ack", "messages": [{"partition": True, "offset": ""}]},
    ]
    for ghost in ghost_frames:
        await ws.send_str(orjson.dumps(ghost).decode())
    for frame in junk[:40]:
        await _send(ws, frame)
    response = await gateway.post(
        f"/v1/topics/{topic_name}/messages", json={"messages": [{"value": "real"}]}
    )
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
    print(
        f"\nhostile websocket frames: {tried} tried ({len(junk)} junk on broadcast -> "
        f"{dict(outcomes)}; {len(ghost_frames)} ghost settles + 40 junk on a shared group, "
        f"delivery still fine; huge text -> {huge}, huge binary -> {huge_binary}); "
        "gateway alive after"
    )


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
    response = await gateway.post(
        f"/v1/topics/{topic_name}/messages", json={"messages": [{"value": "after"}]}
    )
    assert response.status == 200
    assert (await next_frame_of(shared, "message"))["value"] == "after"
    await shared.close()
    await prove_alive(gateway, topic_name)
    print(
        f"\nwebsocket floods: 2000 small frames tried (1000 junk on broadcast -> {errors_seen} "
        f"error frames, closed={closed}; 1000 ghost acks on a shared group -> delivery still "
        "fine); gateway alive after"
    )


# ---------------------------------------------------------------------------- 4. params

LONG = "t" * 5000


def _param_cases(topic: str) -> list[tuple[str, str, Any]]:
    replay = f"/v1/topics/{topic}/partitions"
    cases: list[tuple[str, str, Any]] = []
    for p in [
        "-1", "abc", "4", "99999999999999999999999", "1.5", "0x1", "%20", "%F0%9F%98%80", "\u0669",
        "1e3", "00000000000000000000000000000000004", "%00",
    ]:
        cases.append(("GET", f"{replay}/{p}/messages", None))
    for start in [
        "abc", "1-", "-1-0", "1--1", "99999999999999999999999-0", "1-99999999999999999999", "0x1-0",
        "latest,earliest", "%00", "1-0-0", "\U0001f600", "1e3-0", "",
    ]:
        cases.append(("GET", f"{replay}/0/messages?from={start}", None))
    for limit in ["0", "-1", "1001", "10" * 20, "abc", "1e3", "1.5", "", "%00", " 5"]:
        cases.append(("GET", f"{replay}/0/messages?limit={limit}", None))
    for ms in ["-5", "abc", "9" * 30, "1.5"]:
        cases.append(("GET", f"{replay}/0/messages?from_time_ms={ms}", None))
    cases.append(("GET", f"{replay}/0/messages?from_time_ms=5&from=1-0", None))
    for bad_topic in [
        "\u0442\u0435\u043c\u0430", "\U0001f600", "a" * 201, LONG, "a%2Fb", "a b", "%00", "a*b",
    ]:
        cases.append(("GET", f"/v1/topics/{bad_topic}", None))
        cases.append(("POST", f"/v1/topics/{bad_topic}/messages", {"messages": [{"value": 1}]}))
        cases.append(("GET", f"/v1/topics/{bad_topic}/partitions/0/messages", None))
        cases.append(("POST", "/v1/topics", {"name": bad_topic, "partitions": 1}))
        cases.append(("GET", f"/v1/subscribe?topic={bad_topic}", None))
    for bad in [0, -1, 5000, "3", 1.5, True, None, 10**30, [1]]:
        cases.append(("POST", "/v1/topics", {"name": f"{topic}-x", "partitions": bad}))
    sub = f"/v1/subscribe?topic={topic}"
    for query in [
        "&mode=bogus", "&group=a%20b", "&group=" + "g" * 201, "&mode=shared",
        "&group=g&mode=broadcast", "&max_in_flight=-1", "&max_in_flight=0",
        "&max_in_flight=" + "9" * 30, "&ack_timeout_ms=abc", "&max_deliveries=0", "&from=garbage",
        "&from=0:abc", "&from=x:1-0", "&from=-1:1-0", "&from_time_ms=-1", "&group=g&from_time_ms=5",
        "&auto_ack=maybe", "&filter=nocolon", "&from=0:1-0,,", "&filter=%00",
    ]:
        cases.append(("GET", sub + query, None))
    cases.append(("GET", "/v1/subscribe", None))
    for to in [
        "nowhere", "9:1-0", "0:abc", "x:1-0", "-1:1-0", {"timestamp_ms": -1}, {"timestamp_ms": "1"},
        5, None, ["earliest"], "0:1-0,", "\u0669:1-0",
    ]:
        cases.append(("POST", "/v1/groups/g1/seek", {"topic": topic, "to": to}))
    for group in ["a b", "g" * 201, "\U0001f600"]:
        cases.append(("POST", f"/v1/groups/{group}/seek", {"topic": topic, "to": "earliest"}))
    cases.append(("POST", "/v1/groups/g1/seek", {"topic": topic, "to": "earliest", "extra": 1}))
    cases.append(("POST", "/v1/groups/g1/seek", {"topic": "\u0442", "to": "earliest"}))
    return cases


# Python's str.isdigit() is true for superscripts and other "digits" that int()
# refuses: see the report.
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


@pytest.mark.parametrize(
    ("what", "path"), UNICODE_DIGIT_CASES, ids=[c[0] for c in UNICODE_DIGIT_CASES]
)
async def test_unicode_superscript_digits_in_params_are_4xx(
        gateway: Client, topic_name: str, what: str, path: str) -> None:
    await create_topic(gateway, topic_name)
    if path.startswith("POST "):
        response = await gateway.post(
            path.removeprefix("POST "), json={"topic": topic_name, "to": "\u00b2:1-0"}
        )
    else:
        response = await gateway.get(path.format(t=topic_name))
    await assert_problem(response, what)
