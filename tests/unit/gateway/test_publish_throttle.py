"""PublishThrottle: principal then topic buckets, refunds on refusal, RateLimit headers, impossible requests."""

from __future__ import annotations

from collections.abc import Sequence

from gateway.settings import settings_from_env
from gateway.throttle import PublishThrottle, RateLimits
from storage.rate_limit import Charge, Limit, Verdict


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


async def test_no_configured_limit_admits_everything_without_headers() -> None:
    throttle = PublishThrottle(FakeLimiter(), RateLimits())
    assert not throttle.enabled
    decision = await throttle.admit("alice", "orders", 10_000, 10**9)
    assert decision.allowed
    assert decision.headers == {}


async def test_admitted_requests_report_the_tightest_bucket() -> None:
    throttle = PublishThrottle(FakeLimiter(), RateLimits(principal_messages_per_s=100, topic_bytes_per_s=1000))
    decision = await throttle.admit("alice", "orders", 10, 900)
    assert decision.allowed
    assert decision.headers["RateLimit"] == "remaining=90, reset=2"
    assert '"messages";q=100;w=1' in decision.headers["RateLimit-Policy"]
    assert '"bytes";q=1000;w=1' in decision.headers["RateLimit-Policy"]


async def test_a_topic_refusal_refunds_the_principal_and_says_when_to_retry() -> None:
    limiter = FakeLimiter()
    throttle = PublishThrottle(limiter, RateLimits(principal_messages_per_s=100, topic_messages_per_s=15))
    assert (await throttle.admit("alice", "orders", 10, 0)).allowed
    refused = await throttle.admit("alice", "orders", 10, 0)
    assert not refused.allowed
    assert refused.retry_after_s == 1
    assert refused.reason == "topic rate limit exceeded"
    assert refused.headers["RateLimit"] == "remaining=0, reset=1"
    assert limiter.refunds == ["principal:alice"]
    assert limiter.left["principal:alice/messages"] == 90


async def test_principals_are_limited_separately() -> None:
    throttle = PublishThrottle(FakeLimiter(), RateLimits(principal_messages_per_s=5))
    assert (await throttle.admit("alice", "t", 5, 0)).allowed
    assert not (await throttle.admit("alice", "t", 1, 0)).allowed
    assert (await throttle.admit("bob", "t", 5, 0)).allowed


async def test_a_request_larger_than_any_burst_is_refused_for_good() -> None:
    throttle = PublishThrottle(FakeLimiter(), RateLimits(principal_bytes_per_s=1000, burst_s=2))
    refused = await throttle.admit("alice", "t", 1, 2001)
    assert not refused.allowed
    assert refused.retry_after_s == 0
    assert "larger than the principal burst" in refused.reason


def test_rate_limits_come_from_the_environment_and_default_to_none() -> None:
    settings = settings_from_env({"STREAMGATE_RATE_LIMIT_TOPIC_BYTES_PER_S": "1048576",
                                  "STREAMGATE_RATE_LIMIT_BURST_S": "2"})
    limits = RateLimits.from_settings(settings)
    assert limits.topic_bytes_per_s == 1048576.0
    assert limits.principal_messages_per_s is None
    assert limits.enabled
    assert limits.limit(limits.topic_bytes_per_s) == Limit(1048576.0, 2097152.0)
    assert not RateLimits.from_settings(settings_from_env({})).enabled
