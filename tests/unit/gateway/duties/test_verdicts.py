"""The stall verdict of a group on a partition, judged from one sample after another."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import pytest

from gateway.duties.verdicts import (
    ARCHIVE_BEHIND,
    BEHIND,
    ENDPOINT_FAILING,
    IDLE,
    MEMBER_NOT_ACKING,
    NO_MEMBER,
    OK,
    PARKED_KEY,
    REDELIVERY_LOOP,
    RETENTION_OVERRUN_IN,
    STALLED,
    GroupSample,
    History,
    Verdict,
    VerdictConfig,
    advance,
    needs_presence,
    overrun_in_ms,
    stall_cause,
)

WINDOW = 10_000
CONFIG = VerdictConfig(window_ms=WINDOW)


def sample(at_ms: int, *, lag: int | None = 0, pending: int = 0, delivered: str | None = "1-0",
           **more: Any) -> GroupSample:
    return dataclasses.replace(GroupSample(at_ms, lag, pending, delivered), **more)


def run(samples: Sequence[GroupSample], config: VerdictConfig = CONFIG) -> Verdict:
    history: History | None = None
    verdict = None
    for each in samples:
        history, verdict = advance(history, each, config)
    assert verdict is not None
    return verdict


def test_group_with_nothing_unread_or_pending_is_idle() -> None:
    verdict = run([sample(0), sample(WINDOW * 5)])
    assert (verdict.state, verdict.reason, verdict.since_ms) == (IDLE, None, 0)


def test_group_keeping_up_with_new_deliveries_is_ok() -> None:
    verdict = run([sample(0, lag=5, pending=3, delivered="1-0"),
                   sample(WINDOW, lag=6, pending=2, delivered="2-0"),
                   sample(2 * WINDOW, lag=4, pending=3, delivered="3-0")])
    assert (verdict.state, verdict.reason) == (OK, None)


def test_large_lag_that_does_not_drain_while_acks_progress_is_behind() -> None:
    verdict = run([sample(0, lag=5_000, pending=10, delivered="1-0"),
                   sample(WINDOW, lag=7_000, pending=10, delivered="2-0"),
                   sample(2 * WINDOW, lag=9_000, pending=10, delivered="3-0")])
    assert (verdict.state, verdict.reason) == (BEHIND, None)
    assert "do not drain" in verdict.detail


def test_large_lag_that_drains_is_ok() -> None:
    verdict = run([sample(0, lag=9_000, delivered="1-0"),
                   sample(WINDOW, lag=7_000, pending=1, delivered="2-0"),
                   sample(2 * WINDOW, lag=5_000, pending=1, delivered="3-0")])
    assert verdict.state == OK


def test_waiting_work_without_progress_for_the_window_is_stalled_since_the_last_progress() -> None:
    verdict = run([sample(0, lag=3, pending=2, delivered="1-0"),
                   sample(1_000, lag=3, pending=2, delivered="2-0"),
                   sample(6_000, lag=3, pending=2, delivered="2-0"),
                   sample(11_000, lag=3, pending=2, delivered="2-0")])
    assert (verdict.state, verdict.reason, verdict.since_ms) == (STALLED, MEMBER_NOT_ACKING, 1_000)
    assert "no ack and no new delivery for 10s" in verdict.detail


def test_a_push_group_whose_endpoint_fails_is_stalled_by_the_endpoint_with_its_error() -> None:
    failing = "HTTP 503"
    verdict = run([sample(0, lag=3, pending=2, endpoint_error=failing),
                   sample(WINDOW, lag=3, pending=2, parked_keys=1, endpoint_error=failing)])
    assert (verdict.state, verdict.reason) == (STALLED, ENDPOINT_FAILING)
    assert verdict.detail.endswith("the push endpoint fails (HTTP 503)")
    assert PARKED_KEY in verdict.warnings


def test_no_progress_shorter_than_the_window_is_not_a_stall() -> None:
    verdict = run([sample(0, lag=3, pending=2), sample(WINDOW - 1, lag=3, pending=2)])
    assert verdict.state == OK


def test_an_ack_without_new_deliveries_is_progress() -> None:
    verdict = run([sample(0, pending=5), sample(WINDOW, pending=4), sample(2 * WINDOW, pending=3)])
    assert verdict.state == OK


def test_redeliveries_alone_are_no_progress() -> None:
    verdict = run([sample(0, pending=5, max_delivery_count=1),
                   sample(WINDOW, pending=5, max_delivery_count=2, present=True)])
    assert (verdict.state, verdict.reason) == (STALLED, MEMBER_NOT_ACKING)


@pytest.mark.parametrize(("more", "cause"), [
    ({"present": False, "parked_keys": 1, "max_delivery_count": 9}, NO_MEMBER),
    ({"pending": 0, "lag": 4}, NO_MEMBER),
    ({"present": True, "parked_keys": 1, "max_delivery_count": 9}, PARKED_KEY),
    ({"present": None, "max_delivery_count": 3}, REDELIVERY_LOOP),
    ({"present": True, "max_delivery_count": 2}, MEMBER_NOT_ACKING),
])
def test_stall_causes_come_in_priority_order(more: dict[str, Any], cause: str) -> None:
    assert stall_cause(sample(0, **{"pending": 2, **more}), CONFIG) == cause


def test_stalled_verdict_names_the_cause_and_keeps_its_start_while_it_lasts() -> None:
    samples = [sample(t, lag=0, pending=1, present=False) for t in range(0, 40_000, 5_000)]
    verdict = run(samples)
    assert (verdict.state, verdict.reason, verdict.since_ms) == (STALLED, NO_MEMBER, 0)


def test_a_stall_keeps_its_start_when_its_cause_changes() -> None:
    history, _ = advance(None, sample(0, pending=1, present=True), CONFIG)
    history, first = advance(history, sample(WINDOW, pending=1, present=True), CONFIG)
    _, second = advance(history, sample(WINDOW + 500, pending=1, present=False), CONFIG)
    assert (first.reason, first.since_ms) == (MEMBER_NOT_ACKING, 0)
    assert (second.reason, second.since_ms) == (NO_MEMBER, 0)


def test_a_new_state_starts_a_new_since() -> None:
    verdict = run([sample(0, pending=1), sample(WINDOW, pending=1, present=True),
                   sample(WINDOW + 500, pending=0, delivered="2-0")])
    assert (verdict.state, verdict.since_ms) == (IDLE, WINDOW + 500)


def test_presence_is_needed_only_once_a_stall_is_due() -> None:
    history, _ = advance(None, sample(0, pending=1), CONFIG)
    assert not needs_presence(history, sample(WINDOW - 1, pending=1), CONFIG)
    assert needs_presence(history, sample(WINDOW, pending=1), CONFIG)
    assert not needs_presence(history, sample(WINDOW, pending=1, delivered="9-0"), CONFIG)
    assert not needs_presence(history, sample(WINDOW), CONFIG)


def test_parked_keys_and_loops_while_progressing_are_warnings() -> None:
    verdict = run([sample(0, pending=2, delivered="1-0"),
                   sample(WINDOW, pending=2, delivered="2-0", parked_keys=1,
                          max_delivery_count=4)])
    assert (verdict.state, verdict.reason) == (OK, None)
    assert verdict.warnings == (PARKED_KEY, REDELIVERY_LOOP)


def test_retention_about_to_drop_waiting_entries_makes_the_group_behind() -> None:
    config = dataclasses.replace(CONFIG, retention_ms=60_000, horizon_ms=30_000)
    verdict = run([sample(0, lag=2, delivered="1-0", oldest_unread_age_ms=35_000),
                   sample(5_000, lag=2, delivered="2-0", oldest_unread_age_ms=40_000)], config)
    assert (verdict.state, verdict.reason) == (BEHIND, RETENTION_OVERRUN_IN)
    assert "in about 20s" in verdict.detail


def test_retention_overrun_is_a_warning_of_a_stall() -> None:
    config = dataclasses.replace(CONFIG, retention_ms=60_000)
    verdict = run([sample(0, pending=2, oldest_unacked_age_ms=40_000, present=True),
                   sample(WINDOW, pending=2, oldest_unacked_age_ms=50_000, present=True)], config)
    assert (verdict.state, verdict.reason) == (STALLED, MEMBER_NOT_ACKING)
    assert verdict.warnings == (RETENTION_OVERRUN_IN,)


def test_overrun_follows_the_rate_at_which_the_oldest_entry_ages() -> None:
    config = dataclasses.replace(CONFIG, retention_ms=100_000)
    base = sample(0, lag=1, oldest_unread_age_ms=40_000)
    slow = sample(10_000, lag=1, oldest_unread_age_ms=45_000)  # ages at half the clock's pace
    draining = sample(10_000, lag=1, oldest_unread_age_ms=30_000)
    assert overrun_in_ms(slow, base, config) == 110_000
    assert overrun_in_ms(draining, base, config) is None
    assert overrun_in_ms(base, base, config) is None  # no trend yet


def test_overrun_by_max_length_follows_the_growth_of_unacked_entries() -> None:
    config = dataclasses.replace(CONFIG, max_length=1_000)
    base, now = sample(0, lag=100), sample(10_000, lag=600)
    assert overrun_in_ms(now, base, config) == 8_000
    assert overrun_in_ms(sample(10_000, lag=50), base, config) is None


def test_group_holding_the_hot_tier_past_the_archive_target_is_archive_behind() -> None:
    config = dataclasses.replace(CONFIG, hot_retention_ms=60_000)
    verdict = run([sample(0, lag=1, delivered="1-0", oldest_unread_age_ms=80_000),
                   sample(1_000, lag=1, delivered="2-0", oldest_unread_age_ms=81_000)], config)
    assert (verdict.state, verdict.reason) == (BEHIND, ARCHIVE_BEHIND)
    off = run([sample(0, lag=1, oldest_unread_age_ms=80_000)])
    assert off.state == OK


def test_unknown_lag_counts_as_waiting_unless_nothing_is_unread() -> None:
    assert sample(0, lag=None).work_waits
    assert not sample(0, lag=None, oldest_unread_age_ms=0).work_waits


def test_verdict_round_trips_its_json_form() -> None:
    verdict = Verdict(STALLED, NO_MEMBER, 12, "nobody", (RETENTION_OVERRUN_IN,))
    assert Verdict.from_dict(verdict.to_dict()) == verdict
    assert verdict.to_dict()["warnings"] == [RETENTION_OVERRUN_IN]
