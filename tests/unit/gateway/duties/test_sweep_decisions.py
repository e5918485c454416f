"""GroupSweep decisions with fake stores: what is dead-lettered, whose deliveries are released, what
is left."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest

from gateway.delivery.retry_policy import RELEASE_IDLE_MS
from gateway.duties.sweep import PAGE, SWEEP_CONSUMER, GroupSweep, SweepSettings
from gateway.observe.metrics import GatewayMetrics
from partitioner.group_policy import GroupPolicy
from storage.models import ConsumerInfo, Delivery, PendingEntry, StoredEntry, ValueFormat

ME = "node-me"


def entry(offset: str) -> StoredEntry:
    return StoredEntry(0, offset, b"v", ValueFormat.BINARY, None, {}, 1)


class FakeGroups:
    """Pending entries of one partition: offset -> (consumer, idle_ms, delivery_count)."""

    def __init__(
        self, pending: dict[str, tuple[str, int, int]], groups: Sequence[str] = ("g",)
    ) -> None:
        self.pending = pending
        self._groups = list(groups)
        self.acked: list[str] = []

    async def groups(self, topic: str, partition: int) -> list[str]:
        return self._groups

    async def expired(self, topic: str, partition: int, group: str, *, min_idle_ms: int, count: int,
                      after: str | None = None, consumer: str | None = None) -> list[PendingEntry]:
        rows = [
            PendingEntry(partition, offset, owner, idle, delivered)
            for offset, (owner, idle, delivered) in sorted(
                self.pending.items(), key=lambda kv: int(kv[0])
            )
            if idle >= min_idle_ms
            and (consumer is None or owner == consumer)
            and (after is None or int(offset) > int(after))
        ]
        return rows[:count]

    async def claim(
        self, topic: str, partition: int, group: str, consumer: str,
        pending: Sequence[PendingEntry], *, min_idle_ms: int
    ) -> list[Delivery]:
        out = []
        for p in pending:
            _, idle, delivered = self.pending[p.offset]
            if idle >= min_idle_ms:
                self.pending[p.offset] = (consumer, 0, delivered + 1)
                out.append(Delivery(entry(p.offset), delivered + 1))
        return out

    async def ack(self, topic: str, partition: int, group: str, offsets: Sequence[str]) -> int:
        self.acked += offsets
        for offset in offsets:
            self.pending.pop(offset, None)
        return len(offsets)

    async def set_idle(
        self, topic: str, partition: int, group: str, consumer: str, offsets: Sequence[str],
        idle_ms: int
    ) -> None:
        for offset in offsets:
            _, _, delivered = self.pending[offset]
            self.pending[offset] = (consumer, idle_ms, delivered)


class FakeConsumers:
    def __init__(self, groups: FakeGroups, idle: Mapping[str, int]) -> None:
        self._groups = groups
        self.idle = dict(idle)
        self.removed: list[str] = []

    async def consumers(self, topic: str, partition: int, group: str) -> list[ConsumerInfo]:
        return [
            ConsumerInfo(
                name, sum(1 for c, _, _ in self._groups.pending.values() if c == name), idle
            )
            for name, idle in self.idle.items()
        ]

    async def remove_if_empty(self, topic: str, partition: int, group: str, consumer: str) -> bool:
        if any(c == consumer for c, _, _ in self._groups.pending.values()):
            return False
        self.idle.pop(consumer, None)
        self.removed.append(consumer)
        return True


class FakePolicies:
    def __init__(self, policies: Mapping[str, GroupPolicy]) -> None:
        self.policies = policies

    async def for_topic(self, topic: str) -> Mapping[str, GroupPolicy]:
        return self.policies


class Letters:
    def __init__(self) -> None:
        self.sent: list[tuple[str, int]] = []

    async def __call__(self, topic: str, group: str, delivery: Delivery, reason: str) -> None:
        self.sent.append((delivery.entry.offset, delivery.delivery_count))


def sweep_of(groups: FakeGroups, consumers: FakeConsumers, policies: Mapping[str, GroupPolicy],
             letters: Letters, paused: frozenset[str] = frozenset()) -> GroupSweep:
    return GroupSweep(
        groups, consumers, FakePolicies(policies), letters,  # type: ignore[arg-type]
        GatewayMetrics.create(),
        SweepSettings(ME, dead_consumer_idle_ms=4_000, service_consumers=frozenset({"http-pull"}),
                      paused=lambda topic, group: group in paused),
    )


@pytest.fixture
def letters() -> Letters:
    return Letters()


async def test_only_exhausted_expired_entries_are_dead_lettered(letters: Letters) -> None:
    groups = FakeGroups(
        {"1": (ME, 5_000, 3), "2": (ME, 5_000, 2), "3": (ME, 10, 3), "4": (ME, 9_000, 4)}
    )
    await sweep_of(
        groups, FakeConsumers(groups, {ME: 0}), {"g": GroupPolicy(1_000, 3)}, letters
    ).sweep("t", 0, [ME])
    assert letters.sent == [("1", 4), ("4", 5)]
    assert groups.acked == ["1", "4"]
    assert set(groups.pending) == {"2", "3"}


async def test_a_paused_groups_exhausted_entries_wait_for_the_resume(letters: Letters) -> None:
    groups = FakeGroups({"1": (ME, 5_000, 3), "2": (ME, 5_000, 4)})
    policies = {"g": GroupPolicy(1_000, 3)}
    consumers = FakeConsumers(groups, {ME: 0})
    await sweep_of(groups, consumers, policies, letters, paused=frozenset({"g"})).sweep(
        "t", 0, [ME])
    assert letters.sent == []
    assert set(groups.pending) == {"1", "2"}
    await sweep_of(groups, consumers, policies, letters).sweep("t", 0, [ME])
    assert letters.sent == [("1", 4), ("2", 5)]


async def test_dead_lettering_pages_past_entries_with_deliveries_left(letters: Letters) -> None:
    pending = {str(i): (ME, 5_000, 1) for i in range(1, PAGE + 1)}
    pending[str(PAGE + 5)] = (ME, 5_000, 2)
    groups = FakeGroups(pending)
    await sweep_of(
        groups, FakeConsumers(groups, {ME: 0}), {"g": GroupPolicy(1_000, 2)}, letters
    ).sweep("t", 0, [ME])
    assert letters.sent == [(str(PAGE + 5), 3)]


async def test_dead_nodes_deliveries_are_released_uncounted(letters: Letters) -> None:
    groups = FakeGroups(
        {"1": ("node-dead", 100, 1), "2": ("node-dead", 100, 2), "3": ("node-live", 100, 1)}
    )
    consumers = FakeConsumers(groups, {"node-dead": 10_000, "node-live": 10_000, ME: 0})
    await sweep_of(groups, consumers, {"g": GroupPolicy(60_000, 5)}, letters).sweep(
        "t", 0, [ME, "node-live"]
    )
    assert groups.pending["1"] == (SWEEP_CONSUMER, RELEASE_IDLE_MS, 1)
    assert groups.pending["2"] == (SWEEP_CONSUMER, RELEASE_IDLE_MS, 2)
    assert groups.pending["3"] == ("node-live", 100, 1)
    assert consumers.removed == ["node-dead"]
    assert letters.sent == []


@pytest.mark.parametrize(
    ("name", "idle_ms"), [("node-new", 1_000), ("http-pull", 10_000), (SWEEP_CONSUMER, 10_000)]
)
async def test_young_and_service_consumers_are_never_released(
    letters: Letters, name: str, idle_ms: int
) -> None:
    groups = FakeGroups({"1": (name, 100, 1)})
    consumers = FakeConsumers(groups, {name: idle_ms})
    await sweep_of(groups, consumers, {"g": GroupPolicy(60_000, 5)}, letters).sweep("t", 0, [ME])
    assert groups.pending["1"] == (name, 100, 1)
    assert consumers.removed == []


async def test_nothing_is_released_while_this_node_is_unseen(letters: Letters) -> None:
    groups = FakeGroups({"1": ("node-dead", 100, 1)})
    consumers = FakeConsumers(groups, {"node-dead": 10_000})
    await sweep_of(groups, consumers, {"g": GroupPolicy(60_000, 5)}, letters).sweep(
        "t", 0, ["node-other"]
    )
    assert groups.pending["1"] == ("node-dead", 100, 1)


async def test_groups_without_a_policy_are_left_alone(letters: Letters) -> None:
    groups = FakeGroups({"1": ("node-dead", 50_000, 9)}, groups=["spark-job"])
    consumers = FakeConsumers(groups, {"node-dead": 100_000})
    await sweep_of(groups, consumers, {"g": GroupPolicy(1_000, 1)}, letters).sweep("t", 0, [ME])
    assert groups.pending == {"1": ("node-dead", 50_000, 9)}
    assert letters.sent == []
    assert consumers.removed == []
