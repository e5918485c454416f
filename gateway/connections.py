"""Open WebSocket connections per principal on this gateway process, with a cap."""

from __future__ import annotations

from collections import Counter


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

    def acquire(self, principal: str) -> bool:
        """Count one more connection of ``principal``; False (and nothing counted) when the cap is reached."""
        if self.full(principal):
            return False
        self._open[principal] += 1
        return True

    def release(self, principal: str) -> None:
        """Forget one connection counted by ``acquire``."""
        self._open[principal] -= 1
        if self._open[principal] <= 0:
            del self._open[principal]
