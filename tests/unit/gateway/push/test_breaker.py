"""The push circuit breaker on a fake clock: closed until the threshold, open for a cooldown that
doubles up to its cap, one probe at a time when half open, and an endpoint's Retry-After kept."""

from __future__ import annotations

import pytest

from gateway.push.breaker import MAX_RETRY_AFTER_S, BreakerState, CircuitBreaker


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def breaker(threshold: int = 3, base_s: float = 1.0,
            max_s: float = 8.0) -> tuple[CircuitBreaker, FakeClock]:
    clock = FakeClock()
    return CircuitBreaker(threshold, base_s, max_s, clock=clock), clock


def state_of(subject: CircuitBreaker) -> BreakerState:
    """The state read afresh (a property whose value moves with the clock)."""
    return subject.state


def fail_times(subject: CircuitBreaker, times: int) -> None:
    for _ in range(times):
        subject.failed()


def test_a_closed_breaker_lets_everything_through() -> None:
    subject, _ = breaker()
    assert state_of(subject) == "closed"
    assert all(subject.allow() for _ in range(10))
    assert subject.wait_s() == 0.0
    assert subject.consecutive_failures == 0


def test_failures_below_the_threshold_keep_it_closed_and_a_success_resets_them() -> None:
    subject, _ = breaker(threshold=3)
    fail_times(subject, 2)
    assert state_of(subject) == "closed"
    assert subject.consecutive_failures == 2
    subject.succeeded()
    fail_times(subject, 2)
    assert state_of(subject) == "closed"
    assert subject.consecutive_failures == 2


def test_the_threshold_opens_it_for_the_base_cooldown() -> None:
    subject, clock = breaker(threshold=3, base_s=1.0)
    fail_times(subject, 3)
    assert state_of(subject) == "open"
    assert not subject.allow()
    assert subject.wait_s() == pytest.approx(1.0)
    clock.advance(0.4)
    assert subject.wait_s() == pytest.approx(0.6)
    clock.advance(0.6)
    assert state_of(subject) == "half_open"
    assert subject.wait_s() == 0.0


def test_half_open_lets_one_probe_at_a_time() -> None:
    subject, clock = breaker(threshold=1)
    subject.failed()
    clock.advance(1.0)
    assert subject.allow(), "the probe"
    assert not subject.allow(), "a second request while the probe is out"
    assert subject.wait_s() > 0
    assert state_of(subject) == "half_open"


def test_a_successful_probe_closes_it() -> None:
    subject, clock = breaker(threshold=1)
    subject.failed()
    clock.advance(1.0)
    assert subject.allow()
    subject.succeeded()
    assert state_of(subject) == "closed"
    assert subject.consecutive_failures == 0
    assert subject.allow()
    assert subject.allow()


def test_a_failed_probe_reopens_it_for_twice_as_long_up_to_the_cap() -> None:
    subject, clock = breaker(threshold=2, base_s=1.0, max_s=8.0)
    fail_times(subject, 2)
    cooldowns = []
    for _ in range(6):
        cooldowns.append(subject.wait_s())
        clock.advance(subject.wait_s())
        assert subject.allow()
        subject.failed()
        assert state_of(subject) == "open", "one failed probe is enough to re-open"
    assert cooldowns == [1.0, 2.0, 4.0, 8.0, 8.0, 8.0]
    assert subject.consecutive_failures == 8


def test_a_success_resets_the_cooldowns_growth() -> None:
    subject, clock = breaker(threshold=1, base_s=1.0)
    subject.failed()
    clock.advance(1.0)
    subject.allow()
    subject.failed()
    assert subject.wait_s() == 2.0
    clock.advance(2.0)
    subject.allow()
    subject.succeeded()
    subject.failed()
    assert subject.wait_s() == 1.0


def test_failures_of_requests_already_out_while_open_do_not_stretch_the_cooldown() -> None:
    subject, clock = breaker(threshold=1, base_s=1.0)
    subject.failed()
    clock.advance(0.5)
    fail_times(subject, 3)
    assert subject.wait_s() == 0.5
    clock.advance(0.5)
    assert subject.allow()
    subject.failed()
    assert subject.wait_s() == 2.0, "the re-open after the probe is the second one"


def test_retry_after_opens_at_once_for_at_least_that_long() -> None:
    subject, clock = breaker(threshold=5, base_s=1.0)
    subject.failed(retry_after_s=30.0)
    assert state_of(subject) == "open"
    assert subject.consecutive_failures == 1
    assert subject.wait_s() == 30.0
    clock.advance(30.0)
    assert subject.allow()
    subject.failed(retry_after_s=0.5)
    assert subject.wait_s() == 1.0, "the failed probe's own cooldown is longer"


def test_retry_after_extends_an_open_breaker_but_never_shortens_it() -> None:
    subject, clock = breaker(threshold=1, base_s=4.0, max_s=8.0)
    subject.failed()
    subject.failed(retry_after_s=1.0)
    assert subject.wait_s() == 4.0
    subject.failed(retry_after_s=6.0)
    assert subject.wait_s() == 6.0
    clock.advance(6.0)
    assert state_of(subject) == "half_open"


def test_retry_after_is_capped_and_a_negative_one_is_none() -> None:
    subject, _ = breaker(threshold=5)
    subject.failed(retry_after_s=10**9)
    assert subject.wait_s() == MAX_RETRY_AFTER_S
    other, _ = breaker(threshold=5)
    other.failed(retry_after_s=-5.0)
    assert state_of(other) == "half_open"


def test_nonsense_settings_are_refused() -> None:
    for threshold, base_s, max_s in ((0, 1.0, 2.0), (1, 0.0, 2.0), (1, 3.0, 2.0)):
        with pytest.raises(ValueError, match="threshold"):
            CircuitBreaker(threshold, base_s, max_s)
