"""Rate limits, global across gateway replicas: publish per principal and per topic (messages/s and
bytes/s), reads (replay and pull requests/s) and new WebSocket subscriptions (/s) per principal.

The buckets live in Redis (``storage.rate_limit``): a principal's two publish buckets are charged
together, then the topic's two; when the topic refuses, the principal's charge is refunded, so a
refused request costs nothing. A refusal becomes 429 with ``Retry-After``; every limited response
carries the IETF RateLimit headers (``RateLimit-Policy`` and ``RateLimit``: the tightest bucket's
remaining units and seconds to full). Per-principal overrides come from the auth config
(``gateway.auth.limits``).
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from gateway.auth.limits import LimitOverrides
from gateway.auth.principal import Principal
from gateway.settings import GatewaySettings
from storage.rate_limit import Charge, Limit, Verdict


class RateLimiter(Protocol):
    """Shared token buckets (``storage.rate_limit.RedisRateLimiter``)."""

    async def acquire(self, scope: str, charges: Sequence[Charge]) -> Verdict:
        """Charge every bucket of a scope at once, or none."""
        ...

    async def refund(self, scope: str, charges: Sequence[Charge]) -> None:
        """Give back what acquire took."""
        ...


class RateAction(enum.Enum):
    """What a rate limit is charged for (the ``action`` label of
    ``streamgate_ratelimit_refused_total``)."""

    PUBLISH = "publish"
    READ = "read"  # a replay or pull request
    SUBSCRIBE = "subscribe"  # a new WebSocket subscription


@dataclass(frozen=True, slots=True)
class RateLimits:
    """The configured limits; None = unlimited. Bursts are ``burst_s`` seconds' worth of the
    rate."""

    principal_messages_per_s: float | None = None
    principal_bytes_per_s: float | None = None
    topic_messages_per_s: float | None = None
    topic_bytes_per_s: float | None = None
    principal_reads_per_s: float | None = None
    principal_subscribes_per_s: float | None = None
    burst_s: float = 1.0

    @classmethod
    def from_settings(cls, settings: GatewaySettings) -> RateLimits:
        """The rate_limit_* settings."""
        return cls(settings.rate_limit_principal_messages_per_s,
                   settings.rate_limit_principal_bytes_per_s,
                   settings.rate_limit_topic_messages_per_s, settings.rate_limit_topic_bytes_per_s,
                   settings.rate_limit_principal_reads_per_s,
                   settings.rate_limit_principal_subscribes_per_s, settings.rate_limit_burst_s)

    @property
    def enabled(self) -> bool:
        """True when any limit is set."""
        return any(rate is not None
                   for rate in (self.principal_messages_per_s, self.principal_bytes_per_s,
                                self.topic_messages_per_s, self.topic_bytes_per_s,
                                self.principal_reads_per_s, self.principal_subscribes_per_s))

    def overridden(self, rates: Mapping[str, float | None]) -> RateLimits:
        """These limits with a principal's overrides (``messages_per_s`` replaces
        ``principal_messages_per_s``...)."""
        if not rates:
            return self
        return dataclasses.replace(
            self,
            principal_messages_per_s=rates.get("messages_per_s", self.principal_messages_per_s),
            principal_bytes_per_s=rates.get("bytes_per_s", self.principal_bytes_per_s),
            principal_reads_per_s=rates.get("reads_per_s", self.principal_reads_per_s),
            principal_subscribes_per_s=rates.get("subscribes_per_s",
                                                 self.principal_subscribes_per_s))

    def limit(self, rate_per_s: float | None) -> Limit | None:
        """The bucket for a configured rate."""
        return (None if rate_per_s is None
                else Limit(rate_per_s, max(1.0, rate_per_s * self.burst_s)))


@dataclass(frozen=True, slots=True)
class ThrottleDecision:
    """Admitted or not, with the headers to send either way."""

    allowed: bool
    retry_after_s: int
    headers: Mapping[str, str]
    reason: str = ""
    limit: str = ""  # "principal" or "topic" when refused


class Throttle:
    """Charges requests against their principal's (and, for publish, their topic's) buckets.

    The global limits come from the settings; a principal selected by a ``[[limits]]`` entry of the
    auth config gets that entry's rates instead. Buckets are keyed by principal name and bucket, not
    by rate: the GCRA script takes the rate with every charge, so a changed limit applies to the
    same bucket at once.
    """

    def __init__(self, limiter: RateLimiter, limits: RateLimits,
                 overrides: LimitOverrides | None = None) -> None:
        self._limiter = limiter
        self._limits = limits
        self._overrides = overrides or LimitOverrides()

    @property
    def enabled(self) -> bool:
        """False when no limit is configured anywhere (then no request needs charging)."""
        return self._limits.enabled or self._overrides.sets_any_rate

    def limits_for(self, principal: Principal) -> RateLimits:
        """The limits that apply to ``principal``: its override's rates, else the global ones."""
        return self._limits.overridden(self._overrides.rates_for(principal))

    async def admit_publish(self, principal: Principal, topic: str, messages: int,
                            size_bytes: int) -> ThrottleDecision:
        """Charge ``messages`` and ``size_bytes``; refused requests take nothing from any bucket."""
        limits = self.limits_for(principal)
        scopes = [(f"principal:{principal.name}", "principal",
                   self._charges(limits, limits.principal_messages_per_s,
                                 limits.principal_bytes_per_s, messages, size_bytes)),
                  (f"topic:{topic}", "topic", self._charges(limits, limits.topic_messages_per_s,
                                                             limits.topic_bytes_per_s, messages,
                                                             size_bytes))]
        taken: list[tuple[str, list[Charge]]] = []
        verdicts: list[tuple[Verdict, list[Charge]]] = []
        for scope, what, charges in scopes:
            if not charges:
                continue
            verdict = await self._limiter.acquire(scope, charges)
            if not verdict.allowed:
                for earlier_scope, earlier in taken:
                    await self._limiter.refund(earlier_scope, earlier)
                return _refused(verdict, charges, what, "rate limit exceeded")
            taken.append((scope, charges))
            verdicts.append((verdict, charges))
        return _admitted(verdicts)

    async def admit_read(self, principal: Principal) -> ThrottleDecision:
        """Charge one replay or pull request to the principal's ``reads`` bucket."""
        return await self._admit_one(principal, "reads",
                                     self.limits_for(principal).principal_reads_per_s)

    async def admit_subscribe(self, principal: Principal) -> ThrottleDecision:
        """Charge one new WebSocket subscription to the principal's ``subscribes`` bucket."""
        return await self._admit_one(principal, "subscribes",
                                     self.limits_for(principal).principal_subscribes_per_s)

    async def _admit_one(self, principal: Principal, bucket: str,
                         rate_per_s: float | None) -> ThrottleDecision:
        limit = self._limits.limit(rate_per_s)
        if limit is None:
            return ThrottleDecision(True, 0, {})
        charges = [Charge(bucket, limit, 1)]
        verdict = await self._limiter.acquire(f"principal:{principal.name}", charges)
        if not verdict.allowed:
            return _refused(verdict, charges, "principal", f"{bucket} rate limit exceeded")
        return _admitted([(verdict, charges)])

    @staticmethod
    def _charges(limits: RateLimits, messages_per_s: float | None, bytes_per_s: float | None,
                 messages: int, size_bytes: int) -> list[Charge]:
        out = []
        if (limit := limits.limit(messages_per_s)) is not None:
            out.append(Charge("messages", limit, messages))
        if (limit := limits.limit(bytes_per_s)) is not None:
            out.append(Charge("bytes", limit, size_bytes))
        return out


def _policy(charges: Sequence[Charge]) -> str:
    return ", ".join(
        f'"{c.bucket}";q={int(c.limit.burst)};w={max(1, round(c.limit.burst / c.limit.rate_per_s))}'
        for c in charges
    )


def _admitted(verdicts: Sequence[tuple[Verdict, list[Charge]]]) -> ThrottleDecision:
    if not verdicts:
        return ThrottleDecision(True, 0, {})
    tightest = min((verdict for verdict, _ in verdicts), key=lambda verdict: verdict.remaining)
    headers = {"RateLimit-Policy": _policy([c for _, cs in verdicts for c in cs]),
               "RateLimit": f"remaining={tightest.remaining}, reset={math.ceil(tightest.reset_s)}"}
    return ThrottleDecision(True, 0, headers)


def _refused(verdict: Verdict, charges: Sequence[Charge], what: str,
             exceeded: str) -> ThrottleDecision:
    headers = {"RateLimit-Policy": _policy(charges)}
    if verdict.never:
        return ThrottleDecision(False, 0, headers,
                                f"the request is larger than the {what} burst allows at all", what)
    retry_after_s = max(1, math.ceil(verdict.retry_after_s))
    headers["RateLimit"] = f"remaining=0, reset={retry_after_s}"
    return ThrottleDecision(False, retry_after_s, headers, f"{what} {exceeded}", what)


__all__ = ["RateAction", "RateLimiter", "RateLimits", "Throttle", "ThrottleDecision"]
