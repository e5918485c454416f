"""Open WebSocket connections per principal on this gateway process, with a cap."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager


class ConnectionLimits:
    """Counts each principal's open subscriptions; ``max_per_principal`` 0 means no cap."""

    def __init__(self, max_per_principal: int) -> None:
        self.max_per_principal = max_per_principal
        self._open: Counter[str] = Counter()

    def full(self, principal: str) -> bool:
        """True when ``principal`` may not open another connection now."""
        return 0 < self.max_per_principal <= self._open[principal]

    def open_count(self, principal: str) -> int:
        """How many connections ``principal`` holds."""
        return self._open[principal]

    @contextmanager
    def hold(self, principal: str) -> Iterator[bool]:
        """Count one connection for the duration of the block; yields False (and counts nothing) when full."""
        if self.full(principal):
            yield False
            return
        self._open[principal] += 1
        try:
            yield True
        finally:
            self._open[principal] -= 1
            if not self._open[principal]:
                del self._open[principal]
