"""Open WebSocket connections per principal on this gateway process, with a cap; and upgraded
connections not authenticated yet, with a cap of their own (nobody's quota holds them)."""

from __future__ import annotations

from collections import Counter


class ConnectionLimits:
    """Counts each principal's open subscriptions, and the sockets awaiting their auth frame; a cap
    of 0: none."""

    def __init__(self, max_per_principal: int, max_unauthenticated: int = 0) -> None:
        self.max_per_principal = max_per_principal
        self.max_unauthenticated = max_unauthenticated
        self.unauthenticated = 0
        self._open: Counter[str] = Counter()

    def acquire_unauthenticated(self) -> bool:
        """Count one more socket awaiting its auth frame; False (nothing counted) when the cap is
        reached."""
        if 0 < self.max_unauthenticated <= self.unauthenticated:
            return False
        self.unauthenticated += 1
        return True

    def release_unauthenticated(self) -> None:
        """Forget one socket counted by ``acquire_unauthenticated`` (authenticated, refused or
        gone)."""
        self.unauthenticated -= 1

    def full(self, principal: str) -> bool:
        """True when ``principal`` may not open another connection now."""
        return 0 < self.max_per_principal <= self._open[principal]

    def open_count(self, principal: str) -> int:
        """How many connections ``principal`` holds."""
        return self._open[principal]

    def acquire(self, principal: str) -> bool:
        """Count one more connection of ``principal``; False (and nothing counted) when the cap is
        reached."""
        if self.full(principal):
            return False
        self._open[principal] += 1
        return True

    def release(self, principal: str) -> None:
        """Forget one connection counted by ``acquire``."""
        self._open[principal] -= 1
        if self._open[principal] <= 0:
            del self._open[principal]
