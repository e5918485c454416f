"""Prometheus metrics of one gateway process, on one injected registry.

Names follow ``streamgate_<area>_<noun>_<unit|total>``.
"""

from __future__ import annotations

import platform
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info

LATENCY_BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


@dataclass(frozen=True)
class GatewayMetrics:
    """Every metric the gateway exports."""

    registry: CollectorRegistry
    publish_requests: Counter
    publish_messages: Counter
    publish_bytes: Counter
    publish_latency: Histogram
    http_requests: Counter
    topics_cached: Gauge
    partition_publish_rate: Gauge
    partition_hot: Gauge
    partition_top_key_messages: Gauge
    duty_errors: Counter
    delayed_promoted: Counter
    retention_trimmed: Counter
    retention_unacked_dropped: Counter
    partitions_owned: Gauge
    group_lag_entries: Gauge
    group_oldest_unacked_age: Gauge
    group_oldest_unread_age: Gauge
    group_dead_lettered: Counter
    group_orphans_released: Counter
    group_consumers_removed: Counter
    rate_limited: Counter
    build: Info

    @classmethod
    def create(cls, registry: CollectorRegistry | None = None, version: str = "0.1.0") -> GatewayMetrics:
        """Register the gateway's metrics on ``registry`` (a fresh one by default)."""
        registry = registry or CollectorRegistry()
        metrics = cls(
            registry=registry,
            publish_requests=Counter("streamgate_publish_requests_total",
                                     "Publish requests by topic and outcome", ["topic", "outcome"],
                                     registry=registry),
            publish_messages=Counter("streamgate_publish_messages_total",
                                     "Messages published by topic and outcome", ["topic", "outcome"],
                                     registry=registry),
            publish_bytes=Counter("streamgate_publish_bytes_total", "Value bytes accepted by topic",
                                  ["topic"], registry=registry),
            publish_latency=Histogram("streamgate_publish_latency_seconds",
                                      "Time to write a publish batch to storage, by acks", ["acks"],
                                      buckets=LATENCY_BUCKETS_S, registry=registry),
            http_requests=Counter("streamgate_http_requests_total", "HTTP requests by route and status",
                                  ["route", "method", "status"], registry=registry),
            topics_cached=Gauge("streamgate_topics_cached", "Topics in this gateway's metadata cache",
                                registry=registry),
            partition_publish_rate=Gauge("streamgate_partition_publish_rate_messages_per_second",
                                         "Messages per second published to a partition through this gateway "
                                         "(60 s window)", ["topic", "partition"], registry=registry),
            partition_hot=Gauge("streamgate_partition_hot", "1 when a partition's publish rate is over 3x its "
                                "topic's mean", ["topic", "partition"], registry=registry),
            partition_top_key_messages=Gauge("streamgate_partition_top_key_messages",
                                             "Estimated messages of the heaviest keys of each partition (top 3)",
                                             ["topic", "partition", "key"], registry=registry),
            duty_errors=Counter("streamgate_duty_errors_total", "Partition duty runs that failed and will retry",
                                ["duty"], registry=registry),
            delayed_promoted=Counter("streamgate_delayed_promoted_messages_total",
                                     "Delayed messages moved into their stream when due", ["topic"],
                                     registry=registry),
            retention_trimmed=Counter("streamgate_retention_trimmed_entries_total",
                                      "Entries removed by retention", ["topic"], registry=registry),
            retention_unacked_dropped=Counter("streamgate_retention_unacked_dropped_total",
                                              "Entries removed by retention before a group acked them",
                                              ["topic", "group"], registry=registry),
            partitions_owned=Gauge("streamgate_partitions_owned", "Partitions whose duties this node runs",
                                   registry=registry),
            group_lag_entries=Gauge("streamgate_group_lag_entries", "Entries not yet delivered to the group "
                                    "(NaN when unknown)", ["topic", "group", "partition"], registry=registry),
            group_oldest_unacked_age=Gauge("streamgate_group_oldest_unacked_age_seconds",
                                           "Age of the oldest delivered but un-acked entry (NaN when unknown)",
                                           ["topic", "group", "partition"], registry=registry),
            group_oldest_unread_age=Gauge("streamgate_group_oldest_unread_age_seconds",
                                          "Age of the oldest entry not yet delivered (NaN when unknown)",
                                          ["topic", "group", "partition"], registry=registry),
            group_dead_lettered=Counter("streamgate_group_dead_lettered_total",
                                        "Entries moved to the dead-letter topic after max deliveries, by who moved "
                                        "them (reader, pull or sweep)", ["topic", "group", "by"], registry=registry),
            group_orphans_released=Counter("streamgate_group_orphans_released_total",
                                           "Un-acked entries of consumers on dead gateway nodes made redeliverable",
                                           ["topic", "group"], registry=registry),
            group_consumers_removed=Counter("streamgate_group_consumers_removed_total",
                                            "Empty consumers of dead gateway nodes removed from groups",
                                            ["topic", "group"], registry=registry),
            rate_limited=Counter("streamgate_publish_rate_limited_total",
                                 "Publish requests refused by a rate limit, by topic and the limit that refused",
                                 ["topic", "limit"], registry=registry),
            build=Info("streamgate_build", "Build information", registry=registry),
        )
        metrics.build.info({"version": version, "python": platform.python_version()})
        return metrics
