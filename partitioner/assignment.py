"""Which member of an exclusive consumer group serves which partition: a pure, sticky, balanced
decision.

``assign`` is deterministic (the same inputs in any order give the same answer), balanced (every
member gets ``P // N`` or ``P // N + 1`` partitions), and sticky: a partition stays with its
previous owner whenever the balance allows it, so a rebalance pauses only the partitions that really
move.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

__all__ = ["assign", "moved_partitions"]


def assign(members: Sequence[str], partitions: int,
           previous: Mapping[str, Sequence[int]]) -> dict[str, tuple[int, ...]]:
    """Spread partitions ``0..partitions-1`` over ``members``, keeping as much of ``previous`` as
    balance allows.

    Owners in ``previous`` that are not in ``members``, and partitions ``>= partitions``, are
    ignored. Members that held more before get the larger shares first (fewer moves); a member keeps
    its lowest-numbered partitions when it must give some up; freed partitions go, lowest first, to
    members in name order. No members -> ``{}``.
    """
    names = sorted(set(members))
    if not names:
        return {}
    held = _valid_previous(names, max(partitions, 0), previous)
    capacity = _capacities(names, max(partitions, 0), held)
    owners = {name: held[name][:capacity[name]] for name in names}
    kept = {p for owned in owners.values() for p in owned}
    free = iter(p for p in range(max(partitions, 0)) if p not in kept)
    for name in names:
        missing = capacity[name] - len(owners[name])
        owners[name] = owners[name] + [next(free) for _ in range(missing)]
    return {name: tuple(sorted(owners[name])) for name in names}


def moved_partitions(before: Mapping[str, Sequence[int]],
                     after: Mapping[str, Sequence[int]]) -> set[int]:
    """Partitions that had an owner in ``before`` and a different owner in ``after``."""
    old_owner = {p: member for member, owned in before.items() for p in owned}
    return {p for member, owned in after.items() for p in owned
            if old_owner.get(p, member) != member}


def _valid_previous(names: Sequence[str], partitions: int,
                    previous: Mapping[str, Sequence[int]]) -> dict[str, list[int]]:
    """Each member's previous partitions that still exist, each partition claimed once (first name
    wins)."""
    claimed: set[int] = set()
    held: dict[str, list[int]] = {}
    for name in names:
        mine = sorted({p for p in previous.get(name, ()) if 0 <= p < partitions} - claimed)
        claimed.update(mine)
        held[name] = mine
    return held


def _capacities(names: Sequence[str], partitions: int,
                held: Mapping[str, Sequence[int]]) -> dict[str, int]:
    """Floor share for everyone; the extra partitions go to the members holding the most (then by
    name)."""
    base, extra = divmod(partitions, len(names))
    by_holding = sorted(names, key=lambda name: (-len(held[name]), name))
    larger = set(by_holding[:extra])
    return {name: base + (1 if name in larger else 0) for name in names}
