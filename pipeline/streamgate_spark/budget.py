"""Split a micro-batch's row budget (maxEntriesPerTrigger) over the partitions that have entries."""

from __future__ import annotations

from collections.abc import Mapping


def allocate(budget: int, available: Mapping[int, int]) -> dict[int, int]:
    """Max-min fair shares of ``budget``: no partition gets more than it has, the rest goes to the
    others.

    The shares sum to ``min(budget, sum(available))``; a partition with a backlog is never starved
    by a busier one, and leftover budget of small partitions flows to large ones. Ties go to lower
    partitions.
    """
    shares = dict.fromkeys(available, 0)
    remaining = budget
    hungry = sorted(p for p, count in available.items() if count > 0)
    while remaining > 0 and hungry:
        even, extra = divmod(remaining, len(hungry))
        for index, partition in enumerate(hungry):
            take = min(even + (1 if index < extra else 0), available[partition] - shares[partition])
            shares[partition] += take
            remaining -= take
        hungry = [p for p in hungry if shares[p] < available[p]]
    return shares
