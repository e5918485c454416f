"""Build the streamgate Grafana dashboards (JSON) from code with grafana-foundation-sdk (Grafana 12
build).

    python grafana/build.py          # rewrite grafana/dashboards/*.json
    python grafana/build.py --check  # exit 1 if a committed file differs from what this
                                       script builds

Every panel reads the ``$datasource`` variable (type prometheus). Template variables use regex
matchers (``=~"$topic"``) with ``.*`` as their "All" value, so a dashboard works with one or many
topics and groups.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

from grafana_foundation_sdk.builders import common as gcommon
from grafana_foundation_sdk.builders import dashboard as gdash
from grafana_foundation_sdk.builders import prometheus as gprom
from grafana_foundation_sdk.builders import timeseries as gts
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common as mcommon
from grafana_foundation_sdk.models import dashboard as mdash
from grafana_foundation_sdk.models.common import DataSourceRef

DASHBOARDS_DIR = Path(__file__).resolve().parent / "dashboards"
DATASOURCE = DataSourceRef(type_val="prometheus", uid="${datasource}")
RATE = "[$__rate_interval]"
PANEL_WIDTH = 12
PANEL_HEIGHT = 8


@dataclass(frozen=True)
class Target:
    """One PromQL query of a panel and its legend."""

    expr: str
    legend: str


@dataclass(frozen=True)
class PanelSpec:
    """A time-series panel: title, unit, what it means, its queries."""

    title: str
    unit: str
    description: str
    targets: tuple[Target, ...]


@dataclass(frozen=True)
class DashboardSpec:
    """A dashboard: file name, uid, title, template variables (by label name) and panels."""

    file: str
    uid: str
    title: str
    description: str
    variables: tuple[tuple[str, str], ...]  # (variable name, label_values() query)
    panels: tuple[PanelSpec, ...] = field(default=())


def panel(title: str, unit: str, description: str, *targets: tuple[str, str]) -> PanelSpec:
    """A panel spec from (expr, legend) pairs."""
    return PanelSpec(title, unit, description,
                     tuple(Target(expr, legend) for expr, legend in targets))


def quantile(q: float, metric: str, by: str, selector: str = "") -> str:
    """The q-quantile of a histogram by ``by``."""
    return f"histogram_quantile({q}, sum by (le, {by}) (rate({metric}_bucket{selector}{RATE})))"


T = '{topic=~"$topic"}'
TG = '{topic=~"$topic",group=~"$group"}'
I = '{instance=~"$instance"}'  # noqa: E741 - a selector, read as "instance"

OVERVIEW = DashboardSpec(
    file="streamgate-overview.json", uid="streamgate-overview", title="streamgate / Overview",
    description="Publish and delivery rates, errors and latency across every gateway.",
    variables=(("topic", "label_values(streamgate_publish_messages_total, topic)"),),
    panels=(
        panel("Messages published", "short",
              "Messages written (acks 1/all) or accepted (acks 0) per second.",
              (f'sum by (topic, outcome) (rate(streamgate_publish_messages_total{{topic=~"$topic",'
               f'outcome=~"written|accepted"}}{RATE}))', "{{topic}} {{outcome}}")),
        panel("Messages delivered", "short",
              "Messages handed to subscribers and pullers per second, by mode.",
              (f"sum by (topic, mode) (rate(streamgate_delivery_messages_total{T}{RATE}))",
               "{{topic}} {{mode}}")),
        panel("Publish requests by outcome", "reqps",
              "Publish HTTP requests per second, ok or error.",
              (f"sum by (outcome) (rate(streamgate_publish_requests_total{T}{RATE}))",
               "{{outcome}}")),
        panel("Publish latency by acks", "s",
              "Time to write a publish batch to storage (p50 and p99).",
              (quantile(0.5, "streamgate_publish_latency_seconds", "acks"), "p50 acks={{acks}}"),
              (quantile(0.99, "streamgate_publish_latency_seconds", "acks"), "p99 acks={{acks}}")),
        panel("Publish failures", "short",
              "Publish batches the store refused per second (NotEnoughReplicas is "
              "an acks=all write the replicas did not confirm).",
              (f"sum by (topic, acks, error) (rate(streamgate_publish_failures_total{T}{RATE}))",
               "{{topic}} acks={{acks}} {{error}}")),
        panel("HTTP errors", "reqps", "4xx and 5xx responses per second by route and status.",
              (f'sum by (route, status) '
               f'(rate(streamgate_http_requests_total{{status=~"[45].."}}{RATE}))',
               "{{status}} {{route}}")),
        panel("Acks and nacks", "short",
              "Deliveries acknowledged and negatively acknowledged per second.",
              (f"sum by (topic) (rate(streamgate_delivery_acks_total{T}{RATE}))", "ack {{topic}}"),
              (f"sum by (topic) (rate(streamgate_delivery_nacks_total{T}{RATE}))",
               "nack {{topic}}")),
        panel("Rate-limited requests", "reqps",
              "Requests refused by a rate limit, by action and limit.",
              (f"sum by (action, limit) (rate(streamgate_ratelimit_refused_total{RATE}))",
               "{{action}} {{limit}}")),
    ),
)

TOPICS = DashboardSpec(
    file="streamgate-topics.json", uid="streamgate-topics", title="streamgate / Topics",
    description="Per-partition publish rates, hot partitions and keys, bytes, retention, "
                "delayed messages and the archive tier.",
    variables=(("topic",
                "label_values(streamgate_partition_publish_rate_messages_per_second, topic)"),),
    panels=(
        panel("Publish rate per partition", "short",
              "Messages per second per partition (60 s window), summed over gateways.",
              (f"sum by (topic, partition) "
               f"(streamgate_partition_publish_rate_messages_per_second{T})",
               "{{topic}}/{{partition}}")),
        panel("Hot partitions", "short",
              "1 while a partition's rate is over 3x its topic's mean (per gateway).",
              (f"max by (topic, partition) (streamgate_partition_hot{T})",
               "{{topic}}/{{partition}}")),
        panel("Heaviest keys", "short",
              "Estimated messages of the top keys of each partition (empty unless the "
              "gateways run with metrics_expose_keys=true: keys are message data).",
              (f"max by (topic, partition, key) (streamgate_partition_top_key_messages{T})",
               "{{topic}}/{{partition}} {{key}}")),
        panel("Partition sizes", "short",
              "Entries retained per partition (exported by each partition's owner).",
              (f"max by (topic, partition) (streamgate_partition_length_entries{T})",
               "{{topic}}/{{partition}}")),
        panel("Bytes published", "Bps", "Value bytes accepted per second.",
              (f"sum by (topic) (rate(streamgate_publish_bytes_total{T}{RATE}))", "{{topic}}")),
        panel("Partitions per topic", "short", "Each topic's partition count.",
              (f"max by (topic) (streamgate_topic_partitions{T})", "{{topic}}")),
        panel("Entries trimmed, compacted and purged", "short",
              "Entries removed by time or length retention, by compaction (superseded "
              "messages and tombstones of compacted topics) and by purges, per second.",
              (f"sum by (topic) (rate(streamgate_retention_trimmed_entries_total{T}{RATE}))",
               "{{topic}}"),
              (f"sum by (topic) (rate(streamgate_compacted_entries_total{T}{RATE}))",
               "{{topic}} compacted"),
              (f"sum by (topic) (rate(streamgate_purged_entries_total{T}{RATE}))",
               "{{topic}} purged")),
        panel("Delayed messages promoted", "short",
              "Delayed messages moved into their stream per second.",
              (f"sum by (topic) (rate(streamgate_delayed_promoted_messages_total{T}{RATE}))",
               "{{topic}}")),
        panel("Entries archived", "short",
              "Entries the partitions' owners moved from Redis into archive segments per second.",
              (f"sum by (topic) (rate(streamgate_archive_entries_total{T}{RATE}))", "{{topic}}")),
        panel("Bytes archived", "Bps", "Segment bytes written to the archive per second (zstd).",
              (f"sum by (topic) (rate(streamgate_archive_bytes_total{T}{RATE}))", "{{topic}}")),
        panel("Hot age", "s",
              "Age of the oldest entry still in Redis, the oldest partition of each topic. With "
              "the archive on it stays near hot_retention_ms; far above it the archive is behind "
              "(failing moves, or a consumer group that has not consumed the entries: they stay "
              "hot for it until memory presses). Compacted topics stay hot whole.",
              (f"max by (topic) (streamgate_archive_hot_age_seconds{T})", "{{topic}}")),
        panel("Archive duty errors", "short",
              "Failed archive moves per second by gateway (the store unreachable, a fenced "
              "commit); retried every archive_interval_s.",
              (f'sum by (instance) (rate(streamgate_duty_errors_total{{duty="archive"}}{RATE}))',
               "{{instance}}")),
    ),
)

GROUPS = DashboardSpec(
    file="streamgate-groups.json", uid="streamgate-groups", title="streamgate / Consumer groups",
    description="Lag, oldest un-acked and unread age, redeliveries and dead letters per group "
                "(groups appear as g-<hash> pseudonyms unless the gateways run with "
                "metrics_expose_groups=true).",
    variables=(("topic", "label_values(streamgate_group_lag_entries, topic)"),
               ("group", 'label_values(streamgate_group_lag_entries{topic=~"$topic"}, group)')),
    panels=(
        panel("Lag (entries)", "short",
              "Entries not yet delivered to the group, summed over partitions.",
              (f"sum by (topic, group) (streamgate_group_lag_entries{TG})", "{{topic}} {{group}}")),
        panel("Lag per partition", "short", "Entries not yet delivered, per partition.",
              (f"max by (topic, group, partition) (streamgate_group_lag_entries{TG})",
               "{{topic}}/{{partition}} {{group}}")),
        panel("Oldest un-acked age", "s", "Age of the oldest delivered but un-acknowledged entry.",
              (f"max by (topic, group) (streamgate_group_oldest_unacked_age_seconds{TG})",
               "{{topic}} {{group}}")),
        panel("Oldest unread age", "s", "Age of the oldest entry not yet delivered.",
              (f"max by (topic, group) (streamgate_group_oldest_unread_age_seconds{TG})",
               "{{topic}} {{group}}")),
        panel("Deliveries by group", "short",
              "Deliveries per second (broadcast subscriptions have no group).",
              (f"sum by (topic, group, mode) (rate(streamgate_delivery_messages_total{TG}{RATE}))",
               "{{topic}} {{group}} {{mode}}")),
        panel("Redeliveries", "short",
              "Deliveries of messages delivered before (ack timeout, nack, "
              "released by a closed socket) per second.",
              (f"sum by (topic, group) (rate(streamgate_delivery_redeliveries_total{TG}{RATE}))",
               "{{topic}} {{group}}")),
        panel("Acks and nacks by group", "short",
              "Acknowledgements and negative acknowledgements per second.",
              (f"sum by (topic, group) (rate(streamgate_delivery_acks_total{TG}{RATE}))",
               "ack {{topic}} {{group}}"),
              (f"sum by (topic, group) (rate(streamgate_delivery_nacks_total{TG}{RATE}))",
               "nack {{topic}} {{group}}")),
        panel("Dead-lettered", "short",
              "Entries moved to <topic>.dlq after max deliveries, by who moved them.",
              (f"sum by (topic, group, by) "
               f"(increase(streamgate_group_dead_lettered_total{TG}{RATE}))",
               "{{topic}} {{group}} by {{by}}")),
        panel("Expired, not delivered", "short",
              "Messages whose time to live passed before delivery (a group acks them), by mode.",
              (f"sum by (topic, group, mode) "
               f"(increase(streamgate_delivery_expired_total{TG}{RATE}))",
               "{{topic}} {{group}} {{mode}}")),
        panel("Dropped un-acked by retention", "short",
              "Entries retention removed before the group acked them.",
              (f"sum by (topic, group) "
               f"(increase(streamgate_retention_unacked_dropped_total{TG}{RATE}))",
               "{{topic}} {{group}}")),
    ),
)

NODES = DashboardSpec(
    file="streamgate-nodes.json", uid="streamgate-nodes", title="streamgate / Gateway nodes",
    description="Per gateway: partition ownership, connections, Redis health and memory, etcd "
                "health.",
    variables=(("instance", "label_values(streamgate_build_info, instance)"),),
    panels=(
        panel("Partitions owned", "short", "Partitions whose duties each gateway runs.",
              (f"sum by (instance) (streamgate_partitions_owned{I})", "{{instance}}")),
        panel("Partitions without an owner", "short",
              "Partition count minus partitions owned over all gateways "
              "(above 0 for long: the no-owner alert).",
              ("max by (topic) (streamgate_topic_partitions) "
               "- sum by (topic) (streamgate_topic_owned_partitions)",
               "{{topic}}")),
        panel("WebSocket connections", "short", "Open subscriptions by gateway and mode.",
              (f"sum by (instance, mode) (streamgate_websocket_connections{I})",
               "{{instance}} {{mode}}")),
        panel("Slow-client closes", "short", "Subscriptions closed with 4008 (too slow to drain).",
              (f"sum by (instance, mode) "
               f"(increase(streamgate_websocket_slow_closes_total{I}{RATE}))",
               "{{instance}} {{mode}}")),
        panel("Redis latency p99", "s",
              "Per attempt, by operation (blocking reads include their block time).",
              (quantile(0.99, "streamgate_redis_latency_seconds", "operation", I),
               "{{operation}}")),
        panel("Redis errors", "short", "Failed Redis attempts per second by operation and error.",
              (f"sum by (instance, operation, error) "
               f"(rate(streamgate_redis_errors_total{I}{RATE}))",
               "{{instance}} {{operation}} {{error}}")),
        panel("Redis memory used and max", "bytes",
              "Each Redis node's used memory and its maxmemory (the highest reading over the "
              "gateways). Publishes to a node are refused with 507 once used passes "
              "publish_memory_watermark of max: shorten retention, add primaries or raise "
              "redis.resources.limits.memory before it gets there. A max of 0 means no cap.",
              ("max by (node) (streamgate_redis_memory_used_bytes)", "{{node}} used"),
              ("max by (node) (streamgate_redis_memory_max_bytes)", "{{node}} max")),
        panel("Redis memory headroom", "percentunit",
              "1 - used/maxmemory per node (the lowest reading over the gateways; no line for a "
              "node without a cap). Below 1 - publish_memory_watermark publishes to that node "
              "get 507; under 20% for 5 minutes the memory-high alert fires.",
              ("min by (node) (streamgate_redis_memory_headroom_ratio)", "{{node}}")),
        panel("Publishes refused for memory", "short",
              "Publishes answered 507 with Retry-After per second, by topic and reason: "
              "watermark (refused before writing) or oom (Redis refused at maxmemory). Nothing "
              "of a refused batch is written; free memory on the nodes of these topics.",
              (f"sum by (topic, reason) "
               f"(rate(streamgate_publish_refused_full_total{I}{RATE}))",
               "{{topic}} {{reason}}")),
        panel("etcd latency p99", "s", "Per call, by operation.",
              (quantile(0.99, "streamgate_etcd_latency_seconds", "operation", I), "{{operation}}")),
        panel("etcd errors", "short", "Failed etcd calls per second by operation and error.",
              (f"sum by (instance, operation, error) (rate(streamgate_etcd_errors_total{I}{RATE}))",
               "{{instance}} {{operation}} {{error}}")),
        panel("HTTP requests", "reqps", "Requests per second by gateway and status.",
              (f"sum by (instance, status) (rate(streamgate_http_requests_total{I}{RATE}))",
               "{{instance}} {{status}}")),
        panel("Topics cached", "short", "Topics in each gateway's metadata cache.",
              (f"max by (instance) (streamgate_topics_cached{I})", "{{instance}}")),
        panel("Build", "short", "Version and Python of each gateway.",
              (f"max by (instance, version, python) (streamgate_build_info{I})",
               "{{instance}} {{version}}")),
    ),
)

DASHBOARDS = (OVERVIEW, TOPICS, GROUPS, NODES)


def _datasource_variable() -> gdash.DatasourceVariable:
    return gdash.DatasourceVariable("datasource").label("Data source").type("prometheus")


def _label_variable(name: str, query: str) -> gdash.QueryVariable:
    return (gdash.QueryVariable(name).label(name).datasource(DATASOURCE).query(query)
            .definition(query).multi(True).include_all(True).all_value(".*")
            .refresh(mdash.VariableRefresh.ON_TIME_RANGE_CHANGED)
            .sort(mdash.VariableSort.ALPHABETICAL_ASC)
            .current(mdash.VariableOption(selected=True, text="All", value="$__all")))


def _panel(spec: PanelSpec, index: int) -> gts.Panel:
    legend = (gcommon.VizLegendOptions().show_legend(True)
              .display_mode(mcommon.LegendDisplayMode.LIST)
              .placement(mcommon.LegendPlacement.BOTTOM))
    built = (gts.Panel().title(spec.title).description(spec.description).datasource(DATASOURCE)
             .unit(spec.unit).legend(legend)
             .grid_pos(mdash.GridPos(h=PANEL_HEIGHT, w=PANEL_WIDTH, x=(index % 2) * PANEL_WIDTH,
                                     y=(index // 2) * PANEL_HEIGHT)))
    for ref, target in zip("ABCDEFGH", spec.targets, strict=False):
        built = built.with_target(gprom.Dataquery().datasource(DATASOURCE).ref_id(ref)
                                  .expr(target.expr).legend_format(target.legend))
    return built


def build_dashboard(spec: DashboardSpec) -> dict[str, object]:
    """The dashboard's JSON model."""
    builder = (gdash.Dashboard(spec.title).uid(spec.uid).description(spec.description)
               .tags(["streamgate"]).refresh("30s").time("now-1h",
                                                         "now").timezone("browser").editable()
               .with_variable(_datasource_variable()))
    for name, query in spec.variables:
        builder = builder.with_variable(_label_variable(name, query))
    for index, panel_spec in enumerate(spec.panels):
        builder = builder.with_panel(_panel(panel_spec, index))
    rendered: dict[str, object] = json.loads(json.dumps(builder.build(), cls=JSONEncoder))
    return rendered


def render(spec: DashboardSpec) -> str:
    """The file content for a dashboard: sorted keys, two-space indent, trailing newline."""
    return json.dumps(build_dashboard(spec), indent=2, sort_keys=True) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Write (or with --check, compare) every dashboard file."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true",
                        help="fail if a committed dashboard is out of date")
    args = parser.parse_args(argv)
    stale = []
    for spec in DASHBOARDS:
        path = DASHBOARDS_DIR / spec.file
        content = render(spec)
        if args.check:
            if not path.exists() or path.read_text() != content:
                stale.append(path.name)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(content)
    if stale:
        print("out of date (run python grafana/build.py):", ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
