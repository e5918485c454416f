"""Push subscriptions through the Python client: ``Admin``'s push calls against a real gateway and
a local receiver, and ``streamgate push`` as a user runs it against a gateway process."""

from __future__ import annotations

import asyncio
import dataclasses
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import orjson
import pytest
from aiohttp.test_utils import TestClient, TestServer
from test_client_cli_status import run_cli, user_env

from gateway.app import create_app
from gateway.settings import GatewaySettings
from streamgate_client import verify_webhook
from streamgate_client.admin import Admin
from streamgate_client.admin_types import PushSubscriptionDescribed
from streamgate_client.errors import ProblemError
from tests.integration.gateway.push_receiver import Receiver
from tests.served import serve_gateway

pytestmark = pytest.mark.integration
WAIT_S = 30.0
T = TypeVar("T")


@pytest.fixture
async def push_gateway(aiohttp_client: Any, gateway_settings: GatewaySettings) -> str:
    """A gateway allowed to push to this machine over plain HTTP; its base URL."""
    settings = dataclasses.replace(gateway_settings, lag_interval_s=0.2, sweep_interval_s=0.5,
                                   push_allowed_cidrs=("127.0.0.0/8",), push_allow_http=True)
    client: TestClient[Any, Any] = await aiohttp_client(create_app(settings))
    return str(client.make_url("")).rstrip("/")


@pytest.fixture
async def receiver(aiohttp_server: Any) -> tuple[Receiver, str]:
    state = Receiver()
    server: TestServer = await aiohttp_server(state.app())
    return state, f"http://127.0.0.1:{server.port}/hook"


async def eventually(read: Callable[[], Awaitable[T]], holds: Callable[[T], bool],
                     what: str) -> T:
    """What ``read`` returns once ``holds`` is true of it (within WAIT_S)."""
    deadline = time.monotonic() + WAIT_S
    while True:
        value = await read()
        if holds(value):
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}: {value}")
        await asyncio.sleep(0.1)


async def acked(state: Receiver) -> list[dict[str, Any]]:
    return state.acked()


async def publish(base_url: str, topic: str, value: Any) -> None:
    import aiohttp

    async with aiohttp.ClientSession() as session, session.post(
            f"{base_url}/v1/topics/{topic}/messages",
            json={"messages": [{"key": "k", "value": value}]}) as response:
        assert response.status == 200, await response.text()


async def test_a_push_subscription_made_with_admin_delivers_signed_messages_and_shows_health(
        push_gateway: str, receiver: tuple[Receiver, str], topic_name: str) -> None:
    state, url = receiver
    async with Admin(push_gateway) as admin:
        await admin.create_topic(topic_name, 2)
        created = await admin.put_push(topic_name, "hooks", url, batch_max_messages=5,
                                       start="earliest", headers={"Authorization": "Bearer t"},
                                       retry_backoff_ms=50)
        assert created.secret is not None
        assert created.secret.startswith("whsec_")
        assert (created.topic, created.group, created.endpoint) == (topic_name, "hooks", url)
        assert created.batch_max_messages == 5
        assert created.headers == {"Authorization": "***"}
        await publish(push_gateway, topic_name, {"n": 1})
        await eventually(lambda: acked(state), bool, "a pushed message")
        first = state.requests[0]
        assert first.headers["Authorization"] == "Bearer t"
        verify_webhook([created.secret], first.headers, first.body)
        assert state.acked()[0]["value"] == {"n": 1}

        described = await eventually(lambda: admin.push_subscription(topic_name, "hooks"),
                                     _healthy, "the owners' posted health")
        assert isinstance(described, PushSubscriptionDescribed)
        assert set(described.health.partitions) == {"0", "1"}
        assert [s.group for s in await admin.push_subscriptions(topic_name)] == ["hooks"]


def _healthy(described: PushSubscriptionDescribed) -> bool:
    return described.health.state == "healthy"


async def test_a_rotated_secret_signs_beside_the_old_one_until_it_expires(
        push_gateway: str, receiver: tuple[Receiver, str], topic_name: str) -> None:
    state, url = receiver
    async with Admin(push_gateway) as admin:
        await admin.create_topic(topic_name, 1)
        created = await admin.put_push(topic_name, "hooks", url, start="earliest")
        rotation = await admin.rotate_push_secret(topic_name, "hooks",
                                                  previous_expires_in_s=3600)
        assert rotation.secret != created.secret
        assert len(rotation.secrets) == 2
        assert rotation.secrets[0].expires_at_ms is None
        assert rotation.secrets[1].expires_at_ms is not None
        await publish(push_gateway, topic_name, "after the rotation")
        await eventually(lambda: acked(state), bool, "a pushed message")
        request = state.requests[0]
        assert created.secret is not None
        verify_webhook([rotation.secret], request.headers, request.body)
        verify_webhook([created.secret], request.headers, request.body)
        retired = await admin.rotate_push_secret(topic_name, "hooks", previous_expires_in_s=0)
        assert len(retired.secrets) == 1
        assert retired.secrets[0].id not in {s.id for s in rotation.secrets}


async def test_a_deleted_push_subscription_is_gone_and_unknown_ones_raise_not_found(
        push_gateway: str, receiver: tuple[Receiver, str], topic_name: str) -> None:
    _, url = receiver
    async with Admin(push_gateway) as admin:
        await admin.create_topic(topic_name, 1)
        await admin.put_push(topic_name, "hooks", url)
        await admin.delete_push(topic_name, "hooks")
        assert await admin.push_subscriptions(topic_name) == []
        for call in (admin.push_subscription(topic_name, "hooks"),
                     admin.delete_push(topic_name, "hooks"),
                     admin.rotate_push_secret(topic_name, "hooks")):
            with pytest.raises(ProblemError) as raised:
                await call
            assert raised.value.status == 404
            assert raised.value.type.endswith("push-subscription-not-found")


async def test_a_refused_endpoint_and_a_bad_field_raise_422_pointing_at_the_field(
        push_gateway: str, receiver: tuple[Receiver, str], topic_name: str) -> None:
    _, url = receiver
    async with Admin(push_gateway) as admin:
        await admin.create_topic(topic_name, 1)
        with pytest.raises(ProblemError) as refused:
            await admin.put_push(topic_name, "hooks", "http://10.1.2.3/hook")
        assert refused.value.status == 422
        assert refused.value.type.endswith("push-endpoint-refused")
        assert refused.value.pointer == "/endpoint"
        with pytest.raises(ProblemError) as invalid:
            await admin.put_push(topic_name, "hooks", url, format="cloudevents",
                                 batch_max_messages=10)
        assert invalid.value.status == 422
        assert invalid.value.pointer == "/batch_max_messages"
        assert await admin.push_subscriptions(topic_name) == []


# --- the CLI --------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def push_gateway_process(redis_cluster: Any, etcd_server: Any) -> Iterator[str]:
    """A gateway process allowed to push to this machine over plain HTTP."""
    yield from serve_gateway(redis_cluster, etcd_server, {
        "STREAMGATE_PUSH_ALLOWED_CIDRS": "127.0.0.0/8", "STREAMGATE_PUSH_ALLOW_HTTP": "true",
        "STREAMGATE_LAG_INTERVAL_S": "0.2"})


async def cli(env: dict[str, str], *args: str) -> str:
    """``streamgate ARGS``' stdout, once it exited 0."""
    done = await asyncio.to_thread(run_cli, env, *args)
    assert done.returncode == 0, done.stderr
    return done.stdout


async def test_streamgate_push_creates_lists_describes_and_deletes_a_subscription(
        push_gateway_process: str, receiver: tuple[Receiver, str], tmp_path: Path) -> None:
    state, url = receiver
    env = user_env(tmp_path, STREAMGATE_URL=push_gateway_process)
    topic = f"push-cli-{uuid.uuid4().hex[:8]}"
    await cli(env, "topics", "create", topic, "--partitions", "1")
    created = await cli(env, "push", "create", topic, "hooks", "--endpoint", url, "--start",
                        "earliest", "--batch", "10", "--header", "X-Team: blue")
    secret_lines = [line for line in created.splitlines()
                    if line.startswith("signing secret (shown once): whsec_")]
    assert len(secret_lines) == 1
    state.secrets = [secret_lines[0].rsplit(" ", 1)[1]]
    await cli(env, "produce", topic, '{"n": 7}', "-k", "k")
    await eventually(lambda: acked(state), bool, "a pushed message")
    assert state.unverified == 0
    assert state.requests[0].headers["X-Team"] == "blue"

    listed = [orjson.loads(line) for line in (await cli(env, "push", "list", topic)).splitlines()]
    assert [(s["group"], s["batch_max_messages"]) for s in listed] == [("hooks", 10)]
    assert "secret" not in listed[0]
    assert (await cli(env, "push", "list", topic, "-o", "names")).split() == ["hooks"]

    table = await eventually(lambda: cli(env, "push", "describe", topic, "hooks"),
                             lambda out: "health          healthy" in out, "a healthy endpoint")
    rows = table.splitlines()
    header = next(i for i, line in enumerate(rows) if line.startswith("PARTITION"))
    assert rows[header].split() == ["PARTITION", "NODE", "BREAKER", "FAILURES", "LAST_STATUS",
                                    "LAST_ERROR", "IN_FLIGHT"]
    partition, node, *rest = rows[header + 1].split()
    assert (partition, rest[:2]) == ("0", ["closed", "0"])
    assert node  # the gateway pushing partition 0
    described = orjson.loads(await cli(env, "push", "describe", topic, "hooks", "-o", "json"))
    assert described["headers"] == {"X-Team": "***"}

    rotated = await cli(env, "push", "rotate-secret", topic, "hooks", "--keep-old-s", "0")
    assert rotated.startswith("signing secret (shown once): whsec_")
    assert orjson.loads(await cli(env, "push", "delete", topic, "hooks")) == {
        "deleted": "hooks", "topic": topic}
    missing = await asyncio.to_thread(run_cli, env, "push", "describe", topic, "hooks")
    assert missing.returncode == 1
    assert "404" in missing.stderr
    assert "no push subscription" in missing.stderr
