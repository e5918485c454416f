"""The coordination loops' backoff: doubling from its start, capped, each wait jittered below the
delay so loops retrying together spread out."""

from __future__ import annotations

from partitioner.backoff import JITTER, MAX_BACKOFF_S, Backoff


def test_waits_double_up_to_the_cap_and_never_exceed_it() -> None:
    backoff = Backoff(initial_s=0.05)
    delays = []
    for _ in range(12):
        delays.append(backoff.delay_s)
        wait_s = backoff.next_wait_s()
        assert delays[-1] * (1 - JITTER) <= wait_s <= delays[-1]
    assert delays[:4] == [0.05, 0.1, 0.2, 0.4]
    assert max(delays) == MAX_BACKOFF_S == delays[-1]


def test_waits_are_jittered_and_reset_starts_again() -> None:
    assert len({Backoff(initial_s=0.4).next_wait_s() for _ in range(20)}) > 1
    backoff = Backoff(initial_s=0.05)
    backoff.next_wait_s()
    backoff.next_wait_s()
    backoff.reset()
    assert backoff.delay_s == 0.05


def test_a_wait_never_outlasts_the_deadline_given() -> None:
    backoff = Backoff(initial_s=0.4)
    assert backoff.next_wait_s(at_most_s=0.1) <= 0.1
    assert backoff.next_wait_s(at_most_s=-1.0) == 0.0
