"""The push request rate on a fake clock: a token bucket that starts full, refills at its rate up
to its burst, is unlimited without a rate, and keeps its saved tokens across a rate change."""

from __future__ import annotations

import asyncio

import pytest

from gateway.push.breaker import RequestRate


class SteppingClock:
    def __init__(self) -> None:
        self.now = 50.0

    def __call__(self) -> float:
        return self.now


def requests_over_one_second(rate: RequestRate, clock: SteppingClock, step_s: float) -> int:
    taken, end = 0, clock.now + 1.0
    while clock.now < end - 1e-12:
        taken += rate.take()
        clock.now += step_s
    return taken


def test_no_rate_is_unlimited() -> None:
    rate = RequestRate(None, clock=SteppingClock())
    assert all(rate.take() for _ in range(10_000))
    assert rate.delay_s() == 0.0


def test_a_rate_lets_its_burst_then_its_rate_over_a_simulated_second() -> None:
    clock = SteppingClock()
    rate = RequestRate(10.0, clock=clock)
    assert requests_over_one_second(rate, clock, 0.001) == 10 + 10, "a full burst, then 10/s"
    assert requests_over_one_second(rate, clock, 0.001) == 10


def test_a_slow_rate_has_a_burst_of_one() -> None:
    clock = SteppingClock()
    rate = RequestRate(0.5, clock=clock)
    assert rate.take()
    assert not rate.take()
    assert rate.delay_s() == pytest.approx(2.0)
    clock.now += 1.0
    assert rate.delay_s() == pytest.approx(1.0)
    clock.now += 1.0
    assert rate.delay_s() == 0.0
    assert rate.take()


def test_an_explicit_burst_caps_the_saved_tokens() -> None:
    clock = SteppingClock()
    rate = RequestRate(100.0, burst=3, clock=clock)
    clock.now += 60.0
    assert [rate.take() for _ in range(4)] == [True, True, True, False]
    assert rate.delay_s() == pytest.approx(0.01)


def test_set_rate_caps_saved_tokens_to_the_new_burst() -> None:
    clock = SteppingClock()
    rate = RequestRate(100.0, clock=clock)
    rate.set_rate(2.0)
    assert [rate.take() for _ in range(3)] == [True, True, False]
    clock.now += 1.0
    rate.set_rate(50.0)
    assert [rate.take() for _ in range(3)] == [True, True, False], "saved tokens stay"
    assert rate.delay_s() == pytest.approx(0.02)


def test_set_rate_to_none_and_back_starts_full() -> None:
    clock = SteppingClock()
    rate = RequestRate(1.0, clock=clock)
    assert rate.take()
    rate.set_rate(None)
    assert all(rate.take() for _ in range(100))
    rate.set_rate(4.0)
    assert sum(rate.take() for _ in range(10)) == 4


def test_a_rate_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        RequestRate(0.0)
    with pytest.raises(ValueError, match="positive"):
        RequestRate(1.0).set_rate(-1.0)
    with pytest.raises(ValueError, match="burst"):
        RequestRate(1.0, burst=0.5)


async def test_acquire_waits_for_the_next_token() -> None:
    loop = asyncio.get_running_loop()
    rate = RequestRate(1000.0, burst=1, clock=loop.time)
    await rate.acquire()
    assert not rate.take(), "the burst is spent"
    await asyncio.wait_for(rate.acquire(), timeout=5.0)


async def test_acquire_can_be_cancelled_while_waiting() -> None:
    rate = RequestRate(0.001, clock=SteppingClock())
    assert rate.take()
    waiter = asyncio.ensure_future(rate.acquire())
    await asyncio.sleep(0)
    assert not waiter.done()
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
