"""The group ledger's claim decision: a held pair is free, a new one counts against the cap, gone
pairs make room."""

from __future__ import annotations

from partitioner.group_ledger import admit


def exists(_: tuple[str, str]) -> bool:
    return True


def test_a_new_group_is_added_below_the_cap() -> None:
    assert admit([("t", "a")], ("t", "b"), 2, exists) == [("t", "a"), ("t", "b")]


def test_group_already_held_is_admitted_unchanged_at_cap() -> None:
    assert admit([("t", "a"), ("t", "b")], ("t", "a"), 2, exists) == [("t", "a"), ("t", "b")]


def test_a_new_group_at_the_cap_is_refused() -> None:
    assert admit([("t", "a"), ("u", "a")], ("t", "c"), 2, exists) is None


def test_groups_that_no_longer_exist_make_room_at_the_cap_only() -> None:
    def only_t(pair: tuple[str, str]) -> bool:
        return pair[0] == "t"

    assert admit([("gone", "a"), ("t", "b")], ("t", "c"), 2, only_t) == [("t", "b"), ("t", "c")]
    assert admit([("gone", "a")], ("t", "c"), 2, only_t) == [("gone", "a"), ("t", "c")], (
        "below the cap: kept"
    )


def test_cap_zero_means_no_cap() -> None:
    held = [("t", str(i)) for i in range(1000)]
    assert admit(held, ("t", "new"), 0, exists) == [*held, ("t", "new")]
