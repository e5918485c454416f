"""A soak in the suite's budget: several times the cluster's memory published through a gateway on
capped nodes with the archive on. No node passes its cap, a publisher that honours 507 gets
everything in, every acknowledged message replays intact from the first offset, and a group that
consumes along the way gets all of it, as do a group that read nothing meanwhile (holding no
memory: it reads the archive) and one created afterwards from the first offset; an early key's
history is whole."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from http_reads import replay_all

from streamgate_devstack.etcd import EtcdProcess
from streamgate_devstack.redis_cluster import RedisClusterProcess
from tests.own_cluster import own_cluster
from tests.served import serve_gateway

pytestmark = pytest.mark.integration

NODE_CAP = 24 * 1024 * 1024
PARTITIONS = 6
VALUE = "s" * 2000
BATCH = 100
TOTAL = NODE_CAP * 3 * 3 // len(VALUE)  # three times what the three primaries hold
# the archive frees room within seconds: a publisher refused this long is stuck
REFUSED_FOR_S = 90


@pytest.fixture
def soak_stack(tmp_path: Path, etcd_server: EtcdProcess,
               devstack_binaries: None) -> Iterator[tuple[str, RedisClusterProcess]]:
    with own_cluster(tmp_path / "redis", node_cap_bytes=NODE_CAP) as cluster:
        for url in serve_gateway(cluster, etcd_server, {
                "STREAMGATE_ARCHIVE_URL": f"file://{tmp_path}/archive",
                "STREAMGATE_MEMORY_POLL_INTERVAL_S": "0.2",
                "STREAMGATE_ARCHIVE_INTERVAL_S": "0.2",
                "STREAMGATE_HOT_RETENTION_MS": "0",
                "STREAMGATE_ARCHIVE_MEMORY_WATERMARK": "0.5",
                "STREAMGATE_ARCHIVE_SEGMENT_MAX_ENTRIES": "2000",
                # idempotency keys stay in Redis for this long whatever the archive moves: on
                # nodes this small a day of them would fill a third of each by the end
                "STREAMGATE_DEDUP_TTL_MS": "20000"}):
            yield url, cluster


class MemoryProbe(threading.Thread):
    """The highest used_memory each primary reports while the soak runs."""

    def __init__(self, cluster: RedisClusterProcess) -> None:
        super().__init__(daemon=True)
        self.cluster, self.highest = cluster, 0
        self.done = threading.Event()

    def run(self) -> None:
        clients = [node.client() for node in self.cluster.primaries]
        try:
            while not self.done.wait(0.05):
                for client in clients:
                    self.highest = max(self.highest, int(client.info("memory")["used_memory"]))
        finally:
            for client in clients:
                client.close()


class Consumer(threading.Thread):
    """A group member pulling and acking until told to stop and nothing is left."""

    def __init__(self, url: str, topic: str, group: str = "live") -> None:
        super().__init__(daemon=True)
        self.url, self.topic, self.seen = url, topic, []  # type: ignore[var-annotated]
        self.group = group
        self.done = threading.Event()

    def run(self) -> None:
        while True:
            pulled = requests.post(f"{self.url}/v1/groups/{self.group}/pull", timeout=60,
                                   json={"topic": self.topic, "max_messages": 300,
                                         "wait_ms": 200}).json()["messages"]
            if not pulled and self.done.is_set():
                return
            if pulled:
                requests.post(f"{self.url}/v1/groups/{self.group}/ack", timeout=60,
                              json={"receipts": [m["receipt"] for m in pulled]})
                self.seen += [m["value"]["n"] for m in pulled]


def _publish_all(url: str, topic: str) -> tuple[dict[int, tuple[int, str]], int]:
    """Every batch in, honouring 507 (a retry keeps its idempotency keys); what was acknowledged
    and how many 507s it took."""
    acknowledged: dict[int, tuple[int, str]] = {}
    refused = 0
    for start in range(0, TOTAL, BATCH):
        body = {"acks": "1", "messages": [
            {"key": f"k{n % 50}", "value": {"n": n, "pad": VALUE}, "idempotency_key": f"m{n}"}
            for n in range(start, min(start + BATCH, TOTAL))]}
        refused_since = time.monotonic()
        while (response := requests.post(f"{url}/v1/topics/{topic}/messages", json=body,
                                         timeout=60)).status_code == 507:
            refused += 1
            assert time.monotonic() - refused_since < REFUSED_FOR_S, response.text
            time.sleep(0.2)
        assert response.status_code == 200, response.text
        for message, result in zip(body["messages"], response.json()["results"], strict=True):
            acknowledged[message["value"]["n"]] = (result["partition"], result["offset"])
    return acknowledged, refused


def test_three_times_the_memory_goes_in_and_replays_whole(
        soak_stack: tuple[str, RedisClusterProcess]) -> None:
    url, cluster = soak_stack
    topic = f"soak-{uuid.uuid4().hex[:8]}"
    assert requests.post(f"{url}/v1/topics", json={"name": topic, "partitions": PARTITIONS,
                                                   "key_index": True},
                         timeout=30).status_code == 201
    probe, consumer = MemoryProbe(cluster), Consumer(url, topic)
    for group in ("live", "stalled"):  # from the first offset on; "stalled" reads only at the end
        requests.post(f"{url}/v1/groups/{group}/pull", json={"topic": topic, "max_messages": 1},
                      timeout=30)
    probe.start()
    consumer.start()
    try:
        acknowledged, refused = _publish_all(url, topic)
    finally:
        consumer.done.set()
        consumer.join(120)
        probe.done.set()
        probe.join(10)
    print(f"\n[soak] {len(acknowledged)} messages, {refused} refusals (507), highest primary "
          f"memory {probe.highest / NODE_CAP:.2f} of its cap")
    assert probe.highest <= NODE_CAP
    stored: dict[int, tuple[int, str]] = {}
    for partition in range(PARTITIONS):
        for message in replay_all(url, topic, partition):
            assert message["value"]["pad"] == VALUE
            stored[message["value"]["n"]] = (partition, message["offset"])
    assert stored == acknowledged
    assert sorted(consumer.seen) == list(range(TOTAL))
    metrics = requests.get(f"{url}/metrics", timeout=10).text
    assert _archived(metrics, topic) > TOTAL // 2
    # one group created now from the first offset, one that was far behind as memory filled:
    # both read the archive first
    late = [Consumer(url, topic, group) for group in ("late", "stalled")]
    for consumer in late:
        consumer.done.set()
        consumer.start()
    for consumer in late:
        consumer.join(180)
        assert sorted(consumer.seen) == list(range(TOTAL)), consumer.group
    assert _history(url, topic, "k0") == list(range(0, TOTAL, 50)), "an early key's history"


def _history(url: str, topic: str, key: str) -> list[int]:
    """Every message of ``key`` through the key history API, page by page."""
    values: list[int] = []
    cursor: dict[str, Any] = {}
    while True:
        page = requests.get(f"{url}/v1/topics/{topic}/history", timeout=60,
                            params={"key": key, "limit": 500, **cursor}).json()
        if not page["messages"]:
            return values
        values += [message["value"]["n"] for message in page["messages"]]
        cursor = {"from": page["next_offset"]}


def _archived(metrics: str, topic: str) -> float:
    prefix = f'streamgate_archive_entries_total{{topic="{topic}"}} '
    lines: Any = [line for line in metrics.splitlines() if line.startswith(prefix)]
    return float(lines[0].split()[-1]) if lines else 0.0
