"""The gateway's metrics: names, what each recording helper counts, and the observers storage and
etcd call."""

from __future__ import annotations

import re
from typing import Any

import pytest
from aiohttp.test_utils import TestClient
from prometheus_client import CollectorRegistry

from gateway.observe.metrics import GatewayMetrics
from gateway.services import Services
from partitioner.errors import CoordinationUnavailable
from partitioner.etcd.connection import EtcdConnection

Client = TestClient[Any, Any]
NAME_RULE = re.compile(r"^streamgate_[a-z]+(_[a-z0-9]+)+$")


def sample(metrics: GatewayMetrics, name: str, **labels: str) -> float | None:
    value = metrics.registry.get_sample_value(name, labels)
    return value


def test_every_metric_follows_the_naming_scheme() -> None:
    registry = CollectorRegistry()
    metrics = GatewayMetrics.create(registry)
    families = list(registry.collect())
    assert metrics.registry is registry
    assert len(families) >= 35
    for family in families:
        exposed = family.name + {"counter": "_total", "info": "_info"}.get(family.type, "")
        assert NAME_RULE.match(exposed), exposed
        if family.type == "counter":
            assert exposed.endswith("_total"), exposed
        if family.type == "histogram":
            assert exposed.endswith("_seconds"), exposed


def test_failed_redis_attempt_is_timed_and_counted() -> None:
    metrics = GatewayMetrics.create()
    metrics.observe_redis("read", 0.003, None)
    metrics.observe_redis("append_wait", 0.2, "NotEnoughReplicas")
    assert sample(metrics, "streamgate_redis_latency_seconds_count", operation="read") == 1
    assert sample(metrics, "streamgate_redis_latency_seconds_count", operation="append_wait") == 1
    assert sample(
        metrics, "streamgate_redis_errors_total", operation="append_wait", error="NotEnoughReplicas"
    ) == 1
    assert sample(
        metrics, "streamgate_redis_errors_total", operation="read", error="NotEnoughReplicas"
    ) is None


def test_etcd_calls_are_timed_and_failures_counted() -> None:
    metrics = GatewayMetrics.create()
    metrics.observe_etcd("lease_keepalive", 0.01, "AioRpcError")
    metrics.observe_etcd("get", 0.001, None)
    assert sample(metrics, "streamgate_etcd_latency_seconds_count", operation="get") == 1
    assert sample(
        metrics, "streamgate_etcd_errors_total", operation="lease_keepalive", error="AioRpcError"
    ) == 1


def test_redeliveries_count_only_repeats() -> None:
    metrics = GatewayMetrics.create()
    metrics.count_deliveries("orders", "billing", "shared", [1, 1, 2, 5])
    metrics.count_deliveries("orders", "billing", "shared", [])
    assert sample(
        metrics, "streamgate_delivery_messages_total", topic="orders", group="billing",
        mode="shared"
    ) == 4
    assert sample(
        metrics, "streamgate_delivery_redeliveries_total", topic="orders", group="billing",
        mode="shared"
    ) == 2


def test_ownership_gauge_is_zero_and_drops_deleted_topics() -> None:
    metrics = GatewayMetrics.create()
    metrics.set_ownership(
        {"orders": 4, "audit": 2, "gone": 1}, [("orders", 0), ("orders", 3), ("gone", 0)]
    )
    metrics.set_ownership({"orders": 4, "audit": 2}, [("orders", 0), ("orders", 3)])
    assert sample(metrics, "streamgate_topic_partitions", topic="orders") == 4
    assert sample(metrics, "streamgate_topic_owned_partitions", topic="orders") == 2
    assert sample(metrics, "streamgate_topic_owned_partitions", topic="audit") == 0
    assert sample(metrics, "streamgate_topic_partitions", topic="gone") is None
    assert sample(metrics, "streamgate_partitions_owned") == 2


async def test_closed_etcd_connection_reports_the_failure() -> None:
    calls: list[tuple[str, float, str | None]] = []
    connection = EtcdConnection(["127.0.0.1:1"], timeout_s=0.5)
    connection.observer = lambda operation, seconds, error: calls.append(
        (operation, seconds, error)
    )
    with pytest.raises(CoordinationUnavailable):
        await connection.get(b"/key")
    assert [(operation, error) for operation, _, error in calls] == [
        ("get", "CoordinationUnavailable")
    ]
    assert calls[0][1] >= 0


async def test_refused_publish_is_counted_as_a_failure(
        client: Client, orders: str, store: Any, services: Services) -> None:
    store.unavailable = True
    response = await client.post(
        f"/v1/topics/{orders}/messages", json={"acks": "all", "messages": [{"value": 1}]}
    )
    assert response.status == 503
    assert sample(services.metrics, "streamgate_publish_failures_total", topic=orders, acks="all",
                  error="StorageUnavailable") == 1
    assert sample(services.metrics, "streamgate_publish_latency_seconds_count", acks="all") is None


def test_request_path_children_are_counted() -> None:
    metrics = GatewayMetrics.create(CollectorRegistry())
    child = metrics.publish_requests.labels("orders", "ok")
    assert metrics.publish_requests.labels("orders", "ok") is child
    child.inc(3)
    assert metrics.registry.get_sample_value("streamgate_publish_requests_total",
                                             {"topic": "orders", "outcome": "ok"}) == 3
    with pytest.raises(ValueError, match="non-negative"):
        child.inc(-1)
    with pytest.raises(ValueError, match="takes labels"):
        metrics.publish_requests.labels("orders")


