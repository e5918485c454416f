"""The chart's workloads run as rendered (kubelet.py): its Job forms the Redis Cluster of 3+3 pods,
3 etcd members reach quorum, 2 gateways serve through them, the topics hook applies the declared
topics, and SIGTERM drains a gateway within terminationGracePeriodSeconds while its partitions move
to the other."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import aiohttp
import orjson
import pytest
from kubelet import Kubelet, Pod
from release import DECLARED_TOPICS, HEADERS


def redis_cli(kubelet: Kubelet, pod: Pod, *args: str) -> str:
    done = kubelet.exec(pod, "redis-cli", "-h", "127.0.0.1", *args)
    return done.replace("\r", "")


@pytest.mark.timeout(1500)
def test_the_job_forms_the_cluster_and_every_probe_answers(kube: Kubelet) -> None:
    redis = kube.component("redis")
    assert len(redis) == 6
    assert kube.job_attempts == 1
    info = redis_cli(kube, redis[0], "cluster", "info")
    assert "cluster_state:ok" in info, info
    assert "cluster_size:3" in info, info
    roles = [line.split()[2] for line in redis_cli(kube, redis[0], "cluster", "nodes").splitlines()]
    assert sorted(role.replace("myself,", "") for role in roles) == ["master"] * 3 + ["slave"] * 3
    members = kube.exec(kube.component("etcd")[0], "etcdctl", "member", "list")
    assert members.count(", started, ") == 3, members
    for pod in kube.pods.values():
        if not pod.job:
            assert kube.probe(pod, "livenessProbe"), pod.name
            assert kube.probe(pod, "readinessProbe"), pod.name
    # the gateway runs as the chart says: uid 10001, nothing writable outside its volumes
    gateway = kube.component("gateway")[0]
    assert kube.exec(gateway, "id", "-u").strip() == "10001"
    assert kube.exec(gateway, "sh", "-c", "touch /opt/x || echo refused").strip() == "refused"


@pytest.mark.timeout(600)
def test_acks_all_publish_and_group_subscription_work(kube: Kubelet) -> None:
    first, second = kube.component("gateway")
    received = asyncio.run(publish_and_consume(first.url, second.url))
    assert received == [f"k{n}" for n in range(100)]


async def publish_and_consume(publisher: str, subscriber: str) -> list[str]:
    """100 messages with acks=all through one gateway, consumed and acked by a group member on the
    other; the keys in the order they came (one partition keeps order)."""
    topic = f"pods-{uuid.uuid4().hex[:8]}"
    async with aiohttp.ClientSession(headers=HEADERS) as http:
        async with http.post(f"{publisher}/v1/topics", json={"name": topic, "partitions": 1}) as r:
            assert r.status == 201, await r.text()
        ws = await http.ws_connect(f"{ws_url(subscriber)}/v1/subscribe?topic={topic}"
                                   "&group=pods&mode=exclusive&from=earliest")
        assert (await ws.receive_json(timeout=30))["type"] == "assignment"
        async with http.post(f"{publisher}/v1/topics/{topic}/messages", json={
                "acks": "all", "messages": [{"key": f"k{n}", "value": {"n": n}}
                                            for n in range(100)]}) as r:
            assert r.status == 200, await r.text()
        keys: list[str] = []
        while len(keys) < 100:
            frame = await ws.receive_json(timeout=30)
            for message in frame["messages"] if frame["type"] == "messages" else [frame]:
                assert message["type"] == "message", message
                keys.append(message["key"])
                await ws.send_json({"type": "ack", "messages": [
                    {"partition": message["partition"], "offset": message["offset"]}]})
        await ws.close()
        return keys


@pytest.mark.timeout(600)
def test_helm_test_hook_publishes_replays_and_consumes(kube: Kubelet) -> None:
    [log] = kube.run_hook("test")
    assert "published 3, replayed 3, consumed 3" in log, log


@pytest.mark.timeout(600)
def test_topics_hook_creates_the_declared_topics_then_changes_nothing(kube: Kubelet) -> None:
    [installed] = kube.run_hook("post-install")
    assert step_actions(installed) == {t["name"]: "create" for t in DECLARED_TOPICS}, installed
    found = asyncio.run(listed_topics(kube.component("gateway")[0].url))
    for declared in DECLARED_TOPICS:
        topic = found[declared["name"]]
        assert {key: topic[key] for key in declared} == declared
    [upgraded] = kube.run_hook("post-upgrade")
    assert step_actions(upgraded) == {t["name"]: "unchanged" for t in DECLARED_TOPICS}, upgraded


def step_actions(log: str) -> dict[str, str]:
    """Topic -> the action of the topics Job's JSON line for it."""
    lines = [orjson.loads(line) for line in log.splitlines() if line.startswith("{")]
    return {line["topic"]: line["action"] for line in lines}


async def listed_topics(url: str) -> dict[str, dict[str, Any]]:
    async with aiohttp.ClientSession(headers=HEADERS) as http, \
            http.get(f"{url}/v1/topics") as listed:
        assert listed.status == 200, await listed.text()
        return {topic["name"]: topic for topic in (await listed.json())["topics"]}


@pytest.mark.timeout(600)
def test_sigterm_drains_gateway_in_grace_and_partitions_move(kube: Kubelet) -> None:
    leaving, staying = kube.component("gateway")
    grace = leaving.spec["terminationGracePeriodSeconds"]
    outcome = asyncio.run(drain(kube, leaving, staying))
    assert outcome["closed"] == (aiohttp.WSMsgType.CLOSE, 1001)
    assert outcome["pulled"] == 200
    assert outcome["stop_s"] < grace
    assert kube.exit_code(leaving) == 0, kube.logs(leaving)
    assert outcome["taken_over"] == [0, 1, 2, 3]
    assert set(outcome["owners"]) == {staying.name}, outcome["owners"]
    assert outcome["delivered_after"] == 4
    print(f"SIGTERM to exit {outcome['stop_s']:.1f} s (grace {grace} s); the other member held "
          f"every partition {outcome['takeover_s']:.1f} s after the SIGTERM")


async def drain(kube: Kubelet, leaving: Pod, staying: Pod) -> dict[str, Any]:
    """An exclusive group with a member on each gateway and a long-poll pull waiting on the leaving
    one; SIGTERM to the leaving pod; what each side saw."""
    topic, outcome = f"drain-{uuid.uuid4().hex[:8]}", dict[str, Any]()
    async with aiohttp.ClientSession(headers=HEADERS) as http:
        async with http.post(f"{staying.url}/v1/topics", json={"name": topic,
                                                                 "partitions": 4}) as r:
            assert r.status == 201, await r.text()
        members = [await http.ws_connect(f"{ws_url(pod.url)}/v1/subscribe?topic={topic}"
                                         "&group=drain&mode=exclusive&from=latest")
                   for pod in (leaving, staying)]
        await settled(members)
        pull = asyncio.create_task(http.post(f"{leaving.url}/v1/groups/waiting/pull", json={
            "topic": topic, "wait_ms": 3000, "max_messages": 10}))
        await asyncio.sleep(0.5)  # the pull is waiting in the leaving gateway
        started = time.monotonic()
        stop = asyncio.create_task(asyncio.to_thread(kube.stop, leaving))
        closed = await members[0].receive(timeout=grace_of(leaving))
        while closed.type is aiohttp.WSMsgType.TEXT:  # an assignment still on its way
            closed = await members[0].receive(timeout=grace_of(leaving))
        outcome["closed"] = (closed.type, closed.data)
        outcome["pulled"] = (await pull).status
        outcome["taken_over"] = await assignment_of_all(members[1], 4)
        outcome["takeover_s"] = time.monotonic() - started
        outcome["stop_s"] = await stop
        outcome["owners"] = await owners_once_moved(kube, topic, leaving.name)
        async with http.post(f"{staying.url}/v1/topics/{topic}/messages", json={
                "acks": "all", "messages": [{"key": f"p{n}", "value": n, "partition": n}
                                            for n in range(4)]}) as r:
            assert r.status == 200, await r.text()
        outcome["delivered_after"] = await count_messages(members[1], 4)
        await members[1].close()
    return outcome


async def settled(members: list[aiohttp.ClientWebSocketResponse]) -> None:
    """Until the two members' latest assignments split the 4 partitions between them."""
    latest: dict[int, list[int]] = {}
    deadline = time.monotonic() + 60
    while len(latest) < 2 or sorted(p for ps in latest.values() for p in ps) != [0, 1, 2, 3]:
        assert time.monotonic() < deadline, latest
        for index, member in enumerate(members):
            try:
                frame = await member.receive_json(timeout=0.2)
            except TimeoutError:
                continue
            if frame["type"] == "assignment":
                latest[index] = frame["partitions"]


async def assignment_of_all(member: aiohttp.ClientWebSocketResponse, count: int) -> list[int]:
    while True:
        frame = await member.receive_json(timeout=60)
        if frame["type"] == "assignment" and len(frame["partitions"]) == count:
            return list(frame["partitions"])


async def count_messages(member: aiohttp.ClientWebSocketResponse, count: int) -> int:
    seen = 0
    while seen < count:
        frame = await member.receive_json(timeout=30)
        if frame["type"] == "messages":
            seen += len(frame["messages"])
        elif frame["type"] == "message":
            seen += 1
    return seen


async def owners_once_moved(kube: Kubelet, topic: str, gone: str) -> list[str]:
    """The topic's partition owners in etcd once the stopped node holds none and all 4 are held."""
    etcd = kube.component("etcd")[0]
    deadline = time.monotonic() + 60
    while True:
        text = await asyncio.to_thread(kube.exec, etcd, "etcdctl", "get", "--prefix",
                                       f"/streamgate/owners/{topic}/", "--print-value-only")
        owners = text.split()
        if (len(owners) == 4 and gone not in owners) or time.monotonic() > deadline:
            return owners
        await asyncio.sleep(0.5)


def grace_of(pod: Pod) -> float:
    return float(pod.spec["terminationGracePeriodSeconds"])


def ws_url(http_url: str) -> str:
    return http_url.replace("http://", "ws://", 1)
