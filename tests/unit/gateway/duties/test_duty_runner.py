"""The duty runner: duties follow ownership, promotion drains, retention events are counted, crashes
surface."""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest

from gateway.duties.runner import PROMOTE_BATCH, DutyRunner, DutySettings
from gateway.observe.metrics import GatewayMetrics
from partitioner.cache import TopicCache
from partitioner.topics import TopicMetadata
from storage.models import AppendResult, GroupPartitionState, StoredEntry, TrimReport, ValueFormat
from storage.overview import PartitionOverview


class FakeOwnership:
    def __init__(self) -> None:
        self.owned: frozenset[tuple[str, int]] = frozenset()
        self.healthy = True
        self.live_nodes = ["me"]
        self._changed = asyncio.Event()

    def set(self, owned: set[tuple[str, int]]) -> None:
        self.owned = frozenset(owned)
        self._changed.set()

    async def wait_changed(self) -> None:
        await self._changed.wait()
        self._changed.clear()

    def epoch(self, topic: str, partition: int) -> int | None:
        return 1 if (topic, partition) in self.owned else None


class FakeStores:
    def __init__(self) -> None:
        self.promote_calls: list[tuple[str, int]] = []
        self.promote_rounds: list[tuple[str, list[int]]] = []
        self.lengths_asked: list[tuple[str, int]] = []
        self.overview_rounds: list[tuple[str, list[int]]] = []
        self.due: dict[tuple[str, int], int] = {}
        self.trim_calls: list[tuple[str, int, str | None]] = []
        self.trim_report: TrimReport | None = None
        self.explode = False

    async def promote_due_partitions(self, topic: str, partitions: Sequence[int], *, limit: int,
                                     max_length: int | None) -> dict[int, list[AppendResult]]:
        if self.explode:
            raise RuntimeError("bug")
        self.promote_rounds.append((topic, list(partitions)))
        results = {}
        for partition in partitions:
            self.promote_calls.append((topic, partition))
            count = min(limit, self.due.get((topic, partition), 0))
            self.due[(topic, partition)] = self.due.get((topic, partition), 0) - count
            results[partition] = [AppendResult(partition, f"1-{i}") for i in range(count)]
        return results

    async def trim(self, topic: str, partition: int, *, min_offset: str | None,
                   max_length: int | None) -> TrimReport:
        self.trim_calls.append((topic, partition, min_offset))
        return self.trim_report or TrimReport(partition, 0, {})

    async def groups(self, topic: str, partition: int) -> list[str]:
        return ["g"]

    async def state(self, topic: str, partition: int, group: str) -> GroupPartitionState:
        return GroupPartitionState(partition, True, None, 0, None, None)

    async def partition_overviews(
        self, topic: str, partitions: Sequence[int]
    ) -> dict[int, PartitionOverview]:
        self.lengths_asked.extend((topic, p) for p in partitions)
        self.overview_rounds.append((topic, list(partitions)))
        return {
            p: PartitionOverview(p, 7, {"g": await self.state(topic, p, "g")}) for p in partitions
        }

    async def read(self, *args: Any, **kwargs: Any) -> list[StoredEntry]:
        return [StoredEntry(0, "1-0", b"", ValueFormat.BINARY, None, {}, 1)]


@pytest.fixture
def cache() -> TopicCache:
    cache = TopicCache()
    cache.remember(TopicMetadata("t", 4, 60_000, None, 0, "me", 1))
    return cache


@pytest.fixture
async def runner_parts(
    cache: TopicCache,
) -> AsyncIterator[tuple[DutyRunner, FakeOwnership, FakeStores]]:
    ownership, stores = FakeOwnership(), FakeStores()
    settings = DutySettings(promote_interval_s=0.01, retention_interval_s=0.05, lag_interval_s=0.05)
    runner = DutyRunner(
        ownership, cache,
        delayed=stores, retention=stores, streams=stores,  # type: ignore[arg-type]
        groups=stores, metrics=GatewayMetrics.create(), settings=settings,  # type: ignore[arg-type]
    )
    async with runner:
        yield runner, ownership, stores


async def eventually(predicate: Any) -> None:
    for _ in range(200):
        if predicate():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition never held")


async def test_duties_run_only_for_owned_partitions(runner_parts: Any) -> None:
    runner, ownership, stores = runner_parts
    ownership.set({("t", 0), ("t", 2)})
    await eventually(lambda: {call for call in stores.promote_calls} == {("t", 0), ("t", 2)})
    ownership.set({("t", 2)})
    await eventually(lambda: runner.running == {("t", 2)})
    stores.promote_calls.clear()
    await asyncio.sleep(0.1)
    assert set(stores.promote_calls) == {("t", 2)}
    assert runner.metrics.partitions_owned._value.get() == 1


async def test_promotion_drains_everything_due_in_one_turn(runner_parts: Any) -> None:
    _, ownership, stores = runner_parts
    stores.due[("t", 1)] = PROMOTE_BATCH * 2 + 3
    ownership.set({("t", 1)})
    await eventually(lambda: stores.due[("t", 1)] == 0)


async def test_promote_round_covers_every_owned_partition(runner_parts: Any) -> None:
    _, ownership, stores = runner_parts
    stores.due[("t", 2)] = PROMOTE_BATCH + 1  # a full batch: partition 2 goes again at once, alone
    ownership.set({("t", 0), ("t", 1), ("t", 2), ("t", 3)})
    await eventually(lambda: stores.due[("t", 2)] == 0)
    assert stores.promote_rounds[0] == ("t", [0, 1, 2, 3])
    assert stores.promote_rounds[1] == ("t", [2])


async def test_partition_duties_sleep_until_their_next_duty(cache: TopicCache) -> None:
    ownership, stores = FakeOwnership(), FakeStores()
    settings = DutySettings(promote_interval_s=0.01, retention_interval_s=60, lag_interval_s=0.3)
    runner = DutyRunner(
        ownership, cache,
        delayed=stores, retention=stores, streams=stores,  # type: ignore[arg-type]
        groups=stores, metrics=GatewayMetrics.create(), settings=settings,  # type: ignore[arg-type]
    )
    async with runner:
        ownership.set({("t", 0)})
        await asyncio.sleep(0.5)
    assert len(stores.promote_rounds) >= 10  # promotion every 10 ms...
    assert 1 <= len(stores.lengths_asked) <= 2  # ...the lag duty at 0 and 0.3 s only
    assert len(stores.trim_calls) == 1


async def test_sleeping_duty_is_cancelled_when_ownership_moves(cache: TopicCache) -> None:
    ownership, stores = FakeOwnership(), FakeStores()
    settings = DutySettings(
        promote_interval_s=0.01, retention_interval_s=60, lag_interval_s=60, sweep_interval_s=60
    )
    runner = DutyRunner(
        ownership, cache,
        delayed=stores, retention=stores, streams=stores,  # type: ignore[arg-type]
        groups=stores, metrics=GatewayMetrics.create(), settings=settings,  # type: ignore[arg-type]
    )
    async with runner:
        ownership.set({("t", 0), ("t", 1)})
        await eventually(lambda: runner.running == {("t", 0), ("t", 1)})
        ownership.set({("t", 1)})
        await eventually(lambda: runner.running == {("t", 1)})
        stores.promote_calls.clear()
        await asyncio.sleep(0.05)
        assert set(stores.promote_calls) == {("t", 1)}


async def test_retention_counts_unacked_drops(runner_parts: Any) -> None:
    runner, ownership, stores = runner_parts
    stores.trim_report = TrimReport(3, 10, {"billing": 4})
    ownership.set({("t", 3)})
    await eventually(lambda: stores.trim_calls)
    topic, partition, min_offset = stores.trim_calls[0]
    assert (topic, partition) == ("t", 3)
    assert min_offset is not None
    dropped = runner.metrics.retention_unacked_dropped.labels("t", "billing")._value.get()
    assert dropped >= 4
    assert runner.metrics.retention_trimmed.labels("t")._value.get() >= 10


async def test_retention_counts_archived_entries_it_dropped(runner_parts: Any) -> None:
    runner, ownership, stores = runner_parts
    stores.trim_report = TrimReport(2, 0, {}, archived_removed=300, segments_removed=3)
    ownership.set({("t", 2)})
    await eventually(lambda: stores.trim_calls)
    await eventually(lambda: runner.metrics.retention_trimmed.labels("t")._value.get() >= 300)


async def test_unknown_lag_is_exported_as_nan_never_zero(runner_parts: Any) -> None:
    runner, ownership, _ = runner_parts
    ownership.set({("t", 0)})
    await eventually(lambda: ("t", "g", "0") in {
        tuple(s.labels.values())
        for m in runner.metrics.group_lag_entries.collect() for s in m.samples
    })
    value = runner.metrics.group_lag_entries.labels("t", "g", "0")._value.get()
    assert math.isnan(value)


async def test_a_crashed_duty_makes_the_runner_unhealthy(runner_parts: Any) -> None:
    runner, ownership, stores = runner_parts
    stores.explode = True
    ownership.set({("t", 0)})
    await eventually(lambda: not runner.healthy)


def _length_gauges(runner: DutyRunner) -> set[tuple[str, str]]:
    return {
        (s.labels["topic"], s.labels["partition"])
        for m in runner.metrics.partition_length.collect()
        for s in m.samples
    }


async def test_lag_round_measures_every_owned_partition(runner_parts: Any) -> None:
    runner, ownership, stores = runner_parts
    ownership.set({("t", 0), ("t", 1), ("t", 3)})
    await eventually(lambda: _length_gauges(runner) == {("t", "0"), ("t", "1"), ("t", "3")})
    assert stores.overview_rounds[0] == ("t", [0, 1, 3])
    ownership.set({("t", 1)})
    await eventually(lambda: _length_gauges(runner) == {("t", "1")})
    lag_partitions = {
        s.labels["partition"] for m in runner.metrics.group_lag_entries.collect() for s in m.samples
    }
    assert lag_partitions == {"1"}
