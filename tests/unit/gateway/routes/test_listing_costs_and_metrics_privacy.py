"""Listings cost what the caller may see and are charged to its reads bucket; /metrics and topic
descriptions keep message keys and group names to those allowed to see them; new groups are charged
to their principal's cap."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from gateway.app import app_with_services
from gateway.auth.errors import GroupsLimitReached
from gateway.auth.keys import hash_api_key
from gateway.delivery.pull import Puller
from gateway.fanout import PER_REQUEST_CONCURRENCY, gather_bounded
from gateway.group_quota import GroupQuota
from gateway.observe.exposition import group_pseudonym
from gateway.observe.metrics import GatewayMetrics
from gateway.publish.publisher import Publisher
from gateway.services import SERVICES, Services
from gateway.settings import GatewaySettings
from gateway.throttle import RateLimits, Throttle
from partitioner.cache import TopicCache
from partitioner.registry import InMemoryTopicRegistry
from partitioner.topics import TopicSettings
from storage.models import Delivery, GroupPartitionState
from tests.unit.gateway.fake_limiter import FakeLimiter
from tests.unit.gateway.memory_store import InMemoryStreamStore

Client = TestClient[Any, Any]
PRINCIPALS = ("alice", "mallory", "writer", "tenant")
AUTH = "".join(f'[[api_keys]]\nprincipal = "{name}"\nsha256 = "{hash_api_key(name + "-key")}"\n\n'
               for name in PRINCIPALS) + '''
[[rules]]
principals = ["alice"]
topics = ["orders"]
actions = ["publish", "subscribe"]

[[rules]]
principals = ["mallory"]
topics = ["mallory-*"]
actions = ["subscribe"]

[[rules]]
principals = ["writer"]
topics = ["orders"]
actions = ["publish"]

[[rules]]
principals = ["tenant"]
topics = ["orders"]
actions = ["publish", "subscribe"]

[[filters]]
principals = ["tenant"]
headers = { tenant = "a" }
'''
LISTINGS = ("/v1/groups", "/v1/groups/billing", "/v1/topics", "/v1/topics/orders")


def key_of(name: str) -> dict[str, str]:
    return {"X-API-Key": f"{name}-key"}


class CountingGroupStore:
    """The group calls the listings make, counted per topic, with the most seen in flight at
    once."""

    def __init__(self) -> None:
        self.calls: dict[str, int] = {}
        self.in_flight = self.most_in_flight = 0

    async def _enter(self, topic: str) -> None:
        self.calls[topic] = self.calls.get(topic, 0) + 1
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        await asyncio.sleep(0)
        self.in_flight -= 1

    async def groups(self, topic: str, partition: int) -> list[str]:
        await self._enter(topic)
        return ["billing"]

    async def state(self, topic: str, partition: int, group: str) -> GroupPartitionState:
        await self._enter(topic)
        return GroupPartitionState(partition, True, None, 0, None, 0)


async def no_dead_letters(topic: str, group: str, delivery: Delivery, reason: str) -> None:
    raise AssertionError("no dead letters here")


async def gateway(aiohttp_client: Any, tmp_path: Path, groups: CountingGroupStore, *,
                  reads_per_s: float | None = None, **settings: Any) -> Client:
    auth = tmp_path / "auth.toml"
    auth.write_text(AUTH)
    config = GatewaySettings(auth_config_path=str(auth), **settings)
    store, metrics = InMemoryStreamStore(), GatewayMetrics.create()
    registry = InMemoryTopicRegistry()
    for name, partitions in (("orders", 3), ("huge", 256)):
        await registry.create(TopicSettings(name, partitions), owner="ops")
    publisher = Publisher(store, store, metrics, config.dedup_ttl_ms, 4, config.retry_after_s)
    await publisher.__aenter__()
    throttle = (
        Throttle(FakeLimiter(), RateLimits(principal_reads_per_s=reads_per_s))
        if reads_per_s
        else None
    )
    services = Services(
        settings=config, store=store, registry=registry, cache=TopicCache(), publisher=publisher,
        metrics=metrics, throttle=throttle,
        puller=Puller(groups, no_dead_letters, metrics),  # type: ignore[arg-type]
    )
    app = app_with_services(services)

    async def close_publisher(_: web.Application) -> None:
        await publisher.aclose()

    app.on_cleanup.append(close_publisher)
    client: Client = await aiohttp_client(app)
    return client


@pytest.fixture
def groups() -> CountingGroupStore:
    return CountingGroupStore()


@pytest.fixture
async def client(aiohttp_client: Any, tmp_path: Path, groups: CountingGroupStore) -> Client:
    return await gateway(aiohttp_client, tmp_path, groups)


async def test_blind_group_listing_makes_no_redis_call(
        client: Client, groups: CountingGroupStore) -> None:
    listed = await client.get("/v1/groups", headers=key_of("mallory"))
    assert (listed.status, await listed.json()) == (200, {"groups": []})
    described = await client.get("/v1/groups/billing", headers=key_of("mallory"))
    assert described.status == 404
    assert groups.calls == {}, "other principals' topics were looked at"


async def test_group_listing_reads_only_readable_topics(
        client: Client, groups: CountingGroupStore) -> None:
    listed = await client.get("/v1/groups", headers=key_of("alice"))
    assert (await listed.json())["groups"] == [{"topic": "orders", "group": "billing"}]
    described = await client.get("/v1/groups/billing", headers=key_of("alice"))
    assert [t["topic"] for t in (await described.json())["topics"]] == ["orders"]
    assert set(groups.calls) == {"orders"}


async def test_per_partition_calls_of_one_listing_are_bounded(aiohttp_client: Any, tmp_path: Path,
                                                              groups: CountingGroupStore) -> None:
    client = await gateway(aiohttp_client, tmp_path, groups, auth_mode="none")
    listed = await client.get("/v1/groups")
    assert {"topic": "huge", "group": "billing"} in (await listed.json())["groups"]
    assert groups.calls["huge"] == 256
    assert 1 < groups.most_in_flight <= PER_REQUEST_CONCURRENCY


async def test_bounded_gather_keeps_order_and_every_slot() -> None:
    assert await gather_bounded(lambda n: asyncio.sleep(0, n * 2), range(20), limit=3) == [
        n * 2 for n in range(20)
    ]
    with pytest.raises(ValueError, match="at least 1"):
        await gather_bounded(lambda n: asyncio.sleep(0, n), [1], limit=0)


@pytest.mark.parametrize("path", LISTINGS)
async def test_listings_are_charged_to_the_reads_rate_limit(
    aiohttp_client: Any, tmp_path: Path, groups: CountingGroupStore, path: str
) -> None:
    client = await gateway(aiohttp_client, tmp_path, groups, reads_per_s=2)
    statuses = [(await client.get(path, headers=key_of("alice"))).status for _ in range(3)]
    assert statuses[:2] in ([200, 200], [404, 404]), statuses
    assert statuses[2] == 429, statuses
    refused = await client.get(path, headers=key_of("alice"))
    assert refused.headers["Content-Type"].startswith("application/problem+json")
    assert "Retry-After" in refused.headers
    assert (await client.get(path, headers=key_of("mallory"))).status != 429, (
        "another principal's bucket"
    )


async def test_heavy_keys_shown_only_to_unfiltered_readers(client: Client) -> None:
    published = await client.post("/v1/topics/orders/messages", headers=key_of("alice"),
                                  json={"messages": [{"value": 1, "key": "whale"}] * 5})
    assert published.status == 200, await published.text()
    seen = {}
    for name in ("alice", "writer", "tenant"):
        body = await (await client.get("/v1/topics/orders", headers=key_of(name))).json()
        seen[name] = [k["key"] for d in body["partition_details"] for k in d["top_keys"]]
    assert seen == {"alice": ["whale"], "writer": [], "tenant": []}


async def test_metrics_show_no_keys_and_no_group_names_by_default(client: Client) -> None:
    services = client.app[SERVICES]
    await client.post(
        "/v1/topics/orders/messages", headers=key_of("alice"),
        json={"messages": [{"value": 1, "key": "whale"}]}
    )
    services.metrics.count_deliveries("orders", "billing", "pull", [1])
    text = await (await client.get("/metrics")).text()
    assert "whale" not in text
    assert "billing" not in text
    assert f'group="{group_pseudonym("billing")}"' in text


async def test_metrics_show_keys_and_groups_when_asked(
        aiohttp_client: Any, tmp_path: Path, groups: CountingGroupStore) -> None:
    client = await gateway(
        aiohttp_client, tmp_path, groups, metrics_expose_keys=True, metrics_expose_groups=True
    )
    services = client.app[SERVICES]
    await client.post(
        "/v1/topics/orders/messages", headers=key_of("alice"),
        json={"messages": [{"value": 1, "key": "whale"}]}
    )
    services.metrics.count_deliveries("orders", "billing", "pull", [1])
    text = await (await client.get("/metrics")).text()
    assert 'key="whale"' in text
    assert 'group="billing"' in text


def test_group_pseudonyms_are_stable_and_distinct() -> None:
    assert group_pseudonym("billing") == group_pseudonym("billing") != group_pseudonym("shipping")
    assert group_pseudonym("billing").startswith("g-")
    assert "billing" not in group_pseudonym("billing")
    assert group_pseudonym("") == ""


class FakeLedger:
    """The etcd ledger's claim in a dict (its compare-and-swap is tested against etcd)."""

    def __init__(self) -> None:
        self.held: dict[str, list[tuple[str, str]]] = {}
        self.claims = 0

    async def claim(
        self, principal: str, topic: str, group: str, cap: int, still_exists: Any
    ) -> bool:
        self.claims += 1
        held = self.held.setdefault(principal, [])
        if (topic, group) not in held:
            if len(held) >= cap:
                return False
            held.append((topic, group))
        return True


def quota(cap: int, groups: CountingGroupStore) -> tuple[GroupQuota, FakeLedger]:
    ledger = FakeLedger()
    return GroupQuota(ledger, cap, groups, lambda _: True), ledger  # type: ignore[arg-type]


async def test_new_groups_past_the_cap_are_refused(groups: CountingGroupStore) -> None:
    limited, ledger = quota(2, groups)
    await limited.admit("mallory", "orders", "a")
    await limited.admit("mallory", "orders", "b")
    with pytest.raises(GroupsLimitReached, match="max_groups_per_principal") as refused:
        await limited.admit("mallory", "orders", "c")
    assert refused.value.limit == 2
    # exists already (the store lists it): not created
    await limited.admit("mallory", "orders", "billing")
    assert ledger.held == {"mallory": [("orders", "a"), ("orders", "b")]}


async def test_group_is_checked_once_per_process(groups: CountingGroupStore) -> None:
    limited, ledger = quota(5, groups)
    for _ in range(3):
        await limited.admit("alice", "orders", "a")
    assert (ledger.claims, groups.calls) == (1, {"orders": 1})
    unlimited, ledger = quota(0, groups)
    await unlimited.admit("alice", "orders", "z")
    assert (ledger.claims, groups.calls) == (0, {"orders": 1})
