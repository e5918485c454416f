"""Push subscriptions on the real cluster and etcd: a local endpoint gets signed requests, acks by
answering 2xx, retries keep each key's order, 4xx goes to the dead letters, Retry-After and pauses
hold requests back, secrets rotate, and refused endpoints are never called."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable
from typing import Any

import orjson
import pytest
from aiohttp.test_utils import TestClient, TestServer
from push_receiver import Receiver
from subscribers import wait_until

from gateway.app import create_app
from gateway.settings import GatewaySettings

Client = TestClient[Any, Any]
Gateways = Callable[..., Any]


@pytest.fixture
def gateway(aiohttp_client: Any, gateway_settings: GatewaySettings) -> Gateways:
    async def start(name: str = "push-gw", **changes: Any) -> Client:
        settings = dataclasses.replace(gateway_settings, **{
            "node_id": name, "lag_interval_s": 0.2, "sweep_interval_s": 0.5,
            "push_allowed_cidrs": ("127.0.0.0/8",), "push_allow_http": True, **changes})
        client: Client = await aiohttp_client(create_app(settings))
        return client

    return start


@pytest.fixture
async def receiver(aiohttp_server: Any) -> tuple[Receiver, str]:
    state = Receiver()
    server: TestServer = await aiohttp_server(state.app())
    return state, f"http://127.0.0.1:{server.port}/hook"


async def create_topic(client: Client, topic: str, partitions: int = 2) -> None:
    response = await client.post("/v1/topics", json={"name": topic, "partitions": partitions})
    assert response.status == 201, await response.text()


async def publish(client: Client, topic: str, messages: list[dict[str, Any]]) -> None:
    response = await client.post(f"/v1/topics/{topic}/messages", json={"messages": messages})
    assert response.status == 200, await response.text()


async def subscribe(client: Client, topic: str, endpoint: str, **fields: Any) -> dict[str, Any]:
    response = await client.put(f"/v1/topics/{topic}/push/hooks",
                                json={"endpoint": endpoint, "start": "earliest",
                                      "retry_backoff_ms": 50, "retry_backoff_max_ms": 200,
                                      **fields})
    assert response.status == 201, await response.text()
    doc: dict[str, Any] = await response.json()
    return doc


async def pushing_one_partition(gateway: Gateways, topic: str, endpoint: str,
                                **fields: Any) -> Client:
    """A gateway with a one-partition topic pushed to ``endpoint``."""
    client = await gateway()
    await create_topic(client, topic, partitions=1)
    await subscribe(client, topic, endpoint, **fields)
    return client


async def describe(client: Client, topic: str) -> dict[str, Any]:
    response = await client.get(f"/v1/topics/{topic}/push/hooks")
    assert response.status == 200, await response.text()
    doc: dict[str, Any] = await response.json()
    return doc


async def settled_group(client: Client, topic: str, timeout_s: float = 30.0) -> None:
    """Wait until the push group has nothing pending and nothing unread on any partition."""
    deadline = time.monotonic() + timeout_s
    while True:
        doc = await (await client.get("/v1/groups/hooks", params={"topic": topic})).json()
        partitions = doc["topics"][0]["partitions"] if "topics" in doc else None
        if partitions and all(p["pending"] == 0 and p["lag"] == 0 for p in partitions):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"the push group never settled: {doc}")
        await asyncio.sleep(0.1)


async def dead_letters(client: Client, topic: str, timeout_s: float = 30.0) -> dict[str, Any]:
    """The first page of the topic's dead letters, once there is one."""
    deadline = time.monotonic() + timeout_s
    while True:
        response = await client.get(f"/v1/topics/{topic}.dlq/partitions/0/messages")
        letters: dict[str, Any] = await response.json()
        if response.status == 200 and letters["messages"]:
            return letters
        if time.monotonic() > deadline:
            raise AssertionError("no dead letter")
        await asyncio.sleep(0.1)


async def wait_for(predicate: Callable[[], Any], what: str, timeout_s: float = 30.0) -> None:
    await wait_until(predicate, timeout_s, what)


async def described_once(client: Client, topic: str, predicate: Callable[[dict[str, Any]], bool],
                         what: str, timeout_s: float = 30.0) -> dict[str, Any]:
    """The subscription's view once ``predicate`` holds for it."""
    deadline = time.monotonic() + timeout_s
    while True:
        view = await describe(client, topic)
        if predicate(view):
            return view
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}: {view}")
        await asyncio.sleep(0.1)


async def test_messages_reach_the_endpoint_signed_and_are_acked_by_its_2xx(
        gateway: Gateways, receiver: tuple[Receiver, str], topic_name: str) -> None:
    state, url = receiver
    client = await gateway()
    await create_topic(client, topic_name)
    created = await subscribe(client, topic_name, url, batch_max_messages=10)
    assert created["secret"].startswith("whsec_")
    assert created["format"] == "json"
    state.secrets = [created["secret"]]
    await publish(client, topic_name, [{"key": f"k{i % 4}", "value": {"n": i}} for i in range(40)])
    await wait_for(lambda: len(state.acked()) == 40, "every message acked by the endpoint")
    assert state.unverified == 0
    assert sorted(m["value"]["n"] for m in state.acked()) == list(range(40))
    first = state.requests[0]
    assert first.headers["webhook-id"].startswith(f"{topic_name}:")
    assert first.headers["Content-Type"] == "application/json"
    for values in state.values_by_key().values():
        assert [v["n"] for v in values] == sorted(v["n"] for v in values)

    await settled_group(client, topic_name)
    view = await described_once(client, topic_name,
                                lambda v: v["health"]["state"] == "healthy",
                                "the owners' posted health")
    assert "secret" not in view
    assert all("secret" not in s for s in view["secrets"])
    assert set(view["health"]["partitions"]) == {"0", "1"}
    assert {h["node"] for h in view["health"]["partitions"].values()} == {"push-gw"}


async def test_each_keys_order_holds_while_the_endpoint_fails_and_recovers(
        gateway: Gateways, receiver: tuple[Receiver, str], topic_name: str) -> None:
    state, url = receiver

    def flaky(number: int, messages: list[dict[str, Any]]) -> tuple[int, dict[str, str]]:
        return (500, {}) if number % 3 == 0 else (200, {})

    state.answer = flaky
    client = await pushing_one_partition(gateway, topic_name, url, max_in_flight=4,
                                         max_deliveries=50)
    await publish(client, topic_name, [{"key": f"k{i % 3}", "value": i} for i in range(30)])
    await wait_for(lambda: len({m["value"] for m in state.acked()}) == 30,
                   "every message acked despite the failures")
    by_key = state.values_by_key()
    for key, values in by_key.items():
        deduped = list(dict.fromkeys(values))
        assert deduped == sorted(deduped), f"key {key} out of order: {values}"
    assert any(r.status == 500 for r in state.requests)
    assert max(m["delivery_count"] for m in state.acked()) > 1


async def test_a_4xx_answer_sends_the_message_to_the_dead_letters(
        gateway: Gateways, receiver: tuple[Receiver, str], topic_name: str) -> None:
    state, url = receiver

    def refuse_poison(number: int, messages: list[dict[str, Any]]) -> tuple[int, dict[str, str]]:
        return (422, {}) if any(m["value"] == "poison" for m in messages) else (204, {})

    state.answer = refuse_poison
    client = await pushing_one_partition(gateway, topic_name, url)
    await publish(client, topic_name, [{"key": "a", "value": "fine"},
                                       {"key": "a", "value": "poison"},
                                       {"key": "a", "value": "after"}])
    await wait_for(lambda: [m["value"] for m in state.acked()] == ["fine", "after"],
                   "the key's next message after the rejected one")
    letters = await dead_letters(client, topic_name)
    letter = letters["messages"][0]
    assert letter["value"] == "poison"
    assert letter["headers"]["sg-dlq-reason"] == "push: HTTP 422"
    assert sum(r.status == 422 for r in state.requests) == 1


async def test_retry_after_holds_the_next_request_back(
        gateway: Gateways, receiver: tuple[Receiver, str], topic_name: str) -> None:
    state, url = receiver

    def busy_once(number: int, messages: list[dict[str, Any]]) -> tuple[int, dict[str, str]]:
        return (429, {"Retry-After": "2"}) if number == 1 else (204, {})

    state.answer = busy_once
    client = await pushing_one_partition(gateway, topic_name, url)
    await publish(client, topic_name, [{"key": "a", "value": 1}])
    await wait_for(lambda: len(state.acked()) == 1, "the message acked after the wait")
    first, second = state.requests[0], state.requests[1]
    assert first.status == 429
    assert second.at - first.at >= 1.9
    assert second.headers["webhook-id"] == first.headers["webhook-id"]


async def pushing_into_failures(gateway: Gateways, receiver: tuple[Receiver, str], topic: str,
                                status: int, **fields: Any) -> tuple[Receiver, Client]:
    """One message on a one-partition topic pushed to an endpoint answering ``status`` always."""
    state, url = receiver
    state.answer = lambda number, messages: (status, {})
    client = await pushing_one_partition(gateway, topic, url, timeout_ms=500, **fields)
    await publish(client, topic, [{"key": "a", "value": "doomed"}])
    return state, client


async def test_a_failing_endpoint_is_named_as_the_cause_of_the_groups_stall(
        gateway: Gateways, receiver: tuple[Receiver, str], topic_name: str) -> None:
    _, client = await pushing_into_failures(gateway, receiver, topic_name, 503,
                                            ack_timeout_ms=2000, max_deliveries=1000)
    deadline = time.monotonic() + 2 * 2 + 5  # two ack timeouts and the lag rounds' slack
    verdict: dict[str, Any] | None = None
    while time.monotonic() < deadline:
        doc = await (await client.get("/v1/groups/hooks", params={"topic": topic_name})).json()
        verdict = doc["topics"][0]["partitions"][0]["verdict"] if "topics" in doc else None
        if verdict is not None and verdict["state"] == "stalled":
            break
        await asyncio.sleep(0.1)
    assert verdict is not None
    assert (verdict["state"], verdict["reason"]) == ("stalled", "endpoint_failing")
    assert "HTTP 503" in verdict["detail"]
    view = await describe(client, topic_name)
    assert view["health"]["state"] in ("open", "failing")
    assert view["health"]["partitions"]["0"]["last_status"] == 503


async def test_a_message_failing_max_deliveries_times_goes_to_the_dead_letters(
        gateway: Gateways, receiver: tuple[Receiver, str], topic_name: str) -> None:
    state, client = await pushing_into_failures(gateway, receiver, topic_name, 500,
                                                max_deliveries=2, ack_timeout_ms=1500)
    letter = (await dead_letters(client, topic_name))["messages"][0]
    assert letter["value"] == "doomed"
    assert letter["headers"]["sg-dlq-reason"] == "max_deliveries exceeded"
    assert [r.messages[0]["delivery_count"] for r in state.requests] == [1, 2]


async def test_a_redirect_is_never_followed_and_the_message_is_retried(
        gateway: Gateways, receiver: tuple[Receiver, str], aiohttp_server: Any,
        topic_name: str) -> None:
    state, url = receiver
    elsewhere = Receiver()
    other: TestServer = await aiohttp_server(elsewhere.app())

    def redirect_once(number: int, messages: list[dict[str, Any]]) -> tuple[int, dict[str, str]]:
        if number == 1:
            return 307, {"Location": f"http://127.0.0.1:{other.port}/hook"}
        return 204, {}

    state.answer = redirect_once
    client = await pushing_one_partition(gateway, topic_name, url)
    await publish(client, topic_name, [{"key": "a", "value": 1}])
    await wait_for(lambda: len(state.acked()) == 1, "the message acked after the redirect")
    assert [r.status for r in state.requests] == [307, 204]
    assert elsewhere.requests == []


async def test_requests_keep_to_the_subscriptions_rate(
        gateway: Gateways, receiver: tuple[Receiver, str], topic_name: str) -> None:
    state, url = receiver
    client = await pushing_one_partition(gateway, topic_name, url, rate_per_s=4, key_ordered=False)
    await publish(client, topic_name, [{"key": f"k{n}", "value": n} for n in range(12)])
    await wait_for(lambda: len(state.acked()) == 12, "every message, one a request")
    # a bucket of four a second holding four: the first four at once, then one every 0.25 s
    assert state.requests[-1].at - state.requests[0].at >= 1.75


async def test_cloudevents_format_sends_each_message_as_a_binary_event(
        gateway: Gateways, receiver: tuple[Receiver, str], topic_name: str) -> None:
    state, url = receiver
    client = await gateway()
    await create_topic(client, topic_name, partitions=1)
    created = await subscribe(client, topic_name, url, format="cloudevents")
    state.secrets = [created["secret"]]
    response = await client.post(
        f"/v1/topics/{topic_name}/messages", data=b'{"total": 42}',
        headers={"Content-Type": "application/json", "ce-specversion": "1.0", "ce-id": "order-7",
                 "ce-source": "/shop", "ce-type": "order.placed", "ce-subject": "alice"})
    assert response.status == 200, await response.text()
    await wait_for(lambda: len(state.requests) == 1, "the event")
    event = state.requests[0]
    assert event.status == 204
    assert orjson.loads(event.body) == {"total": 42}
    assert event.headers["Content-Type"].startswith("application/json")
    assert (event.headers["ce-id"], event.headers["ce-type"], event.headers["ce-subject"]) == (
        "order-7", "order.placed", "alice")
    assert state.unverified == 0


async def test_a_paused_push_group_sends_nothing_until_resumed(
        gateway: Gateways, receiver: tuple[Receiver, str], topic_name: str) -> None:
    state, url = receiver
    client = await pushing_one_partition(gateway, topic_name, url)
    await publish(client, topic_name, [{"key": "a", "value": 0}])
    await wait_for(lambda: len(state.acked()) == 1, "the first message")
    paused = await client.post("/v1/groups/hooks/pause", params={"topic": topic_name})
    assert paused.status == 200
    view = await describe(client, topic_name)
    assert view["paused"] is True
    await publish(client, topic_name, [{"key": "a", "value": 1}])
    await asyncio.sleep(1.5)
    assert len(state.requests) == 1
    resumed = await client.post("/v1/groups/hooks/resume", params={"topic": topic_name})
    assert resumed.status == 200
    await wait_for(lambda: len(state.acked()) == 2, "the message held while paused")


async def test_a_rotated_secret_signs_beside_the_old_one_until_it_expires(
        gateway: Gateways, receiver: tuple[Receiver, str], topic_name: str) -> None:
    state, url = receiver
    client = await gateway()
    await create_topic(client, topic_name, partitions=1)
    old = (await subscribe(client, topic_name, url))["secret"]
    state.secrets = [old]
    rotated = await client.post(f"/v1/topics/{topic_name}/push/hooks/rotate-secret",
                                json={"previous_expires_in_s": 3600})
    assert rotated.status == 200, await rotated.text()
    doc = await rotated.json()
    new = doc["secret"]
    assert new != old
    assert len(doc["secrets"]) == 2
    await publish(client, topic_name, [{"key": "a", "value": 1}])
    await wait_for(lambda: len(state.acked()) == 1, "a request signed while both are live")
    assert len(state.requests[0].headers["webhook-signature"].split(" ")) == 2
    state.secrets = [new]
    retired = await client.post(f"/v1/topics/{topic_name}/push/hooks/rotate-secret",
                                json={"previous_expires_in_s": 0})
    newest = (await retired.json())["secret"]
    state.secrets = [newest]
    await publish(client, topic_name, [{"key": "a", "value": 2}])
    await wait_for(lambda: len(state.acked()) == 2, "a request signed by the newest alone")
    assert state.unverified == 0
    assert len(state.requests[-1].headers["webhook-signature"].split(" ")) == 1


@pytest.mark.parametrize("endpoint", [
    "http://169.254.169.254/latest/meta-data", "http://10.0.0.1/hook", "http://[::1]/hook",
    "ftp://127.0.0.1/hook", "http://user:pw@127.0.0.1/hook", "http://2130706433/hook",
])
async def test_an_endpoint_outside_the_allowed_networks_is_refused_and_nothing_is_stored(
        gateway: Gateways, topic_name: str, endpoint: str) -> None:
    client = await gateway()
    await create_topic(client, topic_name, partitions=1)
    response = await client.put(f"/v1/topics/{topic_name}/push/hooks", json={"endpoint": endpoint})
    assert response.status == 422, await response.text()
    problem = await response.json()
    assert problem["type"].endswith("/push-endpoint-refused")
    assert problem["pointer"] == "/endpoint"
    listed = await (await client.get(f"/v1/topics/{topic_name}/push")).json()
    assert listed == {"subscriptions": []}


async def test_push_is_refused_on_a_gateway_that_allows_no_endpoint(
        gateway: Gateways, topic_name: str) -> None:
    client = await gateway(push_allowed_cidrs=())
    await create_topic(client, topic_name, partitions=1)
    response = await client.put(f"/v1/topics/{topic_name}/push/hooks",
                                json={"endpoint": "https://hooks.example.com/x"})
    assert response.status == 422
    assert "not enabled" in (await response.json())["detail"]


async def test_a_name_resolving_to_a_refused_address_is_never_connected(
        gateway: Gateways, receiver: tuple[Receiver, str], topic_name: str) -> None:
    state, url = receiver
    client = await gateway(push_allowed_cidrs=(), push_allowed_hosts=("localhost",))
    await create_topic(client, topic_name, partitions=1)
    await subscribe(client, topic_name, url.replace("127.0.0.1", "localhost"))
    await publish(client, topic_name, [{"key": "a", "value": 1}])
    view = await described_once(
        client, topic_name,
        lambda v: (v["health"]["partitions"]["0"] or {}).get("last_error") is not None,
        "the refused connection in the health")
    error = view["health"]["partitions"]["0"]["last_error"]
    assert "127.0.0.1" in error or "refused" in error.lower(), error
    assert state.requests == []


async def test_bad_definitions_get_a_pointer_and_write_nothing(
        gateway: Gateways, receiver: tuple[Receiver, str], topic_name: str) -> None:
    _, url = receiver
    client = await gateway()
    await create_topic(client, topic_name, partitions=1)
    for body, pointer in [
        ({"endpoint": url, "format": "xml"}, "/format"),
        ({"endpoint": url, "format": "cloudevents", "batch_max_messages": 5},
         "/batch_max_messages"),
        ({"endpoint": url, "timeout_ms": 30_000, "ack_timeout_ms": 20_000}, "/ack_timeout_ms"),
        ({"endpoint": url, "headers": {"Host": "evil"}}, "/headers/Host"),
        ({"endpoint": url, "headers": {"X-A": "a\r\nX-B: b"}}, "/headers/X-A"),
        ({"endpoint": url, "secret": "nope"}, "/secret"),
        ({"endpoint": url, "surprise": 1}, "/surprise"),
    ]:
        response = await client.put(f"/v1/topics/{topic_name}/push/hooks", json=body)
        assert response.status == 422, (body, await response.text())
        assert (await response.json())["pointer"] == pointer
    assert (await client.get(f"/v1/topics/{topic_name}/push/hooks")).status == 404


async def test_a_deleted_push_subscription_sends_no_more(
        gateway: Gateways, receiver: tuple[Receiver, str], topic_name: str) -> None:
    state, url = receiver
    client = await pushing_one_partition(gateway, topic_name, url)
    await publish(client, topic_name, [{"key": "a", "value": 1}])
    await wait_for(lambda: len(state.acked()) == 1, "the first message")
    assert (await client.delete(f"/v1/topics/{topic_name}/push/hooks")).status == 204
    assert (await client.delete(f"/v1/topics/{topic_name}/push/hooks")).status == 404
    await asyncio.sleep(1.5)
    await publish(client, topic_name, [{"key": "a", "value": 2}])
    await asyncio.sleep(1.5)
    assert len(state.requests) == 1
