"""The Space-Saving heavy-hitters sketch in Python, the reference of the compiled ``_sketch``
(test_hotspots.py pins the two together)."""

from __future__ import annotations

from typing import Protocol

__all__ = ["MAX_COUNT", "Sketch", "SpaceSaving", "count_batch"]

MAX_COUNT = 2**63 - 1  # a sketch's counts stop here (machine integers in the compiled one)


class Sketch(Protocol):
    """A heavy-hitters sketch over bytes keys: the compiled ``SpaceSaving`` or this one."""

    @property
    def size(self) -> int: ...

    def add(self, key: bytes, weight: int = 1, /) -> None: ...

    def counts(self) -> dict[bytes, int]: ...


class SpaceSaving:
    """The Space-Saving heavy-hitters sketch (Metwally et al.) with ``size`` counters.

    Counting a key already counted adds to its counter; a new key in a full sketch takes over the
    smallest counter (the smallest (count, key), so the choice is deterministic) and starts from its
    count. When keys churn through the counters (a new key on nearly every add, as in the bench's
    workload) the compiled sketch, which keeps its counters in arrays, is much cheaper per key than
    the same steps on a dict, in C or here.
    """

    def __init__(self, size: int = 16) -> None:
        if not 1 <= size <= 4096:
            raise ValueError("a sketch has 1 to 4096 counters")
        self.size = size
        self._counts: dict[bytes, int] = {}

    def add(self, key: bytes, weight: int = 1, /) -> None:
        """Count ``weight`` (>= 1) occurrences of ``key``."""
        if weight < 1:
            raise ValueError("a weight is at least 1")
        counts = self._counts
        count = counts.get(key)
        if count is not None:
            counts[key] = min(count + weight, MAX_COUNT)
            return
        floor = 0
        if len(counts) >= self.size:
            victim, floor = min(counts.items(), key=_count_then_key)
            del counts[victim]
        counts[key] = min(floor + weight, MAX_COUNT)

    def counts(self) -> dict[bytes, int]:
        """The counted keys and their (over-)estimated counts."""
        return dict(self._counts)


def _count_then_key(item: tuple[bytes, int]) -> tuple[int, bytes]:
    return item[1], item[0]


def count_batch(sketches: list[Sketch], partitions: list[int],
                keys: list[bytes | None]) -> list[int]:
    """Count ``keys[i]`` (unless None) in ``sketches[partitions[i]]``; the batch's rows per
    partition. IndexError, before anything is counted, when a partition has no sketch."""
    if len(partitions) != len(keys):
        raise ValueError("partitions and keys differ in length")
    if any(not 0 <= partition < len(sketches) for partition in partitions):
        raise IndexError("a partition has no sketch")
    tallies = [0] * len(sketches)
    for partition, key in zip(partitions, keys, strict=True):
        tallies[partition] += 1
        if key is not None:
            sketches[partition].add(key)
    return tallies
