"""A gateway on a cluster whose nodes are capped, published far past what they hold (no archive):
every refusal is 507 + Retry-After (never another 5xx), nothing of a refused batch is written, the
gateway stays ready, and everything acknowledged stays readable and consumable."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator

import pytest
import requests
from http_reads import replay_all

from streamgate_devstack.etcd import EtcdProcess
from streamgate_devstack.redis_cluster import RedisClusterProcess
from tests.own_cluster import own_cluster
from tests.served import serve_gateway

pytestmark = pytest.mark.integration

NODE_CAP = 16 * 1024 * 1024
VALUE = "v" * 8000


@pytest.fixture(scope="module")
def full_stack(tmp_path_factory: pytest.TempPathFactory, etcd_server: EtcdProcess,
               devstack_binaries: None) -> Iterator[tuple[str, RedisClusterProcess]]:
    """A capped cluster and one gateway on it (memory polled five times a second)."""
    with own_cluster(tmp_path_factory.mktemp("capped-gw"),
                     node_cap_bytes=NODE_CAP) as cluster:
        for url in serve_gateway(cluster, etcd_server,
                                 {"STREAMGATE_MEMORY_POLL_INTERVAL_S": "0.2"}):
            yield url, cluster


def _publish(url: str, topic: str, batch: int, acks: str) -> requests.Response:
    messages = [{"key": f"k{batch}-{i}", "value": {"n": f"{batch}-{i}", "pad": VALUE}}
                for i in range(40)]
    return requests.post(f"{url}/v1/topics/{topic}/messages",
                         json={"acks": acks, "messages": messages}, timeout=30)


def _fill(url: str, topic: str) -> tuple[dict[str, tuple[int, str]], list[requests.Response]]:
    """Publish until five batches in a row are refused: what was acknowledged (value id ->
    partition, offset) and the refusals."""
    acknowledged: dict[str, tuple[int, str]] = {}
    refusals: list[requests.Response] = []
    for batch in range(NODE_CAP * 3 // (len(VALUE) * 40) * 3):
        response = _publish(url, topic, batch, "all" if batch % 2 else "1")
        if response.status_code == 200:
            for i, result in enumerate(response.json()["results"]):
                acknowledged[f"{batch}-{i}"] = (result["partition"], result["offset"])
            continue
        assert response.status_code == 507, response.text
        refusals.append(response)
        if len(refusals) >= 5 and all(r.status_code == 507 for r in refusals[-5:]):
            return acknowledged, refusals
    raise AssertionError("the capped cluster never refused a publish")


def _pull_all(url: str, topic: str, group: str) -> list[str]:
    """Every message the group is handed (one nack on the way), acked; their value ids."""
    seen: list[str] = []
    nacked = False
    while True:
        pulled = requests.post(f"{url}/v1/groups/{group}/pull",
                               json={"topic": topic, "max_messages": 200}, timeout=30)
        assert pulled.status_code == 200, pulled.text
        messages = pulled.json()["messages"]
        if not messages:
            return seen
        receipts = [m["receipt"] for m in messages]
        if not nacked:  # a nack on a full node: redelivered at once, counted once below
            nack = requests.post(f"{url}/v1/groups/{group}/nack",
                                 json={"receipts": receipts[:1]}, timeout=30)
            assert nack.json() == {"nacked": 1}
            nacked, receipts, messages = True, receipts[1:], messages[1:]
        acked = requests.post(f"{url}/v1/groups/{group}/ack", json={"receipts": receipts},
                              timeout=30)
        assert acked.json() == {"acked": len(receipts)}
        # the test's acks=0 batch (plain numbers) may have found room: only filled ones count
        seen += [m["value"]["n"] for m in messages if isinstance(m["value"], dict)]


def test_a_full_cluster_refuses_with_507_and_keeps_what_it_acknowledged(
        full_stack: tuple[str, RedisClusterProcess]) -> None:
    url, cluster = full_stack
    topic = f"full-{uuid.uuid4().hex[:8]}"
    created = requests.post(f"{url}/v1/topics", json={"name": topic, "partitions": 6},
                            timeout=30)
    assert created.status_code == 201, created.text
    acknowledged, refusals = _fill(url, topic)

    for refusal in refusals:
        assert refusal.headers["Content-Type"].startswith("application/problem+json")
        assert int(refusal.headers["Retry-After"]) >= 1
        assert refusal.json()["type"].endswith("/storage-full")
    acks0 = requests.post(f"{url}/v1/topics/{topic}/messages", timeout=30,
                          json={"acks": "0", "messages": [{"key": "late", "value": 1}] * 40})
    assert acks0.status_code in (202, 507)  # the node "late" hashes to may have room
    assert requests.get(f"{url}/readyz", timeout=10).status_code == 200

    stored = {m["value"]["n"]: (m["partition"], m["offset"])
              for p in range(6) for m in replay_all(url, topic, p) if isinstance(m["value"], dict)}
    assert stored == acknowledged  # nothing lost, nothing of a refused batch written
    assert sorted(_pull_all(url, topic, "after-full")) == sorted(acknowledged)

    metrics = requests.get(f"{url}/metrics", timeout=10).text
    assert _samples(metrics, "streamgate_publish_refused_full_total") >= len(refusals)
    caps = re.findall(r'^streamgate_redis_memory_max_bytes\{[^}]*\} (\S+)$', metrics, re.M)
    assert len(caps) == len(cluster.nodes)
    assert {float(cap) for cap in caps} == {float(NODE_CAP)}
    assert "streamgate_redis_memory_headroom_ratio{" in metrics


def _samples(metrics: str, name: str) -> float:
    return sum(float(value) for value in
               re.findall(rf'^{name}\{{[^}}]*\}} (\S+)$', metrics, re.M))
