"""Capped exponential backoff with jitter for the coordination retry loops."""

from __future__ import annotations

import asyncio
import random

INITIAL_BACKOFF_S = 0.05
# a loop waiting out an etcd outage sees etcd back at most this late, and an outage costs each
# loop no more than a try per this long
MAX_BACKOFF_S = 0.5
JITTER = 0.2  # each wait is drawn from [delay * (1 - JITTER), delay]: loops do not retry in step


class Backoff:
    """Sleep longer after each failure (doubling, capped, jittered); ``reset`` after a success."""

    def __init__(self, initial_s: float = INITIAL_BACKOFF_S, max_s: float = MAX_BACKOFF_S) -> None:
        self._initial_s, self._max_s = initial_s, max_s
        self.delay_s = initial_s

    def reset(self) -> None:
        """Start again from the initial delay."""
        self.delay_s = self._initial_s

    def next_wait_s(self, at_most_s: float | None = None) -> float:
        """The next wait (jittered, at most ``at_most_s``), doubling the delay for the one after."""
        wait_s = self.delay_s * (1 - JITTER * random.random())
        self.delay_s = min(self.delay_s * 2, self._max_s)
        return wait_s if at_most_s is None else max(0.0, min(wait_s, at_most_s))

    async def sleep(self, at_most_s: float | None = None) -> None:
        """Wait the next wait (see ``next_wait_s``)."""
        await asyncio.sleep(self.next_wait_s(at_most_s))
