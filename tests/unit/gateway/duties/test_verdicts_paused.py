"""A paused group is judged ``paused``, never stalled, and its stall clock starts again when it
resumes."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from gateway.duties import verdicts
from gateway.duties.verdicts import GroupSample, History, Verdict

WINDOW = 10_000
CONFIG = verdicts.VerdictConfig(window_ms=WINDOW, retention_ms=60_000)


def sample(at_ms: int, **more: Any) -> GroupSample:
    return dataclasses.replace(GroupSample(at_ms, 3, 2, "1-0"), **more)


def run(samples: Sequence[GroupSample]) -> tuple[History, Verdict]:
    history: History | None = None
    verdict = None
    for each in samples:
        history, verdict = verdicts.advance(history, each, CONFIG)
    assert history is not None
    assert verdict is not None
    return history, verdict


def test_paused_group_with_work_waiting_and_no_progress_is_paused_not_stalled() -> None:
    _, verdict = run([sample(at, paused=True) for at in range(0, 5 * WINDOW, WINDOW)])
    assert (verdict.state, verdict.reason) == (verdicts.PAUSED, None)
    assert verdict.detail == "paused by an operator; 5 entries wait"


def test_paused_group_with_nothing_waiting_is_paused() -> None:
    _, verdict = run([sample(0, lag=0, pending=0, paused=True)])
    assert verdict.state == verdicts.PAUSED
    assert verdict.detail == "paused by an operator; nothing waits"


def test_paused_group_keeps_the_time_it_was_first_judged_paused() -> None:
    _, verdict = run([sample(0), sample(1_000, paused=True), sample(9_000, paused=True)])
    assert (verdict.state, verdict.since_ms) == (verdicts.PAUSED, 1_000)


def test_resumed_group_is_stalled_only_a_window_after_the_resume() -> None:
    paused = [sample(at, paused=True) for at in range(0, 5 * WINDOW, WINDOW)]
    resumed_at = 5 * WINDOW
    _, soon = run([*paused, sample(resumed_at + WINDOW - 1)])
    assert soon.state != verdicts.STALLED
    _, later = run([*paused, sample(resumed_at), sample(resumed_at + 2 * WINDOW, present=True)])
    assert (later.state, later.since_ms) == (verdicts.STALLED, resumed_at)


def test_paused_group_still_warns_of_retention_dropping_waiting_entries() -> None:
    _, verdict = run([sample(0, oldest_unacked_age_ms=10_000, paused=True),
                      sample(WINDOW, oldest_unacked_age_ms=50_000, paused=True)])
    assert verdict.state == verdicts.PAUSED
    assert "retention_overrun_in" in verdict.warnings


def test_paused_group_needs_no_look_at_its_members() -> None:
    history, _ = run([sample(0, paused=True)])
    assert not verdicts.needs_presence(history, sample(3 * WINDOW, paused=True), CONFIG)
