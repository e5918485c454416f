"""Token buckets in the real Redis Cluster: bursts, refill, all-or-nothing charges, refunds,
impossible costs."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from storage.rate_limit import Charge, Limit, RedisRateLimiter
from storage.redis_store import RedisStreamStore

pytestmark = pytest.mark.integration


@pytest.fixture
def limiter(store: RedisStreamStore) -> RedisRateLimiter:
    return store.rate_limiter


@pytest.fixture
def scope() -> str:
    return f"principal:{uuid.uuid4().hex[:10]}"


async def test_burst_is_admitted_then_refused_with_time_until_room(
        limiter: RedisRateLimiter, scope: str) -> None:
    messages = Charge("messages", Limit(rate_per_s=10, burst=5), cost=1)
    verdicts = [await limiter.acquire(scope, [messages]) for _ in range(6)]
    assert [v.allowed for v in verdicts] == [True] * 5 + [False]
    assert [v.remaining for v in verdicts[:5]] == [4, 3, 2, 1, 0]
    assert 0.05 < verdicts[5].retry_after_s <= 0.1
    await asyncio.sleep(verdicts[5].retry_after_s + 0.01)
    assert (await limiter.acquire(scope, [messages])).allowed


async def test_buckets_of_one_scope_are_charged_all_or_nothing(limiter: RedisRateLimiter,
                                                               scope: str) -> None:
    messages = Limit(rate_per_s=1, burst=1000)
    size = Limit(rate_per_s=1, burst=100)
    assert (await limiter.acquire(scope, [Charge("messages", messages, 10),
                                          Charge("bytes", size, 80)])).allowed
    refused = await limiter.acquire(scope, [Charge("messages", messages, 10),
                                            Charge("bytes", size, 80)])
    assert not refused.allowed
    left = await limiter.acquire(scope, [Charge("messages", messages, 990)])
    assert left.allowed, "the refused request must not have taken message tokens"
    assert left.remaining == 0


async def test_a_refund_gives_the_tokens_back(limiter: RedisRateLimiter, scope: str) -> None:
    charge = Charge("messages", Limit(rate_per_s=1, burst=3), cost=3)
    assert (await limiter.acquire(scope, [charge])).allowed
    assert not (await limiter.acquire(scope, [charge])).allowed
    await limiter.refund(scope, [charge])
    assert (await limiter.acquire(scope, [charge])).allowed


async def test_a_cost_beyond_the_burst_is_never_admitted(limiter: RedisRateLimiter,
                                                         scope: str) -> None:
    verdict = await limiter.acquire(scope, [Charge("bytes", Limit(rate_per_s=1000, burst=100),
                                                   cost=101)])
    assert not verdict.allowed
    assert verdict.never


async def test_scopes_do_not_share_buckets(limiter: RedisRateLimiter, scope: str) -> None:
    charge = Charge("messages", Limit(rate_per_s=1, burst=1), cost=1)
    assert (await limiter.acquire(scope, [charge])).allowed
    assert (await limiter.acquire(scope + "-other", [charge])).allowed
    assert not (await limiter.acquire(scope, [charge])).allowed


async def test_concurrent_charges_never_admit_more_than_the_burst(limiter: RedisRateLimiter,
                                                                  scope: str) -> None:
    charge = Charge("messages", Limit(rate_per_s=0.001, burst=50), cost=1)
    verdicts = await asyncio.gather(*(limiter.acquire(scope, [charge]) for _ in range(200)))
    assert sum(v.allowed for v in verdicts) == 50
