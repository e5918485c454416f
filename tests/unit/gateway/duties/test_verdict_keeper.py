"""The owner's verdict round: samples judged one after another, the verdict gauge moved from
state to state, verdicts posted for every gateway to read."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from gateway.duties.lag import GroupLag
from gateway.duties.verdict_duty import (
    VerdictKeeper,
    VerdictSources,
    config_of,
    read_verdict,
)
from gateway.observe.metrics import GatewayMetrics
from partitioner.group_policy import GroupPolicy
from partitioner.topics import TopicMetadata
from storage.models import ConsumerInfo, PendingEntry


class Fakes:
    """Groups, consumers, policies, board and members as one test wants them."""

    def __init__(self) -> None:
        self.deliveries = 1
        self.consumers_idle_ms: list[int] = []
        self.holders_of: dict[str, Sequence[int]] = {}
        self.posted: dict[tuple[str, int], Mapping[str, bytes]] = {}

    async def expired(self, topic: str, partition: int, group: str, **_: Any) -> list[PendingEntry]:
        return [PendingEntry(partition, "1-0", "node", 0, self.deliveries)]

    async def parked(self, topic: str, partition: int, group: str) -> list[Any]:
        return []

    async def consumers(self, topic: str, partition: int, group: str) -> list[ConsumerInfo]:
        return [ConsumerInfo("node", 1, idle) for idle in self.consumers_idle_ms]

    async def remove_if_empty(self, topic: str, partition: int, group: str, consumer: str) -> bool:
        return False

    async def for_topic(self, topic: str) -> Mapping[str, GroupPolicy]:
        return {"g": GroupPolicy(ack_timeout_ms=1000, max_deliveries=5)}

    async def post(self, topic: str, partition: int, verdicts: Mapping[str, bytes],
                   ttl_ms: int) -> None:
        self.posted[(topic, partition)] = dict(verdicts)

    async def read(self, topic: str, partition: int, group: str) -> bytes | None:
        return self.posted.get((topic, partition), {}).get(group)

    async def holders(self, topic: str, group: str) -> Mapping[str, Sequence[int]]:
        return self.holders_of


class Clock:
    def __init__(self) -> None:
        self.now_ms = 1_000_000

    def __call__(self) -> int:
        return self.now_ms


def keeper(fakes: Fakes, clock: Clock) -> tuple[VerdictKeeper, GatewayMetrics]:
    metrics = GatewayMetrics.create()
    sources = VerdictSources(fakes, fakes, fakes, fakes,  # type: ignore[arg-type]
                             lambda topic: None, fakes.holders, 0, 10_000)
    return VerdictKeeper(sources, metrics, clock), metrics


def lag(pending: int, delivered: str = "1-0") -> GroupLag:
    return GroupLag("g", 0, 100, 0, pending, delivered)


def gauge(metrics: GatewayMetrics) -> dict[tuple[str, str], float]:
    return {(s.labels["state"], s.labels["reason"]): s.value
            for family in metrics.group_verdict.collect() for s in family.samples}


async def test_gauge_moves_to_the_new_state_and_drops_the_old_series() -> None:
    fakes, clock = Fakes(), Clock()
    judge, metrics = keeper(fakes, clock)
    await judge.judge("t", 0, [lag(1)])
    assert gauge(metrics) == {("ok", ""): 1.0}
    clock.now_ms += 1000
    await judge.judge("t", 0, [lag(1)])
    assert gauge(metrics) == {("stalled", "no_member"): 1.0}
    judge.forget("t", 0)
    assert gauge(metrics) == {}


async def test_reader_within_the_window_makes_a_held_entry_member_not_acking() -> None:
    fakes, clock = Fakes(), Clock()
    fakes.consumers_idle_ms = [200]
    judge, _ = keeper(fakes, clock)
    await judge.judge("t", 0, [lag(1)])
    clock.now_ms += 1500
    await judge.judge("t", 0, [lag(1)])
    verdict = await read_verdict(fakes, "t", 0, "g")
    assert verdict is not None
    assert (verdict["state"], verdict["reason"], verdict["since_ms"]) == (
        "stalled", "member_not_acking", 1_000_000)


async def test_member_holding_the_partition_counts_as_present_without_reads() -> None:
    fakes, clock = Fakes(), Clock()
    fakes.consumers_idle_ms, fakes.holders_of, fakes.deliveries = [60_000], {"m1": [0]}, 4
    judge, _ = keeper(fakes, clock)
    await judge.judge("t", 0, [lag(1)])
    clock.now_ms += 1000
    await judge.judge("t", 0, [lag(1)])
    posted = orjson.loads(fakes.posted[("t", 0)]["g"])
    assert (posted["state"], posted["reason"]) == ("stalled", "redelivery_loop")


async def test_partition_that_never_had_groups_posts_nothing() -> None:
    fakes, clock = Fakes(), Clock()
    judge, _ = keeper(fakes, clock)
    await judge.judge("t", 0, [])
    assert fakes.posted == {}


async def test_groups_gone_from_the_partition_are_no_longer_posted_or_exported() -> None:
    fakes, clock = Fakes(), Clock()
    judge, metrics = keeper(fakes, clock)
    await judge.judge("t", 0, [lag(0)])
    await judge.judge("t", 0, [])
    assert fakes.posted[("t", 0)] == {}
    assert gauge(metrics) == {}
    assert await read_verdict(None, "t", 0, "g") is None


def test_compacted_topics_have_no_age_retention_or_archive_target() -> None:
    compacted = TopicMetadata("t", 1, retention_ms=60_000, max_length=None, created_at_ms=0,
                              owner="", compact=True)
    config = config_of(compacted, GroupPolicy(ack_timeout_ms=5000, max_deliveries=1), 500)
    assert (config.window_ms, config.loop_deliveries, config.retention_ms,
            config.hot_retention_ms) == (5000, 2, None, 0)
    assert config_of(None, None, 500).window_ms == 30_000
