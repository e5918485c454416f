"""Hostile-input cases shared by the hostile-input suites (auth off and auth on): hypothesis
strategies for publish bodies, a deterministic case drawer, and checks that read Redis itself."""

from __future__ import annotations

import base64
import json
import time
import uuid
from typing import Any

import aiohttp
import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway import errors

PARTITIONS = 4
MAX_KEY_BYTES = 4096  # GatewaySettings defaults (docs/api.md)
MAX_HEADERS = 64
MAX_HEADER_BYTES = 16 * 1024
MAX_VALUE_BYTES = 1024 * 1024
WS_MAX_FRAME_BYTES = 1024 * 1024
MAX_DELAY_MS = 366 * 24 * 3600 * 1000
WS_CLOSE_CODES = {value for name, value in vars(errors).items() if name.startswith("WS_CLOSE_")}
WS_MESSAGE_TOO_BIG = 1009  # RFC 6455: the gateway's answer to a message over ws_max_frame_bytes


def draw_cases(strategy: st.SearchStrategy[Any], count: int) -> list[Any]:
    """``count`` deterministic examples of ``strategy`` (hypothesis may stop early when it runs out
    of ideas)."""
    drawn: list[Any] = []

    @settings(max_examples=count, database=None, deadline=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(strategy)
    def collect(case: Any) -> None:
        drawn.append(case)

    collect()
    return drawn


# ---------------------------------------------------------------------------- strategies

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


NOT_STRING = st.one_of(
    st.integers(),
    st.booleans(),
    st.floats(allow_nan=False),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(SMALL_TEXT, st.integers(), max_size=3),
)
NOT_INT = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False),
    st.booleans(),
    SMALL_TEXT,
    st.lists(st.integers(), max_size=2),
    st.dictionaries(SMALL_TEXT, st.integers(), max_size=2),
)
GARBAGE = st.recursive(
    st.none() | st.booleans() | st.integers() | SMALL_TEXT,
    lambda c: st.lists(c, max_size=3) | st.dictionaries(SMALL_TEXT, c, max_size=3),
    max_leaves=8,
)
UNKNOWN_FIELD = st.text(min_size=1, max_size=16).filter(
    lambda f: f not in {
        "key", "value", "value_b64", "headers", "partition", "idempotency_key", "delay_ms",
        "deliver_at_ms",
    }
)


@st.composite
def invalid_messages(draw: st.DrawFn) -> tuple[str, Any]:
    """(kind, a message that must be rejected)."""
    base = draw(valid_messages(with_idempotency=False))
    kind = draw(st.sampled_from([
        "no-value", "both-values", "value_b64-type", "value_b64-garbage", "key-type",
        "key-oversized", "headers-type", "header-value-type", "too-many-headers",
        "headers-oversized", "headers-oversized-utf8", "partition-negative",
        "partition-out-of-range", "partition-type", "partition-huge", "unknown-field",
        "delay-negative", "delay-too-long", "delay-type", "deliver-at-negative",
        "delay-and-deliver-at", "idempotency-type", "idempotency-empty", "idempotency-long",
        "not-an-object", "value-oversized"]))
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
        base["value_b64"] = draw(
            st.sampled_from(["@@@", "A", "AAE", "not base64!", "AA==AA", "\u00e9\u00e9"])
        )
    elif kind == "key-type":
        base["key"] = draw(NOT_STRING)
    elif kind == "key-oversized":
        base["key"] = draw(st.sampled_from(["k", "\u00e9", "\U0001f600"])) * (MAX_KEY_BYTES + 1)
    elif kind == "headers-type":
        base["headers"] = draw(
            st.lists(SMALL_TEXT, max_size=3) | st.integers() | SMALL_TEXT | st.booleans()
        )
    elif kind == "header-value-type":
        base["headers"] = {
            **draw(HEADERS),
            draw(st.text(min_size=1, max_size=8)): draw(NOT_STRING | st.none()),
        }
    elif kind == "too-many-headers":
        base["headers"] = {f"h{i}": "v" for i in range(MAX_HEADERS + draw(st.integers(1, 50)))}
    elif kind == "headers-oversized":
        base["headers"] = {"big": "x" * (MAX_HEADER_BYTES + draw(st.integers(0, 1000)))}
    elif kind == "headers-oversized-utf8":  # within the limit in characters, over it in UTF-8 bytes
        base["headers"] = {
            "big": draw(st.sampled_from(["\u00e9", "\u20ac", "\U0001f600"]))
            * (MAX_HEADER_BYTES // 2)
        }
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
        base["delay_ms"], base["deliver_at_ms"] = (
            draw(st.integers(0, 1000)),
            int(time.time() * 1000),
        )
    elif kind == "idempotency-type":
        base["idempotency_key"] = draw(NOT_STRING.filter(lambda v: v is not None))
    elif kind == "idempotency-empty":
        base["idempotency_key"] = ""
    elif kind == "idempotency-long":
        base["idempotency_key"] = "i" * draw(st.integers(257, 2000))
    elif kind == "not-an-object":
        base = draw(
            st.lists(GARBAGE, max_size=3) | st.integers() | SMALL_TEXT | st.none() | st.booleans()
        )
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
        "non-utf8", "truncated", "top-level-type", "messages-type", "messages-empty", "acks",
        "body-field", "too-many-messages"]))
    acks = draw(st.sampled_from(["1", "all", "0", 1]))
    if how == "bad-message":
        kind, bad = draw(invalid_messages())
        messages = list(valid)
        messages.insert(draw(st.integers(0, len(messages))), bad)
        return f"message:{kind}", _bigint_json({"messages": messages, "acks": acks})
    if how == "top-level-type":
        return how, _bigint_json(
            draw(st.lists(GARBAGE, max_size=3) | st.integers() | SMALL_TEXT | st.none())
        )
    if how == "messages-type":
        return how, _bigint_json(
            {
                "messages": draw(GARBAGE.filter(lambda g: not isinstance(g, list) or not g)),
                "acks": acks,
            }
        )
    if how == "messages-empty":
        return how, _bigint_json({"messages": [], "acks": acks})
    if how == "acks":
        bad_acks = draw(
            GARBAGE.filter(lambda a: a not in ("0", "1", "all", 0, 1) or isinstance(a, bool))
        )
        return how, _bigint_json({"messages": valid or [{"value": 1}], "acks": bad_acks})
    if how == "body-field":
        field = draw(
            st.text(min_size=1, max_size=12).filter(lambda f: f not in ("messages", "acks"))
        )
        return how, _bigint_json({"messages": valid or [{"value": 1}], field: draw(GARBAGE)})
    if how == "too-many-messages":
        return how, _bigint_json({"messages": [{"value": i} for i in range(10_001)], "acks": acks})
    body = orjson.dumps({"messages": valid or [{"value": "x"}], "acks": acks})
    if how == "non-utf8":
        junk = draw(st.sampled_from(
            [b"\xff", b"\xfe\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80"]))
        # inside the first string: a raw invalid byte in a JSON string
        cut = body.index(b'"messages"') + 1
        return how, body[:cut] + junk + body[cut:]
    cut = draw(st.integers(0, len(body) - 1))
    return how, body[:cut]  # truncated



# ---------------------------------------------------------------------------- checks

def stored_counts(redis_cluster: Any, topic: str) -> tuple[int, int]:
    """(stream entries, scheduled entries) across every partition, read from Redis itself."""
    entries = scheduled = 0
    for partition in range(PARTITIONS):
        log_key, delayed_key = (
            f"sg:{{{topic}/{partition}}}:log",
            f"sg:{{{topic}/{partition}}}:delayed",
        )
        node = redis_cluster.primary_for_key(log_key).client()
        entries += int(node.xlen(log_key))
        scheduled += int(node.zcard(delayed_key))
    return entries, scheduled


async def assert_problem(response: aiohttp.ClientResponse, what: str) -> int:
    text = await response.text()
    assert 400 <= response.status < 500, f"{what}: {response.status} {text[:500]}"
    assert response.content_type == "application/problem+json", (
        f"{what}: {response.content_type} {text[:300]}"
    )
    doc = orjson.loads(text)
    assert isinstance(doc.get("detail"), str), f"{what}: {doc}"
    assert doc["detail"], f"{what}: {doc}"
    assert doc.get("status") == response.status
    return response.status


async def receive_json(ws: aiohttp.ClientWebSocketResponse, wait_s: float = 5.0) -> dict[str, Any]:
    message = await ws.receive(timeout=wait_s)
    assert message.type is aiohttp.WSMsgType.TEXT, (
        f"expected a text frame, got {message.type} {message.data!r}"
    )
    frame: dict[str, Any] = orjson.loads(message.data)
    return frame


async def next_frame_of(
    ws: aiohttp.ClientWebSocketResponse, kind: str, wait_s: float = 10.0
) -> dict[str, Any]:
    deadline = time.monotonic() + wait_s
    while True:
        frame = await receive_json(ws, max(0.1, deadline - time.monotonic()))
        if frame["type"] == kind:
            return frame
