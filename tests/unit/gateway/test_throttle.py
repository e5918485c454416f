"""Throttle: principal then topic buckets, refunds on refusal, RateLimit headers, impossible
requests, read and subscribe buckets, per-principal overrides."""

from __future__ import annotations

from gateway.auth.limits import LimitOverride, LimitOverrides
from gateway.auth.principal import Principal
from gateway.settings import settings_from_env
from gateway.throttle import RateLimits, Throttle
from storage.rate_limit import Limit
from tests.unit.gateway.fake_limiter import FakeLimiter

ALICE, BOB = Principal("alice", "api_key"), Principal("bob", "api_key")


async def test_no_limit_admits_everything_without_headers() -> None:
    throttle = Throttle(FakeLimiter(), RateLimits())
    assert not throttle.enabled
    decision = await throttle.admit_publish(ALICE, "orders", 10_000, 10**9)
    assert decision.allowed
    assert decision.headers == {}


async def test_admitted_requests_report_the_tightest_bucket() -> None:
    throttle = Throttle(
        FakeLimiter(), RateLimits(principal_messages_per_s=100, topic_bytes_per_s=1000)
    )
    decision = await throttle.admit_publish(ALICE, "orders", 10, 900)
    assert decision.allowed
    assert decision.headers["RateLimit"] == "remaining=90, reset=2"
    assert '"messages";q=100;w=1' in decision.headers["RateLimit-Policy"]
    assert '"bytes";q=1000;w=1' in decision.headers["RateLimit-Policy"]


async def test_topic_refusal_refunds_the_principal() -> None:
    limiter = FakeLimiter()
    throttle = Throttle(limiter, RateLimits(principal_messages_per_s=100, topic_messages_per_s=15))
    assert (await throttle.admit_publish(ALICE, "orders", 10, 0)).allowed
    refused = await throttle.admit_publish(ALICE, "orders", 10, 0)
    assert not refused.allowed
    assert refused.retry_after_s == 1
    assert refused.reason == "topic rate limit exceeded"
    assert refused.headers["RateLimit"] == "remaining=0, reset=1"
    assert limiter.refunds == ["principal:alice"]
    assert limiter.left["principal:alice/messages"] == 90


async def test_principals_are_limited_separately() -> None:
    throttle = Throttle(FakeLimiter(), RateLimits(principal_messages_per_s=5))
    assert (await throttle.admit_publish(ALICE, "t", 5, 0)).allowed
    assert not (await throttle.admit_publish(ALICE, "t", 1, 0)).allowed
    assert (await throttle.admit_publish(BOB, "t", 5, 0)).allowed


async def test_request_over_any_burst_is_refused_for_good() -> None:
    throttle = Throttle(FakeLimiter(), RateLimits(principal_bytes_per_s=1000, burst_s=2))
    refused = await throttle.admit_publish(ALICE, "t", 1, 2001)
    assert not refused.allowed
    assert refused.retry_after_s == 0
    assert "larger than the principal burst" in refused.reason


def test_rate_limits_come_from_the_environment() -> None:
    settings = settings_from_env({"STREAMGATE_RATE_LIMIT_TOPIC_BYTES_PER_S": "1048576",
                                  "STREAMGATE_RATE_LIMIT_BURST_S": "2"})
    limits = RateLimits.from_settings(settings)
    assert limits.topic_bytes_per_s == 1048576.0
    assert limits.principal_messages_per_s is None
    assert limits.enabled
    assert limits.limit(limits.topic_bytes_per_s) == Limit(1048576.0, 2097152.0)
    assert not RateLimits.from_settings(settings_from_env({})).enabled


async def test_reads_and_subscribes_have_own_buckets() -> None:
    limiter = FakeLimiter()
    throttle = Throttle(limiter, RateLimits(principal_reads_per_s=2, principal_subscribes_per_s=1))
    assert throttle.enabled
    assert [(await throttle.admit_read(ALICE)).allowed for _ in range(3)] == [True, True, False]
    assert (await throttle.admit_subscribe(ALICE)).allowed, (
        "subscribes are not charged to the reads bucket"
    )
    refused = await throttle.admit_subscribe(ALICE)
    assert (refused.allowed, refused.limit, refused.retry_after_s) == (False, "principal", 1)
    assert refused.reason == "principal subscribes rate limit exceeded"
    assert refused.headers["RateLimit-Policy"] == '"subscribes";q=1;w=1'
    assert refused.headers["RateLimit"] == "remaining=0, reset=1"
    assert (await throttle.admit_read(BOB)).allowed
    assert set(limiter.left) == {
        "principal:alice/reads", "principal:alice/subscribes", "principal:bob/reads"
    }


async def test_unlimited_reads_charge_nothing() -> None:
    limiter = FakeLimiter()
    throttle = Throttle(limiter, RateLimits(principal_messages_per_s=1))
    decision = await throttle.admit_read(ALICE)
    assert decision.allowed
    assert decision.headers == {}
    assert limiter.left == {}


OVERRIDES = LimitOverrides([
    LimitOverride(("claim:tier=gold",), {"messages_per_s": 100, "reads_per_s": None}),
    LimitOverride(("alice",), {"messages_per_s": 1}),
    LimitOverride(("*",), {"subscribes_per_s": 3}),
])


def test_first_override_replaces_only_its_rates() -> None:
    throttle = Throttle(
        FakeLimiter(),
        RateLimits(principal_messages_per_s=10, principal_reads_per_s=5, topic_messages_per_s=50),
        OVERRIDES,
    )
    gold_alice = Principal("alice", "jwt", {"tier": "gold"})
    assert throttle.limits_for(gold_alice) == RateLimits(
        principal_messages_per_s=100, principal_reads_per_s=None, topic_messages_per_s=50
    )
    assert throttle.limits_for(ALICE) == RateLimits(
        principal_messages_per_s=1, principal_reads_per_s=5, topic_messages_per_s=50
    )
    assert throttle.limits_for(BOB) == RateLimits(
        principal_messages_per_s=10, principal_reads_per_s=5, topic_messages_per_s=50,
        principal_subscribes_per_s=3
    )


async def test_an_overridden_principal_is_charged_at_its_own_rate() -> None:
    throttle = Throttle(FakeLimiter(), RateLimits(principal_messages_per_s=10), OVERRIDES)
    assert (await throttle.admit_publish(ALICE, "t", 1, 0)).allowed
    refused = await throttle.admit_publish(ALICE, "t", 1, 0)
    assert (refused.allowed, refused.retry_after_s) == (False, 1)
    assert refused.headers["RateLimit-Policy"] == '"messages";q=1;w=1'
    admitted = await throttle.admit_publish(BOB, "t", 10, 0)
    assert admitted.allowed
    assert admitted.headers["RateLimit-Policy"] == '"messages";q=10;w=1'


def test_overrides_alone_enable_the_throttle() -> None:
    assert Throttle(FakeLimiter(), RateLimits(), OVERRIDES).enabled
    assert not Throttle(FakeLimiter(), RateLimits(),
                        LimitOverrides([LimitOverride(("*",), {"reads_per_s": None})])).enabled


def test_read_and_subscribe_limits_come_from_the_environment() -> None:
    settings = settings_from_env({"STREAMGATE_RATE_LIMIT_PRINCIPAL_READS_PER_S": "20",
                                  "STREAMGATE_RATE_LIMIT_PRINCIPAL_SUBSCRIBES_PER_S": "0.5"})
    limits = RateLimits.from_settings(settings)
    assert (limits.principal_reads_per_s, limits.principal_subscribes_per_s) == (20.0, 0.5)
    assert limits.enabled
