"""A push endpoint's circuit breaker and request rate: when to stop calling a failing endpoint, when
to probe it again, and how many requests per second it gets (pure state, no I/O but sleeping)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Literal

__all__ = ["MAX_RETRY_AFTER_S", "BreakerState", "CircuitBreaker", "RequestRate"]

BreakerState = Literal["closed", "open", "half_open"]

# an endpoint's Retry-After is honoured up to this long: a bogus one must not stall it for days
MAX_RETRY_AFTER_S = 3600.0
# float sums over many refills land a hair under a whole token
TOKEN_SLACK = 1e-9


class CircuitBreaker:
    """Closed until ``failure_threshold`` failures in a row; then open for a cooldown, then half
    open: one probe at a time, whose success closes it and whose failure re-opens it for twice as
    long (up to ``open_max_s``)."""

    def __init__(self, failure_threshold: int = 5, open_base_s: float = 1.0,
                 open_max_s: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        if failure_threshold < 1 or open_base_s <= 0 or open_max_s < open_base_s:
            raise ValueError("a breaker needs a threshold >= 1 and 0 < open_base_s <= open_max_s")
        self._threshold = failure_threshold
        self._base_s, self._max_s = open_base_s, open_max_s
        self._clock = clock
        self._failures = 0
        self._opens = 0  # opens since it was last closed: the next cooldown doubles with each
        self._open_until: float | None = None  # None: closed
        self._probing = False

    @property
    def state(self) -> BreakerState:
        """Closed, open (cooling down), or half open (its cooldown passed: it may probe)."""
        if self._open_until is None:
            return "closed"
        return "open" if self._clock() < self._open_until else "half_open"

    @property
    def consecutive_failures(self) -> int:
        """Failures since the last success."""
        return self._failures

    def allow(self) -> bool:
        """Whether a request may go now; in half open, True for one probe until it is settled."""
        state = self.state
        if state == "closed":
            return True
        if state == "open" or self._probing:
            return False
        self._probing = True
        return True

    def wait_s(self) -> float:
        """0 when ``allow`` would say yes, else seconds until a probe may go (while a probe is out,
        ``open_base_s``: a moment to look again)."""
        state = self.state
        if state == "closed" or (state == "half_open" and not self._probing):
            return 0.0
        if state == "half_open" or self._open_until is None:
            return self._base_s
        return max(0.0, self._open_until - self._clock())

    def cancel_probe(self) -> None:
        """A probe allowed but never sent: the next request may probe instead."""
        self._probing = False

    def succeeded(self) -> None:
        """A request succeeded: close, forget the failures and the cooldown's growth."""
        self._failures = self._opens = 0
        self._open_until = None
        self._probing = False

    def failed(self, retry_after_s: float | None = None) -> None:
        """A request failed (``retry_after_s``: the endpoint asked to be left alone that long)."""
        self._failures += 1
        state = self.state
        if state == "half_open" or (state == "closed" and self._failures >= self._threshold):
            self._open_for(self._next_cooldown_s())
        if retry_after_s is not None:
            self._open_for(min(max(0.0, retry_after_s), MAX_RETRY_AFTER_S))

    def _next_cooldown_s(self) -> float:
        # the exponent is bounded so that a breaker failing for weeks never overflows a float
        cooldown_s = min(self._base_s * 2.0 ** min(self._opens, 64), self._max_s)
        self._opens += 1
        return cooldown_s

    def _open_for(self, cooldown_s: float) -> None:
        """Open (or stay open) until at least ``cooldown_s`` from now; a probe out is settled."""
        until = self._clock() + cooldown_s
        if self.state == "open" and self._open_until is not None:
            until = max(until, self._open_until)
        self._open_until = until
        self._probing = False


class RequestRate:
    """A token bucket of ``rate_per_s`` requests a second holding up to ``burst`` (default the
    larger of 1 and the rate); no rate: unlimited. It starts full."""

    def __init__(self, rate_per_s: float | None, burst: float | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if burst is not None and burst < 1:
            raise ValueError("a request rate's burst must hold at least one request")
        self._clock = clock
        self._fixed_burst = burst
        self._rate: float | None = None
        self._burst = 1.0
        self._tokens = 1.0
        self._at = clock()
        self.set_rate(rate_per_s)

    @property
    def rate_per_s(self) -> float | None:
        """Requests per second; None: unlimited."""
        return self._rate

    def delay_s(self) -> float:
        """Seconds until a token is there (0: now)."""
        if self._rate is None:
            return 0.0
        self._refill()
        missing = 1.0 - self._tokens
        return 0.0 if missing <= TOKEN_SLACK else missing / self._rate

    def take(self) -> bool:
        """Take a token when one is there; whether it was."""
        if self._rate is None:
            return True
        self._refill()
        if self._tokens < 1.0 - TOKEN_SLACK:
            return False
        self._tokens = max(0.0, self._tokens - 1.0)
        return True

    def set_rate(self, rate_per_s: float | None) -> None:
        """Change the rate; the tokens saved up so far stay, capped to the new burst."""
        if rate_per_s is not None and rate_per_s <= 0:
            raise ValueError("a request rate must be positive (None: unlimited)")
        was_unlimited = self._rate is None
        self._refill()
        self._rate = rate_per_s
        self._burst = self._fixed_burst or max(1.0, rate_per_s or 1.0)
        self._tokens = self._burst if was_unlimited else min(self._tokens, self._burst)

    async def acquire(self) -> None:
        """Wait until a token is there and take it (the bucket refills on the clock, not on an
        event, so waiting is sleeping)."""
        while True:
            if self.take():
                return
            await asyncio.sleep(self.delay_s())

    def _refill(self) -> None:
        now = self._clock()
        if self._rate is not None:
            self._tokens = min(self._burst, self._tokens + (now - self._at) * self._rate)
        self._at = now
