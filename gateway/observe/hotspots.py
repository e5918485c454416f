"""Hot partitions: per-partition publish rates and the heaviest keys, as seen by this gateway
process.

Rates are counted in one-second buckets over a sliding window; keys go through a Space-Saving sketch
(k counters per partition: any key with more than 1/k of the partition's traffic is guaranteed to be
listed, and the counts over-estimate by at most the smallest counter). A partition whose rate is
over 3x the topic's mean partition rate is flagged hot.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from operator import add

from gateway._speedups import Sketch, SpaceSaving, count_batch

WINDOW_S = 60
SKETCH_SIZE = 16
HOT_FACTOR = 3.0


def top_keys(sketch: Sketch, n: int) -> list[tuple[bytes, int]]:
    """A sketch's ``n`` heaviest keys with their (over-)estimated counts, heaviest first (ties:
    smaller key)."""
    return sorted(sketch.counts().items(), key=lambda kv: (-kv[1], kv[0]))[:n]


@dataclass(frozen=True, slots=True)
class PartitionHeat:
    """One partition's recent publish rate, whether it is hot, and its heaviest keys."""

    partition: int
    rate_per_s: float
    hot: bool
    top_keys: list[tuple[str, int]]


@dataclass(slots=True)
class _TopicStats:
    """One topic's sketches and rate buckets, indexed by partition (grown to the highest partition
    seen).

    The rates are one bucket per second, each the messages per partition in that second: a batch
    adds its tallies to the current bucket in one step (``map``), not one partition at a time."""

    sketches: list[Sketch] = field(default_factory=list)
    # (second, messages per partition)
    buckets: deque[tuple[int, list[int]]] = field(default_factory=deque)

    def grow(self, partitions: int) -> None:
        while len(self.sketches) < partitions:
            self.sketches.append(SpaceSaving(SKETCH_SIZE))

    def add(self, tallies: list[int], now_s: float) -> None:
        """Count a batch's messages per partition at ``now_s``."""
        second, buckets = int(now_s), self.buckets
        if buckets and buckets[-1][0] == second:
            counts = buckets[-1][1]
            if len(counts) < len(tallies):  # the topic grew within this second
                counts = counts + [0] * (len(tallies) - len(counts))
            buckets[-1] = (second, list(map(add, counts, tallies)))
            return
        buckets.append((second, tallies))
        self.expire(second)

    def rates(self, partitions: int, now_s: float) -> list[float]:
        """Mean messages per second of each partition over the last ``WINDOW_S`` seconds."""
        self.expire(int(now_s))
        totals = [0] * partitions
        for _, counts in self.buckets:
            for partition, count in enumerate(counts[:partitions]):
                totals[partition] += count
        return [total / WINDOW_S for total in totals]

    def expire(self, second: int) -> None:
        buckets = self.buckets
        while buckets and buckets[0][0] <= second - WINDOW_S:
            buckets.popleft()


class PublishStats:
    """Publish rates and heavy keys per (topic, partition) for this process."""

    def __init__(self) -> None:
        self._topics: dict[str, _TopicStats] = {}

    def record(self, topic: str, partitions: list[int], keys: list[bytes | None]) -> None:
        """Count one published batch: message ``i`` went to ``partitions[i]`` with ``keys[i]``."""
        if not partitions:
            return
        stats = self._topics.get(topic)
        if stats is None:
            stats = self._topics[topic] = _TopicStats()
        try:
            tallies = count_batch(stats.sketches, partitions, keys)
        except IndexError:  # a partition not seen before: nothing was counted
            stats.grow(max(partitions) + 1)
            tallies = count_batch(stats.sketches, partitions, keys)
        stats.add(tallies, time.monotonic())

    def heat(self, topic: str, partitions: int, top: int = 5) -> list[PartitionHeat]:
        """Every partition of a topic, flagged hot when over ``HOT_FACTOR`` x the topic's mean
        rate."""
        stats = self._topics.get(topic, _TopicStats())
        seen = len(stats.sketches)
        rates = stats.rates(partitions, time.monotonic())
        mean = sum(rates) / partitions if partitions else 0.0
        return [PartitionHeat(p, rates[p], mean > 0 and rates[p] > HOT_FACTOR * mean,
                              [(key.decode(errors="replace"), count) for key, count
                               in (top_keys(stats.sketches[p], top) if p < seen else [])])
                for p in range(partitions)]

    def forget(self, topic: str) -> None:
        """Drop a deleted topic's statistics."""
        self._topics.pop(topic, None)
