"""Faults between the chart's pods: nftables rules in one pod's own network namespace drop its
traffic with chosen peers both ways, as a partition between hosts would; and the wait for a healthy
topology between fault runs."""

from __future__ import annotations

import contextlib
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass

from kubelet import Kubelet, Pod

TABLE = "streamgate_fault"


@dataclass(frozen=True)
class RedisNode:
    """One line of CLUSTER NODES: the pod, its role and (for a replica) its primary's pod."""

    pod: Pod
    node_id: str
    primary: bool
    primary_id: str


def nft(kube: Kubelet, pod: Pod, script: str) -> None:
    """Runs an nft script in the pod's network namespace (the host's nft binary)."""
    pid = kube.inspect(pod, "{{.State.Pid}}")
    done = subprocess.run(["nsenter", f"--target={pid}", "--net", "nft", "-f", "-"], input=script,
                          capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 0, f"nft in {pod.name} failed: {done.stderr}\n{script}"


@contextlib.contextmanager
def cut_off(kube: Kubelet, pod: Pod, peers: list[Pod]) -> Iterator[None]:
    """Drops every packet between the pod and the peers (the host and other pods still reach it)
    until the block ends."""
    addresses = ", ".join(peer.ip for peer in peers)
    nft(kube, pod, f"""
table inet {TABLE} {{
  set peers {{ type ipv4_addr; elements = {{ {addresses} }}; }}
  chain input {{ type filter hook input priority -10; policy accept; ip saddr @peers drop; }}
  chain output {{ type filter hook output priority -10; policy accept; ip daddr @peers drop; }}
}}
""")
    try:
        yield
    finally:
        nft(kube, pod, f"delete table inet {TABLE}")


def redis_nodes(kube: Kubelet) -> list[RedisNode]:
    """The Redis Cluster's nodes as one member sees them."""
    by_ip = {pod.ip: pod for pod in kube.component("redis")}
    first = kube.component("redis")[0]
    nodes = []
    for line in kube.exec(first, "redis-cli", "cluster", "nodes").splitlines():
        fields = line.split()
        address = fields[1].split(":")[0]
        nodes.append(RedisNode(by_ip[address], fields[0], "master" in fields[2], fields[3]))
    return nodes


def primary_with_replicas(kube: Kubelet) -> tuple[Pod, list[Pod], list[Pod]]:
    """A primary, its replicas, and every other Redis pod."""
    nodes = redis_nodes(kube)
    primary = next(node for node in nodes if node.primary)
    replicas = [node.pod for node in nodes if node.primary_id == primary.node_id]
    others = [node.pod for node in nodes if node.pod not in (primary.pod, *replicas)]
    return primary.pod, replicas, others


def unhealthy(kube: Kubelet) -> list[str]:
    """What keeps the topology from being as installed: every Redis node sees the cluster ok with
    3 primaries and 3 connected replicas, every etcd member healthy, every gateway ready."""
    problems = []
    for pod in kube.component("redis"):
        info = kube.exec(pod, "redis-cli", "cluster", "info", check=False)
        if "cluster_state:ok" not in info:
            problems.append(f"{pod.name}: cluster not ok")
    nodes = kube.exec(kube.component("redis")[0], "redis-cli", "cluster", "nodes", check=False)
    if "fail" in nodes or nodes.count("master") != 3 or nodes.count(" connected") != 6:
        problems.append(f"redis nodes:\n{nodes}")
    for pod in kube.component("redis"):
        replication = kube.exec(pod, "redis-cli", "info", "replication", check=False)
        if "role:slave" in replication and "master_link_status:up" not in replication:
            problems.append(f"{pod.name}: replica link down")
    health = kube.exec(kube.component("etcd")[0], "sh", "-c",  # etcdctl reports on stderr
                       "etcdctl endpoint health --cluster 2>&1", check=False)
    if health.count("is healthy") != len(kube.component("etcd")):
        problems.append(f"etcd: {health}")
    for pod in kube.component("gateway"):
        try:
            with urllib.request.urlopen(f"{pod.url}/readyz", timeout=3):
                pass
        except urllib.error.HTTPError as error:
            problems.append(f"{pod.name}: not ready: {error.read()[:500]!r}")
        except (urllib.error.URLError, OSError) as error:
            problems.append(f"{pod.name}: not ready: {error}")
    return problems


def wait_healthy(kube: Kubelet, timeout_s: float = 120) -> float:
    """Until nothing is unhealthy; how long that took."""
    started = time.monotonic()
    while problems := unhealthy(kube):
        assert time.monotonic() - started < timeout_s, "\n".join(problems)
        time.sleep(1)
    return time.monotonic() - started
