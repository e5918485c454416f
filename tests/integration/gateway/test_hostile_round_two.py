"""Hostile inputs, round two, with auth on (an API key and a tenant's JWT): console file names the
filesystem refuses, forged dead-letter headers, a lone tracestate, the headers the gateway adds
counted inside the limits and the bytes rate limit, bad snapshot cursors, oversized request heads
in the log, and the snapshot of a compacted partition idle past its lag."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from pathlib import Path
from typing import Any

import jwt
import orjson
import pytest
from aiohttp.test_utils import TestClient
from auth_config import api_keys, hs256_jwt, rule, secured_client, tenant_filters
from hostile import MAX_HEADERS, PARTITIONS, assert_problem, stored_counts

from gateway.settings import GatewaySettings

Client = TestClient[Any, Any]
SECRET = "r" * 40
WRITER_KEY = "sgk_round-two-writer-key"
WRITER = {"X-API-Key": WRITER_KEY}
CONFIG = (hs256_jwt() + api_keys({"writer": WRITER_KEY})
          + rule(["writer"], ["it-*"], ["publish", "subscribe", "admin"])
          + rule(["claim:tenant=a"], ["it-*"], ["publish", "subscribe"]) + tenant_filters("a"))
TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
FORGED = ("sg-dlq-reason", "SG-DLQ-Topic", "sg-dlq-", "sg-dlq-partition")


DAY_S = 24 * 3600  # tokens made at import: they outlive a whole run


def as_tenant(tenant: str) -> dict[str, str]:
    claims = {"sub": f"app-{tenant}", "tenant": tenant, "aud": "streamgate",
              "exp": int(time.time() + DAY_S)}
    return {"Authorization": f"Bearer {jwt.encode(claims, SECRET, algorithm='HS256')}"}


CALLERS = {"writer": WRITER, "tenant": as_tenant("a")}


async def gateway(aiohttp_client: Any, settings: GatewaySettings, tmp_path: Path,
                  **changes: Any) -> Client:
    return await secured_client(aiohttp_client, settings, tmp_path, CONFIG,
                                {"TEST_JWT_SECRET": SECRET}, **changes)


@pytest.fixture
async def secured(aiohttp_client: Any, gateway_settings: GatewaySettings, tmp_path: Path) -> Client:
    return await gateway(aiohttp_client, gateway_settings, tmp_path)


async def new_topic(client: Client, **settings: Any) -> str:
    name = f"it-{uuid.uuid4().hex[:10]}"
    created = await client.post("/v1/topics", json={"name": name, "partitions": PARTITIONS,
                                                     **settings}, headers=WRITER)
    assert created.status == 201, await created.text()
    return name


async def refused(client: Client, topic: str, body: dict[str, Any], headers: dict[str, str],
                  what: str) -> dict[str, Any]:
    """Publish ``body``; the problem document of its 4xx."""
    response = await client.post(f"/v1/topics/{topic}/messages", json=body, headers=headers)
    await assert_problem(response, what)
    doc: dict[str, Any] = orjson.loads(await response.read())
    return doc


async def test_console_answers_404_for_a_name_the_filesystem_refuses(
        secured: Client, caplog: pytest.LogCaptureFixture) -> None:
    for path in ("a" * 300 + ".js", "a" * 300 + "/main.js", "js/" + "b" * 5000 + ".css"):
        response = await secured.get(f"/console/{path}")
        assert await assert_problem(response, path[:20]) == 404
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"


async def test_publishers_cannot_forge_dead_letter_headers(secured: Client,
                                                           redis_cluster: Any) -> None:
    topic = await new_topic(secured)
    for caller, credentials in CALLERS.items():
        for name in FORGED:
            body = {"messages": [{"value": 1}, {"value": 2, "headers": {name: "x"}}]}
            doc = await refused(secured, topic, body, credentials, f"{caller} {name}")
            assert (doc["status"], doc["pointer"]) == (422, f"/messages/1/headers/{name}")
    assert stored_counts(redis_cluster, topic) == (0, 0)


async def test_a_tracestate_without_its_traceparent_is_refused(secured: Client,
                                                              redis_cluster: Any) -> None:
    topic = await new_topic(secured)
    for caller, credentials in CALLERS.items():
        for state in ("vendor=1", "\x00bad", "x" * 600):
            body = {"messages": [{"value": 1, "headers": {"tracestate": state}}]}
            doc = await refused(secured, topic, body, {**credentials, "traceparent": TRACEPARENT},
                                f"{caller} tracestate alone")
            assert (doc["status"], doc["pointer"]) == (422, "/messages/0/headers/tracestate")
    assert stored_counts(redis_cluster, topic) == (0, 0)
    own = {"traceparent": TRACEPARENT, "tracestate": "vendor=1"}
    response = await secured.post(f"/v1/topics/{topic}/messages", headers=WRITER,
                                  json={"messages": [{"value": 1, "headers": own}]})
    assert response.status == 200, await response.text()


async def test_headers_the_gateway_adds_count_inside_the_header_limits(
        secured: Client, redis_cluster: Any) -> None:
    topic = await new_topic(secured)
    full = {f"h{i}": "v" for i in range(MAX_HEADERS)}
    trace = {"traceparent": TRACEPARENT, "tracestate": "vendor=1"}
    cases = [("writer + trace", {**WRITER, **trace}, {"value": 1, "headers": full}),
             ("tenant stamp", as_tenant("a"), {"value": 1, "headers": full}),
             ("writer + ttl", WRITER, {"value": 1, "headers": full, "ttl_ms": 60_000}),
             ("tenant + trace bytes", {**as_tenant("a"), **trace},
              {"value": 1, "headers": {"big": "x" * (16 * 1024 - 20)}})]
    for what, headers, message in cases:
        doc = await refused(secured, topic, {"messages": [{"value": 0}, message]}, headers, what)
        assert (doc["status"], doc["pointer"]) == (413, "/messages/1/headers"), what
    assert stored_counts(redis_cluster, topic) == (0, 0)


async def test_the_bytes_rate_limit_counts_stored_headers(
        aiohttp_client: Any, gateway_settings: GatewaySettings, tmp_path: Path,
        redis_cluster: Any) -> None:
    limited = await gateway(aiohttp_client, gateway_settings, tmp_path,
                            rate_limit_topic_bytes_per_s=20_000.0)
    topic = await new_topic(limited)
    # a few hundred bytes of values; the request's trace context on each of them is ~60 KB
    context = {"traceparent": TRACEPARENT, "tracestate": "v=" + "s" * 500}
    body = {"messages": [{"value": i} for i in range(100)]}
    for caller, credentials in CALLERS.items():
        doc = await refused(limited, topic, body, {**credentials, **context}, caller)
        assert doc["status"] in (413, 429), doc
    assert stored_counts(redis_cluster, topic) == (0, 0)
    response = await limited.post(f"/v1/topics/{topic}/messages", json=body, headers=WRITER)
    assert response.status == 200, await response.text()


async def test_a_snapshot_cursor_that_is_not_one_is_refused(secured: Client) -> None:
    topic = await new_topic(secured, compact=True, key_index=True)
    response = await secured.post(f"/v1/topics/{topic}/messages", headers=WRITER, json={
        "messages": [{"key": k, "value": k, "partition": 0} for k in ("a", "b", "c")]})
    assert response.status == 200, await response.text()
    for caller, credentials in CALLERS.items():
        for cursor in ("!!!", "a", "YQ=!", "ab+/", "é", "YQ== "):
            response = await secured.get(f"/v1/topics/{topic}/partitions/0/snapshot",
                                         params={"after": cursor, "limit": "1"},
                                         headers=credentials)
            assert await assert_problem(response, f"{caller} {cursor!r}") == 422
            assert (await response.json())["pointer"] == "/after"


async def raw_request(client: Client, head: bytes) -> bytes:
    """Send a request head over a socket of its own; the status line of the answer."""
    reader, writer = await asyncio.open_connection(client.host, client.port)
    try:
        writer.write(head)
        await writer.drain()
        return await reader.readline()
    finally:
        writer.close()
        await writer.wait_closed()


async def test_oversized_request_heads_are_one_log_line_without_their_bytes(
        secured: Client, caplog: pytest.LogCaptureFixture) -> None:
    token = "t0ken" * 4000
    heads = [b"GET /v1/topics HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n\r\n"
             % token.encode(),
             b"GET /v1/topics/%s HTTP/1.1\r\nHost: x\r\n\r\n" % token.encode(),
             b"GET /v1/topics?api_key=%s HTTP/1.1\r\nHost: x\r\n\r\n" % token.encode()]
    for head in heads:
        caplog.clear()
        with caplog.at_level(logging.DEBUG):
            status = await raw_request(secured, head)
        assert status.split()[1] in (b"400", b"414", b"431"), status
        server = [r for r in caplog.records if r.name.startswith("aiohttp.server")]
        assert len(server) <= 1, [r.getMessage() for r in server]
        assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"
        assert not [r for r in caplog.records if "t0ken" in r.getMessage()]


async def whole_snapshot(client: Client, url: str,
                         credentials: dict[str, str]) -> tuple[str, dict[str, Any]]:
    """Every page of a snapshot, one key a page: its ``as_of`` and its values by key."""
    params: dict[str, str] = {"limit": "1"}
    values: dict[str, Any] = {}
    while True:
        response = await client.get(url, params=params, headers=credentials)
        assert response.status == 200, await response.text()
        page = await response.json()
        values.update((m["key"], m["value"]) for m in page["messages"])
        if page["after"] is None:
            return page["as_of"], values
        params = {"limit": "1", "as_of": page["as_of"], "after": page["after"]}


async def test_an_idle_compacted_partition_still_gives_its_snapshot(secured: Client) -> None:
    lag_ms = 300
    topic = await new_topic(secured, compact=True, key_index=True, retention_ms=lag_ms)
    messages: list[dict[str, Any]] = [
        {"key": "a", "value": 1}, {"key": "b", "value": 1}, {"key": "a", "value": 2},
        {"key": "c", "value": 1}, {"key": "c", "value": None}]
    response = await secured.post(f"/v1/topics/{topic}/messages", headers=WRITER, json={
        "messages": [{**m, "partition": 0} for m in messages]})
    assert response.status == 200, await response.text()
    newest = (await response.json())["results"][-1]["offset"]
    await asyncio.sleep(3 * lag_ms / 1000)  # idle for longer than the lag
    url = f"/v1/topics/{topic}/partitions/0/snapshot"
    assert await whole_snapshot(secured, url, WRITER) == (newest, {"a": 2, "b": 1})
    # a tenant's forced filter hides the writer's messages, not the snapshot
    assert await whole_snapshot(secured, url, as_tenant("a")) == (newest, {})
