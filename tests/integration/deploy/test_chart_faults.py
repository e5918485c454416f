"""Jepsen-style faults between the chart's pods (faults.py), each while producers on both gateways
write with acks=all and acks=1 and an exclusive group consumes. The checker proves: no acknowledged
acks=all message lost or undelivered, no duplicate under idempotent retries, per-key order, no
partition assigned to two members beyond the lease, every failure a 503 + Retry-After."""

from __future__ import annotations

import asyncio
import itertools
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest
from containers import load_helper
from faults import cut_off, primary_with_replicas, wait_healthy
from kubelet import Kubelet, Pod
from release import HEADERS

traffic = load_helper("tests/integration/failures/failure_traffic.py")

PARTITIONS = 6
WRITE_DEADLINE_S = 10.0  # the chart's gateway.settings.redis_write_deadline_s
LEASE_S = 10.0  # the chart's gateway.settings.member_lease_ttl_s
WARM_UP_S, RECOVERY_S = 3.0, 6.0


def primary_from_replicas_and_gateways(kube: Kubelet) -> tuple[Pod, list[Pod]]:
    primary, replicas, _ = primary_with_replicas(kube)
    return primary, replicas + kube.component("gateway")


def primary_in_minority(kube: Kubelet) -> tuple[Pod, list[Pod]]:
    """Cut from every other Redis node while the gateways still reach it: the replica takes over,
    and what the old primary acknowledged alone in between is gone."""
    primary, replicas, others = primary_with_replicas(kube)
    return primary, replicas + others


def gateway_from_etcd(kube: Kubelet) -> tuple[Pod, list[Pod]]:
    return kube.component("gateway")[0], kube.component("etcd")


def etcd_member_from_peers(kube: Kubelet) -> tuple[Pod, list[Pod]]:
    first, *others = kube.component("etcd")
    return first, others


def gateway_from_one_redis_primary(kube: Kubelet) -> tuple[Pod, list[Pod]]:
    primary, _, _ = primary_with_replicas(kube)
    return kube.component("gateway")[0], [primary]


def some_503s(report: Report, kube: Kubelet) -> bool:
    return report.statuses.get(503, 0) > 0


def a_member_closed_with_4503(report: Report, kube: Kubelet) -> bool:
    return 4503 in report.close_codes


def gateways_moved_to_another_member(report: Report, kube: Kubelet) -> bool:
    return any("stopped answering; moving to" in kube.logs(pod)
               for pod in kube.component("gateway"))


@dataclass(frozen=True)
class Fault:
    """The pod whose traffic is cut and its peers; how long; the sign that the cut took effect."""

    choose: Callable[[Kubelet], tuple[Pod, list[Pod]]]
    duration_s: float
    took_effect: Callable[[Report, Kubelet], bool]


FAULTS = {
    "redis-primary-from-replicas-and-gateways": Fault(primary_from_replicas_and_gateways, 12.0,
                                                      some_503s),
    "redis-primary-in-minority": Fault(primary_in_minority, 12.0, some_503s),
    "gateway-from-etcd": Fault(gateway_from_etcd, LEASE_S + 5, a_member_closed_with_4503),
    "etcd-member-from-peers": Fault(etcd_member_from_peers, 12.0,
                                    gateways_moved_to_another_member),
    "gateway-from-one-redis-primary": Fault(gateway_from_one_redis_primary, 12.0, some_503s),
}


@dataclass
class Report:
    """What one fault run saw."""

    fault: str
    acked_all: int = 0
    acked_one: int = 0
    statuses: dict[int, int] = field(default_factory=dict)
    lost_all: list[str] = field(default_factory=list)
    lost_one: int = 0
    duplicates: list[str] = field(default_factory=list)
    out_of_order: list[str] = field(default_factory=list)
    not_503: list[Any] = field(default_factory=list)
    undelivered: list[str] = field(default_factory=list)
    redelivered: int = 0
    outside_assignment: list[Any] = field(default_factory=list)
    overlap_s: float = 0.0
    serving_overlap_s: float = 0.0
    longest_without_ack_s: float = 0.0
    healthy_after_s: float = 0.0
    close_codes: list[int | None] = field(default_factory=list)

    def failed(self) -> bool:
        return bool(self.lost_all or self.duplicates or self.out_of_order or self.not_503
                    or self.undelivered or self.outside_assignment or self.overlap_s > LEASE_S)

    def line(self) -> str:
        return (f"{self.fault}: acked acks=all {self.acked_all} (lost {len(self.lost_all)}), "
                f"acks=1 {self.acked_one} (lost {self.lost_one}); statuses {self.statuses}; "
                f"longest a partition went without an ack {self.longest_without_ack_s:.1f} s; "
                f"duplicates {len(self.duplicates)}, out of order {len(self.out_of_order)}; "
                f"redelivered {self.redelivered}; a partition assigned to two members at once "
                f"{self.overlap_s:.1f} s, delivered by two {self.serving_overlap_s:.2f} s; "
                f"sockets closed with {self.close_codes}; "
                f"healthy {self.healthy_after_s:.0f} s after the heal")


@pytest.mark.timeout(900)
@pytest.mark.parametrize("fault", list(FAULTS))
def test_fault_between_hosts_loses_no_acked_message(kube: Kubelet, fault: str) -> None:
    try:
        wait_healthy(kube)
    except AssertionError:
        for pod in kube.component("gateway"):
            print(f"--- {pod.name}\n{kube.logs(pod)[-6000:]}")
        raise
    target, peers = FAULTS[fault].choose(kube)
    report = asyncio.run(under_fault(kube, fault, target, peers, FAULTS[fault].duration_s))
    print(report.line())
    if report.failed():
        for pod in kube.component("gateway"):
            print(f"--- {pod.name}\n{kube.logs(pod)[-6000:]}")
    assert report.acked_all > 0
    assert FAULTS[fault].took_effect(report, kube)
    assert report.lost_all == []
    assert report.duplicates == []
    assert report.out_of_order == []
    assert report.not_503 == []
    assert report.undelivered == []
    assert report.outside_assignment == []
    assert report.overlap_s <= LEASE_S
    assert report.serving_overlap_s <= LEASE_S


async def under_fault(kube: Kubelet, fault: str, target: Pod, peers: list[Pod],
                      duration_s: float) -> Report:
    """The load, the fault for ``duration_s`` and a recovery under load; then the check."""
    report, run = Report(fault), uuid.uuid4().hex[:8]
    sessions = [aiohttp.ClientSession(base_url=pod.url, headers=HEADERS)
                for pod in kube.component("gateway")]
    topics = {"all": f"fault-all-{run}", "1": f"fault-one-{run}"}
    try:
        for topic in topics.values():
            async with sessions[-1].post("/v1/topics", json={"name": topic,
                                                             "partitions": PARTITIONS}) as r:
                assert r.status == 201, await r.text()
        consumers = [await traffic.GroupConsumer.join(session, topics["all"], "checker",
                                                      rejoin=True) for session in sessions]
        producers = {acks: [traffic.Producers(session, topic, PARTITIONS, acks, WRITE_DEADLINE_S,
                                              per_partition=1, label=f"g{index}.")
                            for index, session in enumerate(sessions)]
                     for acks, topic in topics.items()}
        for group in producers.values():
            for producer in group:
                producer.start()
        await asyncio.sleep(WARM_UP_S)
        rules = cut_off(kube, target, peers)
        await asyncio.to_thread(rules.__enter__)
        try:
            await asyncio.sleep(duration_s)
        finally:
            await asyncio.to_thread(rules.__exit__, None, None, None)
        await asyncio.sleep(RECOVERY_S)
        for group in producers.values():
            for producer in group:
                await producer.finish()
        report.healthy_after_s = await asyncio.to_thread(wait_healthy, kube)
        await check(report, sessions[-1], topics, producers, consumers)
    finally:
        for session in sessions:
            await session.close()
    return report


async def check(report: Report, session: aiohttp.ClientSession, topics: dict[str, str],
                producers: dict[str, list[Any]], consumers: list[Any]) -> None:
    """Fills the report from the producers' outcomes, the topics' replay and the consumers."""
    acked = {acks: {value: at for producer in group for value, at in producer.acked.items()}
             for acks, group in producers.items()}
    stored = {acks: await traffic.replay_topic(session, topic, PARTITIONS)
              for acks, topic in topics.items()}
    everyone = [producer for group in producers.values() for producer in group]
    report.acked_all, report.acked_one = len(acked["all"]), len(acked["1"])
    report.lost_all = traffic.missing_acked(acked["all"], stored["all"])
    report.lost_one = len(traffic.missing_acked(acked["1"], stored["1"]))
    report.duplicates = [value for acks in stored for value in traffic.duplicated(stored[acks])]
    report.out_of_order = [value for acks in stored
                           for value in traffic.out_of_order(stored[acks])]
    for producer in everyone:
        for status, count in producer.statuses().items():
            report.statuses[status] = report.statuses.get(status, 0) + count
        report.not_503 += producer.others() + producer.bad_503s()
    report.longest_without_ack_s = max(longest_without_ack(producer) for producer in everyone)
    report.undelivered = await undelivered(consumers, set(acked["all"]))
    until = time.monotonic()
    report.redelivered = sum(count - 1 for consumer in consumers
                             for count in consumer.received.values() if count > 1)
    report.outside_assignment = [d for c in consumers for d in c.deliveries_outside_holds(until)]
    report.overlap_s = traffic.exclusive_overlap_s(consumers, PARTITIONS, until)
    report.serving_overlap_s = traffic.exclusive_overlap_s(consumers, PARTITIONS, until,
                                                           delivering=True)
    report.close_codes = [code for consumer in consumers for code in consumer.close_codes]
    for consumer in consumers:
        await consumer.close()


async def undelivered(consumers: list[Any], acked: set[str], timeout_s: float = 60) -> list[str]:
    """Acknowledged values no member has received once the group caught up (or the time ran out)."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        missing = acked - {value for consumer in consumers for value in consumer.received}
        if not missing or asyncio.get_running_loop().time() > deadline:
            return sorted(missing)
        await asyncio.sleep(0.5)


def longest_without_ack(producer: Any) -> float:
    """The longest a partition of this producer set waited between two acknowledged writes."""
    longest = 0.0
    for partition in range(PARTITIONS):
        acked = sorted(o.answered for o in producer.outcomes
                       if o.partition == partition and o.status == 200)
        longest = max([longest, *(b - a for a, b in itertools.pairwise(acked))])
    return longest
