"""Properties of ``assign``: coverage, exclusivity, balance, stickiness and determinism."""

from __future__ import annotations

import math
import random

from hypothesis import given
from hypothesis import strategies as st

from partitioner.assignment import assign, moved_partitions

member_names = st.lists(
    st.text("abcdefgh", min_size=1, max_size=4), min_size=1, max_size=8, unique=True
)
partition_counts = st.integers(min_value=0, max_value=64)


def _check_valid(result: dict[str, tuple[int, ...]], members: list[str], partitions: int) -> None:
    assert set(result) == set(members)
    owned = [p for parts in result.values() for p in parts]
    assert sorted(owned) == list(range(partitions))  # every partition exactly once
    sizes = {len(parts) for parts in result.values()}
    assert sizes <= {partitions // len(members), math.ceil(partitions / len(members))}


@st.composite
def previous_assignments(draw: st.DrawFn) -> tuple[list[str], int, dict[str, list[int]]]:
    """Arbitrary (even overlapping or stale) previous owners, including members that are gone."""
    members = draw(member_names)
    partitions = draw(partition_counts)
    ghosts = draw(st.lists(st.text("xyz", min_size=1, max_size=3), max_size=3))
    previous = {name: draw(st.lists(st.integers(0, partitions + 5), max_size=10))
                for name in members[: draw(st.integers(0, len(members)))] + ghosts}
    return members, partitions, previous


def test_no_members_gets_empty_assignment() -> None:
    assert assign([], 6, {"a": [0, 1]}) == {}


def test_one_member_gets_every_partition() -> None:
    assert assign(["a"], 4, {}) == {"a": (0, 1, 2, 3)}


def test_second_member_takes_half_and_first_keeps_the_rest() -> None:
    result = assign(["a", "b"], 6, {"a": range(6)})
    assert result == {"a": (0, 1, 2), "b": (3, 4, 5)}


def test_partitions_beyond_count_in_previous_are_ignored() -> None:
    assert assign(["a", "b"], 2, {"a": [0, 5, 7], "b": [1, 9]}) == {"a": (0,), "b": (1,)}


@given(previous_assignments())
def test_every_partition_is_owned_exactly_once_and_balanced(
    case: tuple[list[str], int, dict[str, list[int]]],
) -> None:
    members, partitions, previous = case
    _check_valid(assign(members, partitions, previous), members, partitions)


@given(previous_assignments(), st.randoms(use_true_random=False))
def test_result_does_not_depend_on_input_order(case: tuple[list[str], int, dict[str, list[int]]],
                                               rnd: random.Random) -> None:
    members, partitions, previous = case
    shuffled_members = members[:]
    rnd.shuffle(shuffled_members)
    shuffled_previous = {name: rnd.sample(parts, len(parts)) for name, parts in
                         rnd.sample(list(previous.items()), len(previous))}
    assert assign(shuffled_members, partitions, shuffled_previous) == assign(
        members, partitions, previous
    )


@given(member_names, partition_counts)
def test_reassigning_a_balanced_result_moves_nothing(members: list[str], partitions: int) -> None:
    first = assign(members, partitions, {})
    assert assign(members, partitions, first) == first


@given(member_names, st.integers(min_value=1, max_value=64), st.text("ijk", min_size=1, max_size=3))
def test_adding_a_member_moves_at_most_one_fair_share(
    members: list[str], partitions: int, newcomer: str
) -> None:
    before = assign(members, partitions, {})
    if newcomer in members:
        return
    after = assign([*members, newcomer], partitions, before)
    _check_valid(after, [*members, newcomer], partitions)
    moved = moved_partitions(before, after)
    assert len(moved) <= math.ceil(partitions / len(members))
    assert moved == set(after[newcomer])  # only the newcomer gains


@given(member_names.filter(lambda names: len(names) >= 2), partition_counts, st.data())
def test_removing_a_member_moves_only_its_partitions(members: list[str], partitions: int,
                                                     data: st.DataObject) -> None:
    before = assign(members, partitions, {})
    leaver = data.draw(st.sampled_from(members))
    survivors = [name for name in members if name != leaver]
    after = assign(survivors, partitions, before)
    _check_valid(after, survivors, partitions)
    for name in survivors:
        assert set(before[name]) <= set(after[name])


@given(previous_assignments())
def test_partition_stays_with_owner_unless_over_its_share(
        case: tuple[list[str], int, dict[str, list[int]]]) -> None:
    members, partitions, previous = case
    after = assign(members, partitions, previous)
    ceiling = math.ceil(partitions / len(members))
    for name in members:
        valid = {p for p in previous.get(name, ()) if p < partitions}
        claimed_elsewhere = {
            p for other in members if other < name for p in previous.get(other, ())
        }
        mine = valid - claimed_elsewhere
        if len(mine) <= partitions // len(members):
            assert mine <= set(after[name])
        assert len(mine & set(after[name])) >= min(len(mine), partitions // len(members))
        assert len(after[name]) <= ceiling
