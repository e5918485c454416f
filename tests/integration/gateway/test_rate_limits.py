"""Rate limits through real gateways: publish (429 + Retry-After + RateLimit headers, shared across
replicas), per-principal overrides from the auth config, read (replay/pull) and subscribe limits."""

from __future__ import annotations

import dataclasses
import uuid
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestClient

from gateway.app import create_app
from gateway.auth.keys import hash_api_key
from gateway.errors import WS_CLOSE_TOO_MANY_CONNECTIONS
from gateway.settings import GatewaySettings

Client = TestClient[Any, Any]


async def limited_gateway(
    aiohttp_client: Any, settings: GatewaySettings, **limits: float
) -> Client:
    client: Client = await aiohttp_client(create_app(dataclasses.replace(settings, **limits)))
    return client


async def stored(client: Client, topic: str) -> int:
    page = await (
        await client.get(f"/v1/topics/{topic}/partitions/0/messages", params={"limit": "1000"})
    ).json()
    return len(page["messages"])


async def test_principal_over_its_rate_gets_429(
        aiohttp_client: Any, gateway_settings: GatewaySettings, topic_name: str) -> None:
    # A very slow refill: the burst of 10 is all there is during the test.
    client = await limited_gateway(
        aiohttp_client,
        gateway_settings,
        rate_limit_principal_messages_per_s=0.5,
        rate_limit_burst_s=20,
    )
    assert (
        await client.post("/v1/topics", json={"name": topic_name, "partitions": 1})
    ).status == 201
    admitted = await client.post(f"/v1/topics/{topic_name}/messages",
                                 json={"messages": [{"value": i} for i in range(8)]})
    assert admitted.status == 200
    assert admitted.headers["RateLimit"].startswith("remaining=2,")
    assert '"messages";q=10;w=20' in admitted.headers["RateLimit-Policy"]
    refused = await client.post(f"/v1/topics/{topic_name}/messages",
                                json={"messages": [{"value": i} for i in range(3)]})
    assert refused.status == 429
    assert refused.content_type == "application/problem+json"
    assert int(refused.headers["Retry-After"]) >= 1
    assert refused.headers["RateLimit"].startswith("remaining=0,")
    assert (await refused.json())["detail"] == "principal rate limit exceeded"
    assert await stored(client, topic_name) == 8, "a refused batch must write nothing"
    fits = await client.post(
        f"/v1/topics/{topic_name}/messages", json={"messages": [{"value": 8}, {"value": 9}]}
    )
    assert fits.status == 200, "the refused request must not have used up the remaining tokens"
    metrics = await (await client.get("/metrics")).text()
    assert (
        f'streamgate_publish_rate_limited_total{{limit="principal",topic="{topic_name}"}} 1.0'
        in metrics
    )


async def test_a_topic_limit_is_shared_by_every_gateway_replica(
        aiohttp_client: Any, gateway_settings: GatewaySettings, topic_name: str) -> None:
    limits = {"rate_limit_topic_messages_per_s": 0.5, "rate_limit_burst_s": 20}
    first = await limited_gateway(aiohttp_client, gateway_settings, **limits)
    second = await limited_gateway(aiohttp_client, gateway_settings, **limits)
    assert (
        await first.post("/v1/topics", json={"name": topic_name, "partitions": 1})
    ).status == 201
    batch = {"messages": [{"value": i} for i in range(6)]}
    assert (await first.post(f"/v1/topics/{topic_name}/messages", json=batch)).status == 200
    refused = await second.post(f"/v1/topics/{topic_name}/messages", json=batch)
    assert refused.status == 429
    assert (await refused.json())["detail"] == "topic rate limit exceeded"


async def test_a_request_larger_than_the_byte_burst_is_413_not_429(
        aiohttp_client: Any, gateway_settings: GatewaySettings, topic_name: str) -> None:
    client = await limited_gateway(
        aiohttp_client, gateway_settings, rate_limit_topic_bytes_per_s=100
    )
    assert (
        await client.post("/v1/topics", json={"name": topic_name, "partitions": 1})
    ).status == 201
    response = await client.post(
        f"/v1/topics/{topic_name}/messages", json={"messages": [{"value": "x" * 500}]}
    )
    assert response.status == 413
    assert "Retry-After" not in response.headers
    assert await stored(client, topic_name) == 0


# ------------------------------------------------------- per-principal overrides, reads, subscribes

def key_for(name: str) -> str:
    return f"sgk_{name}-key-for-rate-limit-tests"


def limits_config(names: dict[str, str], limits: str) -> str:
    """An auth config granting every named principal everything, with ``limits`` ([[limits]] tables)
    appended."""
    keys = "".join(
        f'[[api_keys]]\nprincipal = "{name}"\nsha256 = "{hash_api_key(key_for(name))}"\n\n'
        for name in names.values()
    )
    return (
        keys
        + '[[rules]]\nprincipals = ["*"]\ntopics = ["*"]\n'
          'actions = ["publish", "subscribe", "admin"]\n'
        + limits.format(**names)
    )


@pytest.fixture
def principals() -> dict[str, str]:
    """Principal names unique to the test: their buckets in the session's Redis are fresh."""
    suffix = uuid.uuid4().hex[:8]
    return {role: f"{role}-{suffix}" for role in ("gold", "basic", "slow", "other")}


async def secured_gateway(
    aiohttp_client: Any, settings: GatewaySettings, tmp_path: Path, names: dict[str, str],
    limits: str, **rates: float,
) -> Client:
    (tmp_path / "auth.toml").write_text(limits_config(names, limits))
    secured = dataclasses.replace(
        settings,
        auth_mode="required",
        auth_config_path=str(tmp_path / "auth.toml"),
        auth_frame_timeout_s=2.0,
        **rates,
    )
    client: Client = await aiohttp_client(create_app(secured))
    return client


def as_principal(name: str) -> dict[str, str]:
    return {"X-API-Key": key_for(name)}


def refused_metric(metrics: str, action: str, limit: str = "principal") -> float:
    line = f'streamgate_ratelimit_refused_total{{action="{action}",limit="{limit}"}} '
    return sum(
        float(row.removeprefix(line)) for row in metrics.splitlines() if row.startswith(line)
    )


async def assert_429_with_headers(
    response: aiohttp.ClientResponse, bucket: str, burst: int, window_s: int
) -> None:
    assert response.status == 429, await response.text()
    assert response.content_type == "application/problem+json"
    assert int(response.headers["Retry-After"]) >= 1
    assert response.headers["RateLimit"].startswith("remaining=0, reset=")
    assert response.headers["RateLimit-Policy"] == f'"{bucket}";q={burst};w={window_s}'


OVERRIDES = '''
[[limits]]
principals = ["{gold}"]
messages_per_s = 0.5    # burst 10 at burst_s 20: above the default

[[limits]]
principals = ["{slow}"]
messages_per_s = 0.1    # burst 2: below the default
'''


async def test_overridden_principal_gets_its_own_limit(
        aiohttp_client: Any, gateway_settings: GatewaySettings, topic_name: str, tmp_path: Path,
        principals: dict[str, str]) -> None:
    client = await secured_gateway(
        aiohttp_client, gateway_settings, tmp_path, principals, OVERRIDES,
        rate_limit_principal_messages_per_s=0.25, rate_limit_burst_s=20,  # burst 5
    )
    gold, basic, slow = (as_principal(principals[r]) for r in ("gold", "basic", "slow"))
    url = f"/v1/topics/{topic_name}/messages"
    assert (
        await client.post("/v1/topics", json={"name": topic_name, "partitions": 1}, headers=gold)
    ).status == 201

    def batch(n: int) -> dict[str, Any]:
        return {"messages": [{"value": i} for i in range(n)]}

    golden = await client.post(url, json=batch(8), headers=gold)
    assert golden.status == 200, "8 messages are over the default burst of 5 but within gold's 10"
    assert golden.headers["RateLimit-Policy"] == '"messages";q=10;w=20'
    assert golden.headers["RateLimit"].startswith("remaining=2,")
    await assert_429_with_headers(
        await client.post(url, json=batch(3), headers=gold), "messages", 10, 20
    )

    assert (await client.post(url, json=batch(5), headers=basic)).status == 200
    refused = await client.post(url, json=batch(1), headers=basic)
    await assert_429_with_headers(refused, "messages", 5, 20)
    assert (await refused.json())["detail"] == "principal rate limit exceeded"

    assert (await client.post(url, json=batch(2), headers=slow)).status == 200
    await assert_429_with_headers(
        await client.post(url, json=batch(1), headers=slow), "messages", 2, 20
    )
    too_big = await client.post(url, json=batch(3), headers=slow)
    assert too_big.status == 413, "more than slow's whole burst can never be admitted"

    assert await stored_as(client, topic_name, gold) == 8 + 5 + 2, (
        "refused batches must write nothing"
    )
    metrics = await (await client.get("/metrics")).text()
    assert refused_metric(metrics, "publish") == 4, (
        "three 429s and the 413 were refused by a rate limit"
    )
    assert (
        f'streamgate_publish_rate_limited_total{{limit="principal",topic="{topic_name}"}} 4.0'
        in metrics
    )


async def stored_as(client: Client, topic: str, headers: dict[str, str]) -> int:
    response = await client.get(
        f"/v1/topics/{topic}/partitions/0/messages", params={"limit": "1000"}, headers=headers
    )
    assert response.status == 200, await response.text()
    return len((await response.json())["messages"])


READ_OVERRIDES = '''
[[limits]]
principals = ["{gold}"]
reads_per_s = "unlimited"

[[limits]]
principals = ["{other}"]
reads_per_s = 0.2    # burst 6 at burst_s 30
'''


async def test_replay_and_pull_share_a_read_limit(
        aiohttp_client: Any, gateway_settings: GatewaySettings, topic_name: str, tmp_path: Path,
        principals: dict[str, str]) -> None:
    client = await secured_gateway(
        aiohttp_client, gateway_settings, tmp_path, principals, READ_OVERRIDES,
        rate_limit_principal_reads_per_s=0.1, rate_limit_burst_s=30,  # burst 3
    )
    gold, basic, other = (as_principal(principals[r]) for r in ("gold", "basic", "other"))
    assert (
        await client.post("/v1/topics", json={"name": topic_name, "partitions": 1}, headers=gold)
    ).status == 201
    assert (
        await client.post(
            f"/v1/topics/{topic_name}/messages", json={"messages": [{"value": 1}]}, headers=gold
        )
    ).status == 200
    replay = f"/v1/topics/{topic_name}/partitions/0/messages"
    pull = ("/v1/groups/readers/pull", {"topic": topic_name, "max_messages": 1})

    first = await client.get(replay, headers=basic)
    assert first.status == 200
    assert first.headers["RateLimit-Policy"] == '"reads";q=3;w=30'
    assert first.headers["RateLimit"].startswith("remaining=2,")
    assert (await client.post(pull[0], json=pull[1], headers=basic)).status == 200
    assert (await client.get(replay, headers=basic)).status == 200
    refused_replay = await client.get(replay, headers=basic)
    await assert_429_with_headers(refused_replay, "reads", 3, 30)
    assert (await refused_replay.json())["detail"] == "principal reads rate limit exceeded"
    refused_pull = await client.post(pull[0], json=pull[1], headers=basic)
    await assert_429_with_headers(refused_pull, "reads", 3, 30)

    # Nothing was read for the refused pull: the message is still undelivered to the group.
    described = await (
        await client.get(f"/v1/groups/readers?topic={topic_name}", headers=gold)
    ).json()
    assert described["topics"][0]["partitions"][0]["pending"] == 1, (
        "only the admitted pull delivered it"
    )

    for _ in range(6):
        assert (await client.get(replay, headers=other)).status == 200, "other's override allows 6"
    await assert_429_with_headers(await client.get(replay, headers=other), "reads", 6, 30)
    for _ in range(20):
        unlimited = await client.get(replay, headers=gold)
        assert unlimited.status == 200
        assert "RateLimit" not in unlimited.headers
    metrics = await (await client.get("/metrics", headers=gold)).text()
    assert refused_metric(metrics, "read") == 3


SUBSCRIBE_OVERRIDES = '''
[[limits]]
principals = ["{gold}"]
subscribes_per_s = 1    # burst 30
'''


async def test_subscriptions_over_the_rate_get_429_or_4429(
        aiohttp_client: Any, gateway_settings: GatewaySettings, topic_name: str, tmp_path: Path,
        principals: dict[str, str]) -> None:
    client = await secured_gateway(
        aiohttp_client, gateway_settings, tmp_path, principals, SUBSCRIBE_OVERRIDES,
        rate_limit_principal_subscribes_per_s=0.1, rate_limit_burst_s=30,  # burst 3
    )
    gold, basic = as_principal(principals["gold"]), as_principal(principals["basic"])
    assert (
        await client.post("/v1/topics", json={"name": topic_name, "partitions": 1}, headers=gold)
    ).status == 201
    url = f"/v1/subscribe?topic={topic_name}&mode=broadcast"

    for _ in range(2):  # a reconnect storm: connect, drop, connect again
        ws = await client.ws_connect(url, headers=basic)
        assert (await ws.receive_json(timeout=5))["type"] == "assignment"
        await ws.close()
    by_frame = await client.ws_connect(url)
    await by_frame.send_json({"type": "auth", "api_key": key_for(principals["basic"])})
    assert (await by_frame.receive_json(timeout=5))["type"] == "authenticated"
    assert (await by_frame.receive_json(timeout=5))["type"] == "assignment", (
        "the third fits the burst of 3"
    )
    await by_frame.close()

    with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
        await client.ws_connect(url, headers=basic)
    assert refused.value.status == 429
    assert refused.value.headers is not None
    assert int(refused.value.headers["Retry-After"]) >= 1
    assert refused.value.headers["RateLimit"].startswith("remaining=0, reset=")
    assert refused.value.headers["RateLimit-Policy"] == '"subscribes";q=3;w=30'

    async with client.ws_connect(url) as late:
        await late.send_json({"type": "auth", "api_key": key_for(principals["basic"])})
        assert (await late.receive_json(timeout=5))["type"] == "authenticated"
        closed = await late.receive(timeout=5)
        assert (closed.type, closed.data) == (
            aiohttp.WSMsgType.CLOSE,
            WS_CLOSE_TOO_MANY_CONNECTIONS,
        )
        assert closed.extra.startswith("principal subscribes rate limit exceeded; retry in ")

    for _ in range(5):
        async with client.ws_connect(url, headers=gold) as ws:
            assert (await ws.receive_json(timeout=5))["type"] == "assignment", (
                "gold's override allows 30"
            )
    metrics = await (await client.get("/metrics")).text()
    assert refused_metric(metrics, "subscribe") == 2


async def test_plain_get_of_subscribe_is_400_and_free(
        aiohttp_client: Any, gateway_settings: GatewaySettings, topic_name: str, tmp_path: Path,
        principals: dict[str, str]) -> None:
    client = await secured_gateway(
        aiohttp_client, gateway_settings, tmp_path, principals, "",
        rate_limit_principal_subscribes_per_s=0.1, rate_limit_burst_s=20,  # burst 2
    )
    basic = as_principal(principals["basic"])
    assert (await client.post("/v1/topics", json={"name": topic_name, "partitions": 1},
                              headers=as_principal(principals["gold"]))).status == 201
    url = f"/v1/subscribe?topic={topic_name}&mode=broadcast"
    for _ in range(5):  # more than the burst: none of them may be charged
        plain = await client.get(url, headers=basic)
        assert plain.status == 400
        assert plain.content_type == "application/problem+json"
        assert "RateLimit" not in plain.headers
    for _ in range(2):
        async with client.ws_connect(url, headers=basic) as ws:
            assert (await ws.receive_json(timeout=5))["type"] == "assignment", (
                "the burst of 2 is still whole"
            )
    with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
        await client.ws_connect(url, headers=basic)
    assert refused.value.status == 429, "the third subscription is over the burst"
    metrics = await (await client.get("/metrics", headers=basic)).text()
    assert refused_metric(metrics, "subscribe") == 1
