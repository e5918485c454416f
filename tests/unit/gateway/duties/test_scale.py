"""The scale hint: flows from Redis's group counters, rates smoothed over rounds, summed across
partitions, the members a backlog needs against a target, held up for a window before going down;
the owner posts each group's flow beside its verdict."""

from __future__ import annotations

import pytest
from test_verdict_keeper import Clock, Fakes, keeper

from gateway.duties.lag import GroupLag
from gateway.duties.scale import (
    Bounds,
    Flow,
    GroupFlow,
    PullerRoster,
    ScaleMemo,
    desired,
    observe,
    total,
)
from gateway.duties.verdict_duty import read_flow, read_verdict


def rounds(*counters: tuple[int, int, int], every_ms: int = 1000) -> Flow | None:
    """The flow after lag rounds of (entries_read, lag, pending), ``every_ms`` apart."""
    flow = None
    for index, (read, lag, pending) in enumerate(counters):
        flow = observe(flow, index * every_ms, read, lag, pending)
    return flow


def test_first_round_has_counters_but_no_rates() -> None:
    assert rounds((10, 5, 2)) == Flow(0, 15, 8, 7)


def test_rates_are_the_counters_progress_per_second() -> None:
    flow = rounds((10, 5, 2), (30, 15, 2), every_ms=2000)
    assert flow is not None
    assert (flow.arrival_rate, flow.ack_rate, flow.backlog) == (15.0, 10.0, 17)


def test_rates_are_smoothed_over_rounds() -> None:
    flow = rounds((0, 0, 0), (10, 0, 0), (10, 0, 0))
    assert flow is not None
    assert flow.arrival_rate == 5.0
    assert flow.ack_rate == 5.0


def test_counters_going_back_start_the_rates_over() -> None:
    flow = rounds((100, 0, 0), (110, 0, 0), (0, 110, 0))
    assert flow == Flow(2000, 110, 0, 110)


def test_unknown_counters_give_no_flow() -> None:
    assert observe(None, 0, None, 3, 0) is None
    assert observe(None, 0, 3, None, 0) is None


def test_flow_round_trips_its_json_form() -> None:
    flow = rounds((10, 5, 2), (30, 15, 2))
    assert flow is not None
    assert Flow.from_dict(flow.to_dict()) == flow


def test_partitions_add_up_and_those_without_rates_are_left_out() -> None:
    rated = Flow(0, 0, 0, 10, 2.0, 1.5)
    summed = total([rated, rated, Flow(0, 0, 0, 99), None])
    assert summed == GroupFlow(4.0, 3.0, 20, 2)
    assert total([Flow(0, 0, 0, 99), None]) is None


def test_members_drain_the_backlog_within_the_target_and_keep_up() -> None:
    flow = GroupFlow(arrival_rate=12.0, ack_rate=5.0, backlog=300, partitions=4)
    # (300 / 60 + 12) / 5 = 3.4
    assert desired(flow, 1, 5.0, 60.0, Bounds()) == 4


def test_an_exact_need_is_not_rounded_up_by_float_error() -> None:
    flow = GroupFlow(arrival_rate=0.3, ack_rate=0.1, backlog=0, partitions=1)
    assert desired(flow, 1, 0.1, 60.0, Bounds()) == 3


def test_hint_stays_within_its_bounds() -> None:
    flow = GroupFlow(arrival_rate=100.0, ack_rate=1.0, backlog=0, partitions=4)
    assert desired(flow, 1, 1.0, 60.0, Bounds(most=4)) == 4
    idle = GroupFlow(0.0, 0.0, 0, 4)
    assert desired(idle, 3, 1.0, 60.0, Bounds(least=2)) == 2


@pytest.mark.parametrize(("members", "backlog", "hint"), [(0, 5, 1), (0, 0, 0), (3, 5, 3)])
def test_without_a_known_ack_rate_the_hint_holds_or_starts_one(members: int, backlog: int,
                                                                hint: int) -> None:
    flow = GroupFlow(arrival_rate=0.0, ack_rate=0.0, backlog=backlog, partitions=1)
    assert desired(flow, members, None, 60.0, Bounds()) == hint


def test_capacity_seen_under_backlog_outlives_the_backlog() -> None:
    memo, key = ScaleMemo(capacity_ttl_ms=10_000), ("t", "g")
    assert memo.capacity(key, GroupFlow(4.0, 10.0, 50, 1), 2, 0) == 5.0
    drained = GroupFlow(4.0, 4.0, 0, 1)
    assert memo.capacity(key, drained, 2, 5_000) == 5.0  # members idle part of the time
    assert memo.capacity(key, drained, 2, 20_000) == 2.0  # too old: what they manage now


def test_hint_rises_at_once_and_falls_only_after_a_quiet_window() -> None:
    memo, key, window = ScaleMemo(), ("t", "g"), 10_000
    assert memo.settle(key, 2, 0, window) == 2
    assert memo.settle(key, 5, 1_000, window) == 5
    assert memo.settle(key, 1, 2_000, window) == 5
    assert memo.settle(key, 1, 10_500, window) == 5
    assert memo.settle(key, 1, 11_500, window) == 1


def lag(read: int, unread: int, pending: int) -> GroupLag:
    return GroupLag("g", unread, 0, 0, pending, f"{read}-0", read)


async def test_owner_posts_each_groups_flow_beside_its_verdict() -> None:
    fakes, clock = Fakes(), Clock()
    judge, _ = keeper(fakes, clock)
    await judge.judge("t", 0, [lag(10, 0, 0)])
    clock.now_ms += 2000
    await judge.judge("t", 0, [lag(30, 6, 2)])
    flow = await read_flow(fakes, "t", 0, "g")
    assert flow is not None
    assert (flow.arrival_rate, flow.ack_rate, flow.backlog) == (13.0, 9.0, 8)
    verdict = await read_verdict(fakes, "t", 0, "g")
    assert verdict is not None
    assert "flow" not in verdict


async def test_a_partition_given_up_loses_its_flows() -> None:
    fakes, clock = Fakes(), Clock()
    judge, _ = keeper(fakes, clock)
    await judge.judge("t", 0, [lag(10, 0, 0)])
    judge.forget("t", 0)
    clock.now_ms += 1000
    await judge.judge("t", 0, [lag(20, 0, 0)])
    flow = await read_flow(fakes, "t", 0, "g")
    assert flow is not None
    assert flow.arrival_rate is None


def test_pull_callers_count_once_each_until_they_fall_out_of_the_window() -> None:
    roster, key = PullerRoster(window_ms=10_000), ("t", "g")
    roster.saw(key, "app@10.0.0.1", 0)
    roster.saw(key, "app@10.0.0.2", 1_000)
    roster.saw(key, "app@10.0.0.1", 5_000)
    assert roster.count(key, 6_000) == 2
    assert roster.count(key, 12_000) == 1  # the second one stopped pulling
    assert roster.count(key, 16_000) == 0
    assert roster.count(("t", "other"), 0) == 0


def test_a_group_remembers_no_more_pull_callers_than_its_bound() -> None:
    roster, key = PullerRoster(max_callers=3), ("t", "g")
    for index in range(5):
        roster.saw(key, f"caller{index}", index)
    assert roster.count(key, 10) == 3
