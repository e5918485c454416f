"""The coordinator's decision (``plan_step``): two phases, never a grant before the revocations are
confirmed."""

from __future__ import annotations

from partitioner.group_coordinator import plan_step
from partitioner.group_state import GroupState, MemberInfo, Released


def _state(members: list[str], generation: int, owners: dict[str, tuple[int, ...]],
           confirmed: dict[str, int] | None = None, released: Released | None = None) -> GroupState:
    return GroupState(
        revision=1, members={m: MemberInfo(m, "n", 0) for m in members}, generation=generation,
        owners=owners, confirmed=confirmed or {}, released=released
    )


def plan(state: GroupState, partitions: int) -> dict[str, tuple[int, ...]] | None:
    step = plan_step(state, partitions)
    return None if step is None else step.owners


def test_first_member_of_a_new_group_gets_everything_at_once() -> None:
    assert plan(_state(["a"], 0, {}), 3) == {"a": (0, 1, 2)}


def test_balanced_and_current_group_needs_no_write() -> None:
    assert plan(_state(["a", "b"], 4, {"a": (0, 1), "b": (2, 3)}, {"a": 4, "b": 4}), 4) is None


def test_newcomer_first_makes_the_old_owner_give_up_its_share() -> None:
    state = _state(["a", "b"], 1, {"a": (0, 1, 2, 3)}, {"a": 1, "b": 1})
    assert plan(state, 4) == {"a": (0, 1), "b": ()}


def test_target_waits_for_live_members_to_confirm_revocation() -> None:
    after_phase_one = {"a": (0, 1), "b": ()}
    assert plan(_state(["a", "b"], 2, after_phase_one, {"a": 1, "b": 2}), 4) is None
    assert plan(_state(["a", "b"], 2, after_phase_one, {"a": 2, "b": 2}), 4) == {
        "a": (0, 1), "b": (2, 3)
    }


def test_dead_members_partitions_skip_the_revocation_phase() -> None:
    state = _state(["a"], 3, {"a": (0, 1), "b": (2, 3)}, {"a": 3})
    assert plan(state, 4) == {"a": (0, 1, 2, 3)}


def test_a_member_that_never_confirmed_blocks_grants() -> None:
    state = _state(["a", "c"], 3, {"a": (0, 1), "b": (2, 3)}, {"a": 3})
    assert plan(state, 4) is None


def test_member_change_in_phase_one_restarts_from_written_state() -> None:
    # Phase 1 for a+b was written (gen 2); c joined before anyone confirmed: a must give up more
    # first.
    state = _state(["a", "b", "c"], 2, {"a": (0, 1, 2), "b": ()}, {"b": 2})
    assert plan(state, 6) == {"a": (0, 1), "b": (), "c": ()}


def test_new_partitions_are_granted_after_confirmation() -> None:
    state = _state(["a", "b"], 5, {"a": (0, 1), "b": (2, 3)}, {"a": 5, "b": 5})
    assert plan(state, 6) == {"a": (0, 1, 4), "b": (2, 3, 5)}


def test_phase_one_records_each_members_releases_and_generation() -> None:
    step = plan_step(
        _state(["a", "b", "c"], 4, {"a": (0, 1, 2), "b": (3, 4, 5)}, {"a": 4, "b": 4}, {}), 6
    )
    assert step is not None
    assert step.owners == {"a": (0, 1), "b": (3, 4), "c": ()}
    assert step.released == {2: ("a", 5), 5: ("b", 5)}


def test_confirmed_release_moves_without_waiting_for_others() -> None:
    # a's gateway died (its lease still lives, it confirms nothing); b confirmed giving up 5; c
    # rejoined.
    after_phase_one = {"a": (0, 1), "b": (3, 4), "c": ()}
    state = _state(
        ["a", "b", "c"], 5, after_phase_one, {"a": 4, "b": 5, "c": 5}, {2: ("a", 5), 5: ("b", 5)}
    )
    step = plan_step(state, 6)
    assert step is not None
    assert step.owners == {"a": (0, 1), "b": (3, 4), "c": (5,)}
    assert step.released == {2: ("a", 5)}  # waits for a's confirmation or a's lease to end
    assert (
        plan(_state(["a", "b", "c"], 6, step.owners, {"a": 4, "b": 6, "c": 6}, step.released), 6)
        is None
    )


def test_partition_released_by_gone_member_moves_at_once() -> None:
    state = _state(["b", "c"], 5, {"b": (3, 4), "c": (5,)}, {"b": 6, "c": 6}, {2: ("a", 5)})
    assert plan(state, 6) == {"b": (0, 3, 4), "c": (1, 2, 5)}


def test_released_partition_may_go_back_to_its_member_at_once() -> None:
    state = _state(["a", "b"], 5, {"a": (0,), "b": (2, 3)}, {"b": 5}, {1: ("a", 5)})
    assert plan(state, 4) == {"a": (0, 1), "b": (2, 3)}
