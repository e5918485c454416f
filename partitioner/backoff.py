"""Capped exponential backoff for the coordination retry loops."""

from __future__ import annotations

import asyncio

INITIAL_BACKOFF_S = 0.05
MAX_BACKOFF_S = 1.0


class Backoff:
    """Sleep longer after each failure (doubling, capped); ``reset`` after a success."""

    def __init__(self, initial_s: float = INITIAL_BACKOFF_S, max_s: float = MAX_BACKOFF_S) -> None:
        self._initial_s, self._max_s = initial_s, max_s
        self.delay_s = initial_s

    def reset(self) -> None:
        """Start again from the initial delay."""
        self.delay_s = self._initial_s

    async def sleep(self) -> None:
        """Wait the current delay, then double it (up to the cap)."""
        await asyncio.sleep(self.delay_s)
        self.delay_s = min(self.delay_s * 2, self._max_s)
