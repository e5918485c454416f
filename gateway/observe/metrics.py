"""Prometheus metrics of one gateway process, on one injected registry.

Names follow ``streamgate_<area>_<noun>_<unit|total>``.
"""

from __future__ import annotations

import platform
from collections import Counter as Counter_
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info

from gateway.observe.metric_cells import CellCounter, CellHistogram
from gateway.observe.redis_memory import NodesMemory, RedisMemoryCollector
from gateway.observe.version import installed_version

LATENCY_BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                     10.0)


@dataclass(frozen=True)
class GatewayMetrics:
    """Every metric the gateway exports. Those changed on every request or delivery are plain cells
    (``gateway.observe.metric_cells``: the same families, a fraction of the cost); the rest are
    prometheus_client's."""

    registry: CollectorRegistry
    publish_requests: CellCounter
    publish_messages: CellCounter
    publish_bytes: CellCounter
    publish_latency: CellHistogram
    http_requests: CellCounter
    topics_cached: Gauge
    partition_publish_rate: Gauge
    partition_hot: Gauge
    partition_top_key_messages: Gauge
    duty_errors: Counter
    delayed_promoted: Counter
    retention_trimmed: Counter
    compacted: Counter
    purges: Counter
    purged: Counter
    retention_unacked_dropped: Counter
    partitions_owned: Gauge
    group_lag_entries: Gauge
    group_oldest_unacked_age: Gauge
    group_oldest_unread_age: Gauge
    group_dead_lettered: Counter
    group_parked_keys: Gauge
    group_verdict: Gauge
    group_desired_members: Gauge
    group_orphans_released: Counter
    group_consumers_removed: Counter
    rate_limited: Counter
    ratelimit_refused: Counter
    publish_failures: Counter
    publish_refused_full: Counter
    archive_segments: Counter
    archive_entries: Counter
    archive_bytes: Counter
    archive_hot_age: Gauge
    quota_used: Gauge
    quota_limit: Gauge
    quota_refused: Counter
    push_requests: Counter
    push_request_seconds: Histogram
    push_breaker_open: Gauge
    deliveries: CellCounter
    redeliveries: CellCounter
    acks: CellCounter
    nacks: CellCounter
    expired: CellCounter
    websocket_connections: Gauge
    websocket_slow_closes: Counter
    event_streams: Gauge
    topic_partitions: Gauge
    topic_owned_partitions: Gauge
    partition_length: Gauge
    redis_latency: CellHistogram
    redis_errors: Counter
    etcd_latency: Histogram
    etcd_errors: Counter
    build: Info

    @classmethod
    def create(cls, registry: CollectorRegistry | None = None,
               version: str | None = None) -> GatewayMetrics:
        """Register the gateway's metrics on ``registry`` (a fresh one by default); ``version``
        (streamgate_build_info) defaults to the installed distribution's."""
        registry = registry or CollectorRegistry()
        metrics = cls(
            registry=registry,
            publish_requests=CellCounter("streamgate_publish_requests_total",
                                         "Publish requests by topic and outcome",
                                         ["topic", "outcome"], registry=registry),
            publish_messages=CellCounter("streamgate_publish_messages_total",
                                         "Messages published by topic and outcome",
                                         ["topic", "outcome"], registry=registry),
            publish_bytes=CellCounter("streamgate_publish_bytes_total",
                                      "Value bytes accepted by topic", ["topic"],
                                      registry=registry),
            publish_latency=CellHistogram("streamgate_publish_latency_seconds",
                                          "Time to write a publish batch to storage, by acks",
                                          ["acks"], LATENCY_BUCKETS_S, registry=registry),
            http_requests=CellCounter("streamgate_http_requests_total",
                                      "HTTP requests by route and status",
                                      ["route", "method", "status"], registry=registry),
            topics_cached=Gauge("streamgate_topics_cached",
                                "Topics in this gateway's metadata cache", registry=registry),
            partition_publish_rate=Gauge("streamgate_partition_publish_rate_messages_per_second",
                                         "Messages per second published to a partition through "
                                         "this gateway (60 s window)", ["topic", "partition"],
                                         registry=registry),
            partition_hot=Gauge("streamgate_partition_hot",
                                "1 when a partition's publish rate is over 3x its "
                                "topic's mean", ["topic", "partition"], registry=registry),
            partition_top_key_messages=Gauge("streamgate_partition_top_key_messages",
                                             "Estimated messages of the heaviest keys of each "
                                             "partition (top 3)", ["topic", "partition", "key"],
                                             registry=registry),
            duty_errors=Counter("streamgate_duty_errors_total",
                                "Partition duty runs that failed and will retry", ["duty"],
                                registry=registry),
            delayed_promoted=Counter("streamgate_delayed_promoted_messages_total",
                                     "Delayed messages moved into their stream when due", ["topic"],
                                     registry=registry),
            retention_trimmed=Counter("streamgate_retention_trimmed_entries_total",
                                      "Entries removed by retention", ["topic"], registry=registry),
            compacted=Counter("streamgate_compacted_entries_total",
                              "Superseded messages and tombstones removed from compacted topics",
                              ["topic"], registry=registry),
            purges=Counter("streamgate_purges_total", "Purge calls, by the topic purged",
                           ["topic"], registry=registry),
            purged=Counter("streamgate_purged_entries_total",
                           "Entries and scheduled messages removed by purges", ["topic"],
                           registry=registry),
            retention_unacked_dropped=Counter("streamgate_retention_unacked_dropped_total",
                                              "Entries removed by retention before a group acked "
                                              "them", ["topic", "group"], registry=registry),
            partitions_owned=Gauge("streamgate_partitions_owned",
                                   "Partitions whose duties this node runs", registry=registry),
            group_lag_entries=Gauge("streamgate_group_lag_entries",
                                    "Entries not yet delivered to the group "
                                    "(NaN when unknown)", ["topic", "group", "partition"],
                                    registry=registry),
            group_oldest_unacked_age=Gauge("streamgate_group_oldest_unacked_age_seconds",
                                           "Age of the oldest delivered but un-acked entry (NaN "
                                           "when unknown)", ["topic", "group", "partition"],
                                           registry=registry),
            group_oldest_unread_age=Gauge("streamgate_group_oldest_unread_age_seconds",
                                          "Age of the oldest entry not yet delivered (NaN when "
                                          "unknown)", ["topic", "group", "partition"],
                                          registry=registry),
            group_dead_lettered=Counter("streamgate_group_dead_lettered_total",
                                        "Entries moved to the dead-letter topic after max "
                                        "deliveries, by who moved them (reader, pull or sweep)",
                                        ["topic", "group", "by"], registry=registry),
            group_parked_keys=Gauge("streamgate_group_parked_keys",
                                    "Keys of a key_shared group waiting for the redelivery of a "
                                    "failed message (nacked or timed out), on this gateway",
                                    ["topic", "group", "partition"], registry=registry),
            group_verdict=Gauge("streamgate_group_verdict",
                                "1 for a group's current verdict on a partition (state: ok, idle, "
                                "behind, stalled; reason empty when none), set by the partition's "
                                "owner with the lag", ["topic", "group", "partition", "state",
                                                       "reason"], registry=registry),
            group_desired_members=Gauge("streamgate_group_desired_members",
                                        "The scale hint: members a group wants to drain its "
                                        "backlog within the target, as this gateway last "
                                        "answered it", ["topic", "group"], registry=registry),
            group_orphans_released=Counter("streamgate_group_orphans_released_total",
                                           "Un-acked entries of consumers on dead gateway nodes "
                                           "made redeliverable", ["topic", "group"],
                                           registry=registry),
            group_consumers_removed=Counter("streamgate_group_consumers_removed_total",
                                            "Empty consumers of dead gateway nodes removed from "
                                            "groups", ["topic", "group"], registry=registry),
            rate_limited=Counter("streamgate_publish_rate_limited_total",
                                 "Publish requests refused by a rate limit, by topic and the limit "
                                 "that refused", ["topic", "limit"], registry=registry),
            ratelimit_refused=Counter("streamgate_ratelimit_refused_total",
                                      "Requests refused by a rate limit, by action (publish, read, "
                                      "subscribe) and the limit that refused (principal, topic)",
                                      ["action", "limit"], registry=registry),
            publish_failures=Counter("streamgate_publish_failures_total",
                                     "Publish batches the store did not take, by topic, acks and "
                                     "error (e.g. NotEnoughReplicas for acks=all)",
                                     ["topic", "acks", "error"], registry=registry),
            publish_refused_full=Counter("streamgate_publish_refused_full_total",
                                         "Publish batches refused with 507 for memory: reason "
                                         "watermark (refused before writing) or oom (Redis "
                                         "refused it at maxmemory)", ["topic", "reason"],
                                         registry=registry),
            **_delivery_metrics(registry),
            **_backend_metrics(registry),
            **_archive_metrics(registry),
            **_quota_metrics(registry),
            **_push_metrics(registry),
            build=Info("streamgate_build", "Build information", registry=registry),
        )
        metrics.build.info({"version": version or installed_version(),
                            "python": platform.python_version()})
        return metrics

    def watch_redis_memory(self, nodes: NodesMemory) -> None:
        """Export every Redis node's memory (``nodes``: the store's latest poll) at each
        scrape."""
        self.registry.register(RedisMemoryCollector(nodes))

    def observe_redis(self, operation: str, seconds: float, error: str | None) -> None:
        """The storage layer's call observer: one Redis attempt took ``seconds`` and failed with
        ``error``."""
        self.redis_latency.labels(operation).observe(seconds)
        if error is not None:
            self.redis_errors.labels(operation, error).inc()

    def observe_etcd(self, operation: str, seconds: float, error: str | None) -> None:
        """The etcd connection's call observer: one call took ``seconds`` and failed with
        ``error``."""
        self.etcd_latency.labels(operation).observe(seconds)
        if error is not None:
            self.etcd_errors.labels(operation, error).inc()

    def count_deliveries(self, topic: str, group: str, mode: str,
                         delivery_counts: Iterable[int]) -> None:
        """Messages handed to subscribers or pullers (``delivery_counts``: each one's delivery
        count)."""
        counts = list(delivery_counts)
        if counts:
            self.deliveries.labels(topic, group, mode).inc(len(counts))
            redelivered = len(counts) - counts.count(1)  # delivery counts start at 1
            if redelivered:
                self.redeliveries.labels(topic, group, mode).inc(redelivered)

    def set_ownership(self, partitions_by_topic: Mapping[str, int],
                      owned: Iterable[tuple[str, int]]) -> None:
        """Export each known topic's partition count and how many of them this node owns (0
        included).

        Summed over nodes, owned < partitions means some partition has no owner.
        """
        owned_by_topic = Counter_(topic for topic, _ in owned)
        self.topic_partitions.clear()
        self.topic_owned_partitions.clear()
        for topic, partitions in partitions_by_topic.items():
            self.topic_partitions.labels(topic).set(partitions)
            self.topic_owned_partitions.labels(topic).set(owned_by_topic.get(topic, 0))
        self.partitions_owned.set(sum(owned_by_topic.values()))


def _delivery_metrics(registry: CollectorRegistry) -> dict[str, Any]:
    labels = ["topic", "group", "mode"]
    return {
        "deliveries": CellCounter("streamgate_delivery_messages_total",
                                  "Messages handed to subscribers (WebSocket) or pullers (HTTP), "
                                  "by topic, group (empty for broadcast) and mode (exclusive, "
                                  "shared, broadcast, pull)", labels, registry=registry),
        "redeliveries": CellCounter("streamgate_delivery_redeliveries_total",
                                    "Deliveries of messages delivered before (delivery count > 1)",
                                    labels, registry=registry),
        "acks": CellCounter("streamgate_delivery_acks_total",
                            "Deliveries acknowledged by clients (auto_ack included)", labels,
                            registry=registry),
        "nacks": CellCounter("streamgate_delivery_nacks_total",
                             "Deliveries negatively acknowledged by clients", labels,
                             registry=registry),
        "expired": CellCounter("streamgate_delivery_expired_total",
                               "Messages not delivered because their time to live had passed "
                               "(acked for a group)", labels, registry=registry),
        "websocket_connections": Gauge("streamgate_websocket_connections",
                                       "Open WebSockets by mode (publish: publish-only)", ["mode"],
                                       registry=registry),
        "event_streams": Gauge("streamgate_event_streams",
                               "Open Server-Sent Events streams (GET /v1/topics/{topic}/events)",
                               registry=registry),
        "websocket_slow_closes": Counter("streamgate_websocket_slow_closes_total",
                                         "Subscriptions closed with 4008 because the client did "
                                         "not drain in time", ["mode"], registry=registry),
    }


def _archive_metrics(registry: CollectorRegistry) -> dict[str, Any]:
    return {
        "archive_segments": Counter("streamgate_archive_segments_total",
                                    "Segments the partitions' owners moved into the archive tier",
                                    ["topic"], registry=registry),
        "archive_entries": Counter("streamgate_archive_entries_total",
                                   "Entries moved from Redis into archive segments", ["topic"],
                                   registry=registry),
        "archive_bytes": Counter("streamgate_archive_bytes_total",
                                 "Bytes of the segment files written (zstd Parquet)", ["topic"],
                                 registry=registry),
        "archive_hot_age": Gauge("streamgate_archive_hot_age_seconds",
                                 "Age of a partition's oldest entry still in Redis (0 when empty, "
                                 "NaN when unknown), exported by its owner with the lag",
                                 ["topic", "partition"], registry=registry),
    }


def _quota_metrics(registry: CollectorRegistry) -> dict[str, Any]:
    # one series per quota subject (principal or tenant) with a cap, active on this gateway
    return {
        "quota_used": Gauge("streamgate_quota_used",
                            "What a quota subject holds across every gateway, as this gateway last "
                            "read it: quota retained_bytes (bytes in the log) or "
                            "in_flight_messages (un-acked deliveries)", ["subject", "quota"],
                            registry=registry),
        "quota_limit": Gauge("streamgate_quota_limit",
                             "A quota subject's cap (absent: no cap of that kind)",
                             ["subject", "quota"], registry=registry),
        "quota_refused": Counter("streamgate_quota_refused_total",
                                 "Requests refused for a quota: publishes past retained_bytes "
                                 "(507), pulls past in_flight_messages (429)", ["subject", "quota"],
                                 registry=registry),
    }


def _push_metrics(registry: CollectorRegistry) -> dict[str, Any]:
    return {
        "push_requests": Counter("streamgate_push_requests_total",
                                 "Requests of push subscriptions to their endpoints, by outcome "
                                 "(ok, rejected, retried, timeout, error, refused)",
                                 ["topic", "group", "outcome"], registry=registry),
        "push_request_seconds": Histogram("streamgate_push_request_seconds",
                                          "Time of a push request until its answer's status",
                                          ["topic", "group"], buckets=LATENCY_BUCKETS_S,
                                          registry=registry),
        "push_breaker_open": Gauge("streamgate_push_breaker_open",
                                   "1 while a push subscription's circuit breaker on this "
                                   "gateway holds its requests back", ["topic", "group"],
                                   registry=registry),
    }


def _backend_metrics(registry: CollectorRegistry) -> dict[str, Any]:
    return {
        "topic_partitions": Gauge("streamgate_topic_partitions",
                                  "Partitions of each topic in this gateway's cache", ["topic"],
                                  registry=registry),
        "topic_owned_partitions": Gauge("streamgate_topic_owned_partitions",
                                        "Partitions of each topic whose duties this node owns",
                                        ["topic"], registry=registry),
        "partition_length": Gauge("streamgate_partition_length_entries",
                                  "Entries retained in a partition's stream, exported by its owner "
                                  "with the lag", ["topic", "partition"], registry=registry),
        "redis_latency": CellHistogram("streamgate_redis_latency_seconds",
                                       "Time of one Redis attempt (command, script or pipeline) by "
                                       "operation; blocking reads include their block time",
                                       ["operation"], LATENCY_BUCKETS_S, registry=registry),
        "redis_errors": Counter("streamgate_redis_errors_total",
                                "Failed Redis attempts by operation and error class",
                                ["operation", "error"], registry=registry),
        "etcd_latency": Histogram("streamgate_etcd_latency_seconds",
                                  "Time of one etcd call by operation", ["operation"],
                                  buckets=LATENCY_BUCKETS_S, registry=registry),
        "etcd_errors": Counter("streamgate_etcd_errors_total",
                               "Failed etcd calls by operation and error class",
                               ["operation", "error"], registry=registry),
    }
