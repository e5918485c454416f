"""Event tokens on the real stack: minted for a caller who may subscribe, they open that topic's
events stream from a URL alone, and nothing else: not another topic, not once expired or tampered
with, not as credentials on any other route; tenants stay filtered; replicas sharing the receipt
secret accept each other's."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp.test_utils import TestServer
from secured_stack import (
    CONFIG,
    OUTSIDER,
    SECRET,
    WRITER,
    Client,
    as_tenant,
    create_topic,
    publish,
    token,
)

from gateway.app import create_app
from gateway.auth.event_tokens import INVALID, MAX_TTL_S
from gateway.auth.principal import ANONYMOUS, Principal
from gateway.cli import access_log_options
from gateway.routes.event_tokens import EVENT_TOKENS
from gateway.settings import GatewaySettings
from partitioner.group_pause import now_ms

RECEIPT_SECRET = "event-token-test-receipt-secret-shared"
Event = dict[str, str]


def secured_settings(settings: GatewaySettings, tmp_path: Path, **changes: Any) -> GatewaySettings:
    (tmp_path / "auth.toml").write_text(CONFIG)
    return dataclasses.replace(settings, auth_mode="required",
                               auth_config_path=str(tmp_path / "auth.toml"), **changes)


async def secured_gateway(aiohttp_client: Any, settings: GatewaySettings, tmp_path: Path,
                          secret: str = RECEIPT_SECRET) -> Client:
    app = create_app(secured_settings(settings, tmp_path, receipt_secret=secret),
                     {"TEST_JWT_SECRET": SECRET})
    client: Client = await aiohttp_client(app)
    return client


@pytest.fixture
async def secured(aiohttp_client: Any, gateway_settings: GatewaySettings,
                  tmp_path: Path) -> Client:
    return await secured_gateway(aiohttp_client, gateway_settings, tmp_path)


async def mint(client: Client, topic: str, headers: dict[str, str],
               body: dict[str, Any] | None = None) -> dict[str, Any]:
    response = await client.post(f"/v1/topics/{topic}/events/token", json=body, headers=headers)
    assert response.status == 201, await response.text()
    minted: dict[str, Any] = await response.json()
    return minted


async def read_events(response: aiohttp.ClientResponse, done: Callable[[list[Event]], bool],
                      wait_s: float = 15.0) -> list[Event]:
    """The stream's events (comments skipped) until ``done`` says enough or the stream ends."""
    events: list[Event] = []
    fields: Event = {}
    async with asyncio.timeout(wait_s):
        while not done(events):
            raw = await response.content.readline()
            if not raw:
                break
            line = raw.decode().rstrip("\r\n")
            if not line:
                if fields:
                    events.append(fields)
                fields = {}
            elif not line.startswith(":"):
                name, _, value = line.partition(":")
                fields[name] = value.removeprefix(" ")
    return events


def messages_of(events: list[Event]) -> list[dict[str, Any]]:
    return [orjson.loads(event["data"]) for event in events if event.get("event") == "message"]


def has_messages(count: int) -> Callable[[list[Event]], bool]:
    return lambda events: len(messages_of(events)) >= count


async def assert_refused_token(client: Client, url: str) -> None:
    response = await client.get(url)
    assert response.status == 401, await response.text()
    assert response.content_type == "application/problem+json"
    assert (await response.json())["detail"] == INVALID


async def seeded_topic(client: Client, topic: str, count: int = 3) -> None:
    await create_topic(client, topic)
    await publish(client, topic, [{"value": {"i": i}} for i in range(count)], WRITER)


# ----------------------------------------------------------------------------- minting


async def test_a_token_is_minted_for_a_subscriber_with_the_events_url(
        secured: Client, topic_name: str) -> None:
    await create_topic(secured, topic_name)
    before = now_ms()
    minted = await mint(secured, topic_name, WRITER)
    assert before + 60_000 <= minted["expires_at_ms"] <= now_ms() + 60_000
    assert minted["url"] == f"/v1/topics/{topic_name}/events?access_token={minted['token']}"
    short = await mint(secured, topic_name, WRITER, {"ttl_s": 5})
    assert short["expires_at_ms"] <= now_ms() + 5_000


async def test_only_a_caller_with_the_subscribe_right_mints_and_the_acl_comes_before_404(
        secured: Client, topic_name: str) -> None:
    await create_topic(secured, topic_name)
    missing = f"it-missing-{uuid.uuid4().hex[:8]}"
    for topic in (topic_name, missing):
        refused = await secured.post(f"/v1/topics/{topic}/events/token", headers=OUTSIDER)
        assert refused.status == 403, await refused.text()
    absent = await secured.post(f"/v1/topics/{missing}/events/token", headers=WRITER)
    assert absent.status == 404, await absent.text()
    anonymous = await secured.post(f"/v1/topics/{topic_name}/events/token")
    assert anonymous.status == 401


async def test_a_bad_ttl_is_422_with_its_pointer(secured: Client, topic_name: str) -> None:
    await create_topic(secured, topic_name)
    for body, pointer in [({"ttl_s": 0}, "/ttl_s"), ({"ttl_s": 301}, "/ttl_s"),
                          ({"ttl_s": "60"}, "/ttl_s"), ({"ttl_s": True}, "/ttl_s"),
                          ({"ttl": 60}, "/ttl")]:
        response = await secured.post(f"/v1/topics/{topic_name}/events/token", json=body,
                                      headers=WRITER)
        assert response.status == 422, (body, await response.text())
        assert (await response.json())["pointer"] == pointer, body


async def test_with_auth_off_anyone_mints_a_token_that_opens_the_stream(
        aiohttp_client: Any, gateway_settings: GatewaySettings, topic_name: str) -> None:
    client: Client = await aiohttp_client(create_app(gateway_settings))
    await create_topic(client, topic_name)
    await publish(client, topic_name, [{"value": {"i": 0}}], {})
    minted = await mint(client, topic_name, {})
    async with client.get(minted["url"] + "&from=earliest") as stream:
        assert stream.status == 200, await stream.text()
        assert messages_of(await read_events(stream, has_messages(1)))[0]["value"] == {"i": 0}


# ----------------------------------------------------------------------------- using


async def test_a_token_alone_opens_its_topics_stream_and_no_other(
        secured: Client, topic_name: str) -> None:
    await seeded_topic(secured, topic_name)
    other = f"{topic_name}-other"
    await seeded_topic(secured, other)
    minted = await mint(secured, topic_name, WRITER)
    async with secured.get(minted["url"] + "&from=earliest") as stream:
        assert stream.status == 200, await stream.text()
        assert stream.headers["Content-Type"].startswith("text/event-stream")
        values = [m["value"] for m in messages_of(await read_events(stream, has_messages(3)))]
        assert sorted(value["i"] for value in values) == [0, 1, 2]
    await assert_refused_token(secured, f"/v1/topics/{other}/events?access_token="
                                        f"{minted['token']}")


async def test_expired_tampered_and_foreign_tokens_are_refused_alike(
        secured: Client, topic_name: str) -> None:
    await seeded_topic(secured, topic_name)
    signer = secured.app[EVENT_TOKENS]
    writer = Principal("writer", "api_key")
    expired = signer.issue(writer, topic_name, 60, now_ms() - 120_000).token
    token = (await mint(secured, topic_name, WRITER))["token"]
    version, payload, tag = token.split(".")
    for bad in (expired, f"{version}.{payload}.{tag[:-2]}AA", f"{version}.{payload[:-2]}.{tag}",
                f"sget0.{payload}.{tag}", "not-a-token", ""):
        await assert_refused_token(secured, f"/v1/topics/{topic_name}/events?access_token={bad}")


async def test_a_token_is_never_credentials_on_another_route(
        secured: Client, topic_name: str) -> None:
    await seeded_topic(secured, topic_name)
    token = (await mint(secured, topic_name, WRITER))["token"]
    as_headers = [{"Authorization": f"Bearer {token}"}, {"Authorization": f"ApiKey {token}"},
                  {"X-API-Key": token}]
    requests = [("GET", f"/v1/topics/{topic_name}?x=1"), ("GET", "/v1/topics?x=1"),
                ("GET", f"/v1/topics/{topic_name}/partitions/0/messages?from=earliest"),
                ("GET", f"/v1/topics/{topic_name}/history?key=k1"),
                ("POST", f"/v1/topics/{topic_name}/messages?x=1"),
                ("POST", f"/v1/topics/{topic_name}/events/token?x=1")]
    body = {"messages": [{"value": "intruder"}]}
    for method, url in requests:
        for headers in as_headers:
            response = await secured.request(method, url, json=body, headers=headers)
            assert response.status == 401, (method, url, headers, await response.text())
        queried = await secured.request(method, f"{url}&access_token={token}", json=body)
        assert queried.status == 401, (method, url, await queried.text())
    upgrade = secured.ws_connect(f"/v1/subscribe?topic={topic_name}&mode=broadcast&"
                                 f"access_token={token}", headers=as_headers[0])
    with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
        await upgrade
    assert refused.value.status == 401


async def test_tenant_filters_hold_through_a_token(secured: Client, topic_name: str) -> None:
    await create_topic(secured, topic_name)
    messages = [{"value": {"tenant": tenant, "i": i}, "partition": 0, "headers": {"tenant": tenant}}
                for i in range(6) for tenant in ("a", "b")]
    await publish(secured, topic_name, messages, WRITER)
    minted = await mint(secured, topic_name, as_tenant("b"))

    def last_b_seen(events: list[Event]) -> bool:
        return {"tenant": "b", "i": 5} in [m["value"] for m in messages_of(events)]

    async with secured.get(minted["url"] + "&from=earliest") as stream:
        assert stream.status == 200, await stream.text()
        seen = [m["value"] for m in messages_of(await read_events(stream, last_b_seen))]
    assert seen == [{"tenant": "b", "i": i} for i in range(6)]


async def test_a_stream_ends_when_its_credential_expires_and_resumes_with_a_fresh_token(
        secured: Client, topic_name: str) -> None:
    await create_topic(secured, topic_name)
    first = [{"value": {"i": i}, "partition": 0, "headers": {"tenant": "b"}} for i in range(3)]
    await publish(secured, topic_name, first, WRITER)
    short_lived = {"Authorization": f"Bearer {token('b', ttl_s=2)}"}
    minted = await mint(secured, topic_name, short_lived, {"ttl_s": MAX_TTL_S})
    assert minted["expires_at_ms"] <= (now_ms() // 1000 + 3) * 1000  # capped by the JWT's exp

    def ended(events: list[Event]) -> bool:
        return any(event.get("event") == "error" for event in events)

    async with secured.get(minted["url"] + "&from=earliest") as stream:
        assert stream.status == 200, await stream.text()
        events = await read_events(stream, ended)
        assert await stream.content.read() == b""  # nothing after the error: the stream ended
    error = orjson.loads(events[-1]["data"])
    assert error["code"] == "credentials-expired", error
    assert [m["value"]["i"] for m in messages_of(events)] == [0, 1, 2]
    resume_from = [event["id"] for event in events if event.get("event") == "message"][-1]
    await publish(secured, topic_name, [{"value": {"i": 3}, "partition": 0,
                                         "headers": {"tenant": "b"}}], WRITER)
    fresh = await mint(secured, topic_name, as_tenant("b"))
    async with secured.get(f"{fresh['url']}&last_event_id={resume_from}") as stream:
        assert stream.status == 200, await stream.text()
        resumed = messages_of(await read_events(stream, has_messages(1)))
    assert [m["value"] for m in resumed] == [{"i": 3}]


async def test_replicas_accept_each_others_tokens_only_when_they_share_the_receipt_secret(
        aiohttp_client: Any, gateway_settings: GatewaySettings, tmp_path: Path,
        topic_name: str) -> None:
    first = await secured_gateway(aiohttp_client, gateway_settings, tmp_path)
    twin = await secured_gateway(aiohttp_client, gateway_settings, tmp_path)
    stranger = await secured_gateway(aiohttp_client, gateway_settings, tmp_path,
                                     secret="another-receipt-secret-of-32-bytes-at-least")
    await seeded_topic(first, topic_name)
    minted = await mint(first, topic_name, WRITER)
    async with twin.get(minted["url"] + "&from=earliest") as stream:
        assert stream.status == 200, await stream.text()
        assert len(messages_of(await read_events(stream, has_messages(3)))) == 3
    await assert_refused_token(stranger, minted["url"])
    auth_off = create_app(dataclasses.replace(gateway_settings, receipt_secret=RECEIPT_SECRET))
    anonymous = auth_off[EVENT_TOKENS].issue(ANONYMOUS, topic_name, 60, now_ms()).token
    await assert_refused_token(twin, f"/v1/topics/{topic_name}/events?access_token={anonymous}")


async def test_the_access_log_never_holds_the_token(
        gateway_settings: GatewaySettings, tmp_path: Path, topic_name: str,
        aiohttp_client: Any, caplog: pytest.LogCaptureFixture) -> None:
    settings = secured_settings(gateway_settings, tmp_path, access_log=True)
    server = TestServer(create_app(settings, {"TEST_JWT_SECRET": SECRET}))
    await server.start_server(**access_log_options(settings))
    client: Client = await aiohttp_client(server)
    # from the first request: a connection decides whether it logs when it opens
    with caplog.at_level(logging.INFO, logger="aiohttp.access"):
        await seeded_topic(client, topic_name)
        minted = await mint(client, topic_name, WRITER)
        # answered at once (a stream is logged only when it ends): a bad cursor, a forged token
        refused = await client.get(minted["url"] + "&from=not-a-cursor")
        assert refused.status == 422, await refused.text()
        await client.get(f"/v1/topics/{topic_name}/events?from=earliest&access_token=forged")
    lines = [r.getMessage() for r in caplog.records if r.name == "aiohttp.access"]
    events_lines = [line for line in lines if "/events?" in line]
    assert len(events_lines) == 2, lines
    assert all("access_token=***" in line for line in events_lines), events_lines
    assert not [line for line in lines if minted["token"] in line or "forged" in line], lines
