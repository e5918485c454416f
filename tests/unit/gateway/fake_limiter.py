"""A rate limiter whose buckets never refill, for the gateway unit tests that throttle."""

from __future__ import annotations

from collections.abc import Sequence

from storage.rate_limit import Charge, Verdict


class FakeLimiter:
    """Buckets that never refill: scope/bucket -> units left (starting at the burst)."""

    def __init__(self) -> None:
        self.left: dict[str, float] = {}
        self.refunds: list[str] = []

    async def acquire(self, scope: str, charges: Sequence[Charge]) -> Verdict:
        for charge in charges:
            if charge.cost > charge.limit.burst:
                return Verdict(False, never=True)
        lefts = [self.left.get(f"{scope}/{c.bucket}", c.limit.burst) - c.cost for c in charges]
        if min(lefts) < 0:
            return Verdict(False, retry_after_s=0.25)
        for charge, left in zip(charges, lefts, strict=True):
            self.left[f"{scope}/{charge.bucket}"] = left
        return Verdict(True, remaining=int(min(lefts)), reset_s=1.5)

    async def refund(self, scope: str, charges: Sequence[Charge]) -> None:
        self.refunds.append(scope)
        for charge in charges:
            self.left[f"{scope}/{charge.bucket}"] += charge.cost
