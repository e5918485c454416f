"""Live proof: every panel query of every dashboard returns data from a real Prometheus scraping
real gateways.

Two `streamgate serve` processes run on the session's Redis Cluster and a private etcd: gateway A as
usual, gateway B with ``min_insync_replicas=2`` (the test cluster has one replica per primary, so
its acks=all publishes fail with NotEnoughReplicas) and a topic rate limit. Traffic covers publish
with acks 0/1/all, a delayed message, a WebSocket group subscriber that acks and nacks until a
message is dead-lettered, HTTP pull, a group with lag, retention trimming un-acked entries, a
broadcast subscriber too slow to drain (closed with 4008), a rate-limited publish, a publish into
full Redis memory (507; the nodes run with a maxmemory for the test) that also makes both gateways'
archive (a shared tmp path, moving entries under memory pressure only) move the consumed entries,
a topic whose archive folder is blocked by a file (failing moves), and finally etcd going away
(etcd errors). Prometheus 2.x (Debian) scrapes both gateways every second; then each
panel target is evaluated over the test's time range with the dashboard variables set to ``.*``. A
result only counts if it has at least one finite sample; no query may carry an ``or vector(...)``
fallback.
"""

from __future__ import annotations

import asyncio
import math
import shutil
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import aiohttp
import pytest
from grafana_queries import PanelQuery, dashboards, panel_queries
from live_stack import gateways, prometheus, raw_websocket, redis_maxmemory

from storage.archive.names import topic_dir
from streamgate_devstack import EtcdConfig, EtcdProcess, MissingBinary, RedisClusterProcess

pytestmark = pytest.mark.integration

RATE_INTERVAL = "15s"
VARIABLES = {"$topic": ".*", "$group": ".*", "$instance": ".*"}
BULK_VALUE = "v" * 100_000


def _binary(name: str, report_missing: Callable[[str], NoReturn]) -> str:
    path = shutil.which(name)
    if path is None:
        report_missing(f"{name} is missing (Debian package prometheus; make deps installs it)")
    return path


def _gateway_env(redis_cluster: RedisClusterProcess, etcd: EtcdProcess, prefix: str,
                 archive: Path) -> dict[str, str]:
    return {
        "STREAMGATE_REDIS_NODES": ",".join(f"{h}:{p}" for h, p in redis_cluster.startup_nodes),
        "STREAMGATE_ETCD_ENDPOINTS": etcd.endpoint,
        "STREAMGATE_ETCD_PREFIX": prefix,
        "STREAMGATE_OWNER_LEASE_TTL_S": "2",
        "STREAMGATE_MEMBER_LEASE_TTL_S": "2",
        "STREAMGATE_LAG_INTERVAL_S": "0.5",
        "STREAMGATE_RETENTION_INTERVAL_S": "0.5",
        "STREAMGATE_SWEEP_INTERVAL_S": "0.5",
        "STREAMGATE_SLOW_CLIENT_TIMEOUT_S": "1",
        "STREAMGATE_WAIT_TIMEOUT_MS": "200",
        "STREAMGATE_ETCD_TIMEOUT_S": "1",
        "STREAMGATE_MEMORY_POLL_INTERVAL_S": "0.5",
        # moves by memory only: none before the full-memory step, so every read before it is hot
        "STREAMGATE_ARCHIVE_URL": archive.as_uri(),
        "STREAMGATE_HOT_RETENTION_MS": "0",
        "STREAMGATE_ARCHIVE_INTERVAL_S": "0.5",
        # The heaviest-keys panel reads keys, exported only where /metrics is for operators; group
        # names stay pseudonyms, so the groups dashboard and alerts are checked as they run by
        # default.
        "STREAMGATE_METRICS_EXPOSE_KEYS": "true",
    }


def expression_for(query: PanelQuery) -> str:
    """The panel's PromQL with Grafana's variables replaced as a dashboard set to "All" would."""
    expr = query.expr.replace("$__rate_interval", RATE_INTERVAL)
    for variable, value in VARIABLES.items():
        expr = expr.replace(variable, value)
    assert "$" not in expr, f"unsubstituted variable in {query}"
    return expr


async def _json(response: aiohttp.ClientResponse) -> Any:
    return await response.json(content_type=None)


async def _publish(http: aiohttp.ClientSession, url: str, topic: str,
                   messages: list[dict[str, Any]], acks: str = "1") -> int:
    async with http.post(f"{url}/v1/topics/{topic}/messages",
                         json={"acks": acks, "messages": messages}) as r:
        await r.read()
        return r.status


async def _create_topics(http: aiohttp.ClientSession, url: str,
                         topics: dict[str, dict[str, int]]) -> None:
    for name, fields in topics.items():
        async with http.post(f"{url}/v1/topics", json={"name": name, **fields}) as response:
            assert response.status == 201, await response.text()


async def _drive_publishes(http: aiohttp.ClientSession, a: str, b: str, orders: str) -> None:
    """acks 0/1/all with a skewed key on A (a hot partition), a delayed message, failures and a 429
    on B."""
    for acks in ("0", "1", "all"):
        batch = [{"key": "hot", "value": {"n": n}} for n in range(30)] + \
                [{"key": f"k{n}", "value": {"n": n}} for n in range(6)]
        assert await _publish(http, a, orders, batch, acks) in (200, 202)
    assert await _publish(http, a, orders, [{"key": "later", "value": 1, "delay_ms": 200}]) == 200
    # NotEnoughReplicas
    assert await _publish(http, b, orders, [{"value": "needs 2 replicas"}], "all") == 503
    assert await _publish(http, b, orders, [{"value": n} for n in range(4)]) == 200
    # topic limit 5/s
    assert await _publish(http, b, orders, [{"value": n} for n in range(4)]) == 429
    async with http.get(f"{a}/v1/topics/no-such-topic") as response:
        assert response.status == 404


async def _group_subscriber_until_dead_letter(http: aiohttp.ClientSession, a: str,
                                              orders: str) -> None:
    """Shared group: ack everything but one message, nack that one until it exceeds max_deliveries
    (DLQ)."""
    query = f"topic={orders}&group=billing&mode=shared&max_deliveries=2&ack_timeout_ms=1000"
    async with http.ws_connect(f"{a}/v1/subscribe?{query}") as ws:
        victim: tuple[int, str] | None = None
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            frame = await ws.receive_json(timeout=5)
            if frame["type"] != "message":
                continue
            ref = {"partition": frame["partition"], "offset": frame["offset"]}
            if victim is None:
                victim = (frame["partition"], frame["offset"])
            if (frame["partition"], frame["offset"]) == victim:
                await ws.send_json({"type": "nack", "messages": [ref]})
                if frame["delivery_count"] == 2:  # the next reclaim exceeds max_deliveries=2
                    return await _wait_for_metric(http, a,
                                                  "streamgate_group_dead_lettered_total{", 10)
            else:
                await ws.send_json({"type": "ack", "messages": [ref]})
        raise AssertionError("the nacked message was not redelivered")


async def _pull_and_leave_lag(http: aiohttp.ClientSession, a: str, orders: str, short: str) -> None:
    """HTTP pull: ack two, nack one, leave the rest as lag; un-acked pulls on a short-retention
    topic."""
    async with http.post(f"{a}/v1/groups/pullers/pull",
                         json={"topic": orders, "max_messages": 5}) as response:
        messages = (await _json(response))["messages"]
    assert len(messages) == 5
    receipts = [m["receipt"] for m in messages]
    async with http.post(f"{a}/v1/groups/pullers/ack", json={"receipts": receipts[:2]}) as response:
        assert response.status == 200
    async with http.post(f"{a}/v1/groups/pullers/nack",
                         json={"receipts": receipts[2:3]}) as response:
        assert response.status == 200
    assert await _publish(http, a, short, [{"value": n} for n in range(10)]) == 200
    async with http.post(f"{a}/v1/groups/slowpoke/pull",
                         json={"topic": short, "max_messages": 2}) as response:
        assert response.status == 200
    # trimmed un-acked later
    assert await _publish(http, a, short, [{"value": n} for n in range(10)]) == 200


async def _expire_and_purge(http: aiohttp.ClientSession, a: str, topic: str) -> None:
    """Messages that expire before a pull reaches them, then a purge of what is left."""
    assert await _publish(http, a, topic, [{"value": n, "ttl_ms": 1} for n in range(3)]) == 200
    assert await _publish(http, a, topic, [{"value": "kept"}]) == 200
    await asyncio.sleep(0.05)
    async with http.post(f"{a}/v1/groups/pullers/pull",
                         json={"topic": topic, "max_messages": 10}) as response:
        assert [m["value"] for m in (await _json(response))["messages"]] == ["kept"]
    async with http.post(f"{a}/v1/topics/{topic}/purge") as response:
        assert (await _json(response))["purged"] == 4


async def _slow_broadcast_subscriber(http: aiohttp.ClientSession, a: str, bulk: str) -> None:
    """A broadcast subscriber that never reads while 6 MB wait for it: closed with 4008."""
    for start in range(0, 60, 20):
        assert await _publish(http, a, bulk, [{"value": {"n": n, "pad": BULK_VALUE}}
                                              for n in range(start, start + 20)]) == 200
    host, port = a.removeprefix("http://").split(":")
    sock = await asyncio.to_thread(raw_websocket, host, int(port),
                                   f"/v1/subscribe?topic={bulk}&from=earliest&max_in_flight=50")
    try:
        await _wait_for_metric(http, a, "streamgate_websocket_slow_closes_total{", 15)
    finally:
        sock.close()


async def _wait_for_metric(http: aiohttp.ClientSession, urls: str | tuple[str, ...], prefix: str,
                           timeout_s: float) -> None:
    """Wait until a sample named ``prefix...`` with a non-zero value shows on one of the gateways'
    /metrics."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for url in (urls,) if isinstance(urls, str) else urls:
            async with http.get(f"{url}/metrics") as response:
                if any(line.startswith(prefix) and not line.endswith(" 0.0")
                       for line in (await response.text()).splitlines()):
                    return
        await asyncio.sleep(0.2)
    raise AssertionError(f"{prefix} did not appear on {urls}")


async def _publish_into_full_memory(http: aiohttp.ClientSession, urls: tuple[str, str],
                                    orders: str, redis_cluster: RedisClusterProcess) -> None:
    """Every node capped below what it holds: a publish gets 507 with Retry-After (refused by Redis
    or, once the gateway has polled, by its watermark before writing), and the partitions' owners
    move what their groups consumed into the archive (but the blocked topic's); then the caps go
    back."""
    a = urls[0]
    with redis_maxmemory(redis_cluster, 1):
        async with http.post(f"{a}/v1/topics/{orders}/messages",
                             json={"messages": [{"value": "no room"}]}) as response:
            await response.read()
            assert response.status == 507
            assert int(response.headers["Retry-After"]) > 0
        await _wait_for_metric(http, a, "streamgate_publish_refused_full_total{", 10)
        await _wait_for_metric(http, urls, "streamgate_archive_entries_total{", 15)
        await _wait_for_metric(http, urls, 'streamgate_duty_errors_total{duty="archive"}', 15)


async def _trickle(http: aiohttp.ClientSession, a: str, orders: str, seconds: float) -> None:
    """Publish with acks 1 and all every 200 ms, so rates and latency quantiles span several
    scrapes."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for acks in ("1", "all"):
            assert await _publish(http, a, orders, [{"key": "hot", "value": acks}], acks) == 200
        await asyncio.sleep(0.2)


async def _range_query(http: aiohttp.ClientSession, prom: str, expr: str, start: float,
                       end: float) -> list[Any]:
    params = {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": "1"}
    async with http.get(f"{prom}/api/v1/query_range", params=params) as response:
        body = await _json(response)
    assert body.get("status") == "success", (expr, body)
    result: list[Any] = body["data"]["result"]
    return result


def _has_finite_sample(result: list[Any]) -> bool:
    return any(math.isfinite(float(value)) for series in result for _, value in series["values"])


async def test_every_panel_query_returns_data_from_live_prometheus(
        redis_cluster: RedisClusterProcess, tmp_path: Path,
        report_missing: Callable[[str], NoReturn]) -> None:
    prometheus_binary = _binary("prometheus", report_missing)
    etcd = EtcdProcess(EtcdConfig(data_dir=tmp_path / "etcd"))
    try:
        etcd.start()
    except MissingBinary as exc:
        report_missing(str(exc))
    try:
        archive = tmp_path / "archive"
        archive.mkdir()
        base = _gateway_env(redis_cluster, etcd, f"/streamgate-live-{uuid.uuid4().hex[:8]}/",
                            archive)
        limited = {**base, "STREAMGATE_MIN_INSYNC_REPLICAS": "2",
                   "STREAMGATE_RATE_LIMIT_TOPIC_MESSAGES_PER_S": "5"}
        # a cap far above what the test writes, so that the nodes report headroom
        with redis_maxmemory(redis_cluster, 1 << 30), gateways([base, limited]) as (a, b):
            targets = [a.removeprefix("http://"), b.removeprefix("http://")]
            with prometheus(prometheus_binary, targets, tmp_path / "prometheus") as prom:
                await _drive_and_check(redis_cluster, etcd, (a, b), prom, archive)
    finally:
        etcd.stop()


async def _drive_and_check(redis_cluster: RedisClusterProcess, etcd: EtcdProcess,
                           urls: tuple[str, str], prom: str, archive: Path) -> None:
    a, b = urls
    started = time.time()
    suffix = uuid.uuid4().hex[:6]
    orders, short, bulk = f"orders-{suffix}", f"short-{suffix}", f"bulk-{suffix}"
    profiles, expiring = f"profiles-{suffix}", f"expiring-{suffix}"
    blocked = f"blocked-{suffix}"
    # a file where the topic's archive folder goes: every move of it fails (as root too)
    (archive / topic_dir(blocked)).write_text("not a folder")
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http:
        await _create_topics(http, a,
                             {orders: {"partitions": 4},
                              short: {"partitions": 2, "retention_ms": 1000},
                              bulk: {"partitions": 1},
                              profiles: {"partitions": 1, "compact": True, "retention_ms": 1},
                              expiring: {"partitions": 1}, blocked: {"partitions": 1}})
        assert await _publish(http, a, blocked, [{"value": "stays hot"}]) == 200
        # a compacted topic's superseded values, compacted by its partition's owner
        assert await _publish(http, a, profiles, [{"key": "p", "value": n} for n in range(5)]) \
            == 200
        slow = asyncio.create_task(_slow_broadcast_subscriber(http, a, bulk))
        await _drive_publishes(http, a, b, orders)
        await _group_subscriber_until_dead_letter(http, a, orders)
        await _pull_and_leave_lag(http, a, orders, short)
        await _expire_and_purge(http, a, expiring)
        await slow
        # Retention runs on the partitions' owners, which may be either gateway.
        await _wait_for_metric(http, (a, b), "streamgate_retention_unacked_dropped_total{", 15)
        await _wait_for_metric(http, (a, b), "streamgate_compacted_entries_total{", 15)
        await _trickle(http, a, orders, 3.0)  # lag duties, a few scrapes, and publishes spread
                                              # across them
        await _publish_into_full_memory(http, urls, orders, redis_cluster)
        etcd.stop()  # from here on etcd calls fail: keepalives, and the readiness probe below
        for url in (a, b):
            async with http.get(f"{url}/readyz") as response:
                assert response.status == 503
        await asyncio.sleep(3)
        await _assert_every_panel_has_data(http, prom, started)


async def _assert_every_panel_has_data(http: aiohttp.ClientSession, prom: str,
                                       started: float) -> None:
    queries = list(panel_queries())
    empty = []
    for query in queries:
        assert "orvector(" not in query.expr.replace(" ", ""), (
            f"{query}: a vector fallback hides missing data")
        result = await _range_query(http, prom, expression_for(query), started, time.time())
        if not _has_finite_sample(result):
            empty.append(f"{query.dashboard} / {query.panel} [{query.ref_id}]: {query.expr}")
    boards = dashboards()
    panels = sum(len(board["panels"]) for board in boards.values())
    print(f"checked {len(boards)} dashboards, {panels} panels, {len(queries)} queries against a "
          "live Prometheus")
    assert not empty, "panel queries without data:\n" + "\n".join(empty)
