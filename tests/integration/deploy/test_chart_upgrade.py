"""``helm upgrade`` in the podman topology (kubelet.py): raising redis.primaries and etcd.replicas
(by one: etcd takes one new member at a time), then redis.replicasPerPrimary, makes the new pods
join (the pre-upgrade Job announces the etcd member, the revision's cluster Job adds the Redis
nodes, moves slots onto the new primary and gives every primary its new replica), while what was
written before stays readable and publish, subscribe and ``helm test`` go on working."""

from __future__ import annotations

import asyncio
import uuid

import aiohttp
import pytest
from containers import load_helper
from kubelet import Kubelet, Pod, render_chart
from release import CHART_VALUES, HEADERS

GROWN = {"redis": {"primaries": 4}, "etcd": {"replicas": 4}}  # etcd: one member per upgrade
MORE_REPLICAS = {"redis": {"primaries": 4, "replicasPerPrimary": 2}, "etcd": {"replicas": 4}}


@pytest.mark.timeout(1200)
def test_upgrade_joins_new_primary_etcd_member_and_replicas(kube: Kubelet) -> None:
    topic = f"upgrade-{uuid.uuid4().hex[:8]}"
    gateway = kube.component("gateway")[0]
    asyncio.run(publish(gateway, topic, range(100), create=True))
    values = load_helper("tests/helm/helm_render.py").merged(CHART_VALUES, GROWN)
    objects, _ = render_chart(values, revision=2)
    print(kube.upgrade(objects))

    assert_redis_topology(kube, primaries=4, replicas_each=1)
    members = kube.exec(kube.component("etcd")[0], "etcdctl", "member", "list")
    assert members.count(", started, ") == 4, members

    stored = asyncio.run(publish(kube.component("gateway")[1], topic, range(100, 200)))
    assert stored == list(range(200))
    [log] = kube.run_hook("test")
    assert "published 3, replayed 3, consumed 3" in log, log

    values = load_helper("tests/helm/helm_render.py").merged(CHART_VALUES, MORE_REPLICAS)
    objects, _ = render_chart(values, revision=3)
    print(kube.upgrade(objects))
    assert_redis_topology(kube, primaries=4, replicas_each=2)
    stored = asyncio.run(publish(kube.component("gateway")[0], topic, range(200, 300)))
    assert stored == list(range(300))


def assert_redis_topology(kube: Kubelet, primaries: int, replicas_each: int) -> None:
    """Every Redis pod is in the cluster: ``primaries`` serving slots, each with ``replicas_each``
    connected replicas."""
    redis = kube.component("redis")
    assert len(redis) == primaries * (1 + replicas_each)
    nodes = [line.split() for line in kube.exec(redis[0], "redis-cli", "cluster", "nodes")
             .replace("\r", "").splitlines()]
    serving = [node for node in nodes if "master" in node[2] and len(node) > 8]
    replicas = [node for node in nodes if "slave" in node[2] and node[7] == "connected"]
    wanted = sorted(node[0] for node in serving for _ in range(replicas_each))
    if len(serving) != primaries or sorted(node[3] for node in replicas) != wanted:
        for job, log in kube.job_logs.items():  # shown whole on failure (the message is cut)
            print(f"--- {job}\n{log}")
        print("--- cluster nodes\n" + "\n".join(" ".join(node[:4] + node[8:]) for node in nodes))
    assert len(serving) == primaries  # every primary serves slots
    assert len(nodes) == len(redis), nodes
    assert sorted(node[3] for node in replicas) == wanted


async def publish(gateway: Pod, topic: str, numbers: range, create: bool = False) -> list[int]:
    """Publishes the numbers with acks=all (creating the topic first if asked); every number the
    topic holds afterwards, in order."""
    async with aiohttp.ClientSession(base_url=gateway.url, headers=HEADERS) as http:
        if create:
            async with http.post("/v1/topics", json={"name": topic, "partitions": 1}) as r:
                assert r.status == 201, await r.text()
        async with http.post(f"/v1/topics/{topic}/messages", json={
                "acks": "all", "messages": [{"value": n} for n in numbers]}) as r:
            assert r.status == 200, await r.text()
        async with http.get(f"/v1/topics/{topic}/partitions/0/messages",
                            params={"limit": "1000"}) as r:
            assert r.status == 200, await r.text()
            return [message["value"] for message in (await r.json())["messages"]]
