"""Publish rate limits per principal and per topic (messages/s and bytes/s), global across gateway replicas.

The buckets live in Redis (``storage.rate_limit``): a principal's two buckets are charged together, then the
topic's two; when the topic refuses, the principal's charge is refunded, so a refused request costs nothing.
A refusal becomes 429 with ``Retry-After``; every limited response carries the IETF RateLimit headers
(``RateLimit-Policy`` and ``RateLimit``: the tightest bucket's remaining units and seconds to full).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

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


@dataclass(frozen=True, slots=True)
class RateLimits:
    """The configured limits; None = unlimited. Bursts are ``burst_s`` seconds' worth of the rate."""

    principal_messages_per_s: float | None = None
    principal_bytes_per_s: float | None = None
    topic_messages_per_s: float | None = None
    topic_bytes_per_s: float | None = None
    burst_s: float = 1.0

    @classmethod
    def from_settings(cls, settings: GatewaySettings) -> RateLimits:
        """The rate_limit_* settings."""
        return cls(settings.rate_limit_principal_messages_per_s, settings.rate_limit_principal_bytes_per_s,
                   settings.rate_limit_topic_messages_per_s, settings.rate_limit_topic_bytes_per_s,
                   settings.rate_limit_burst_s)

    @property
    def enabled(self) -> bool:
        """True when any limit is set."""
        return any(rate is not None for rate in (self.principal_messages_per_s, self.principal_bytes_per_s,
                                                 self.topic_messages_per_s, self.topic_bytes_per_s))

    def limit(self, rate_per_s: float | None) -> Limit | None:
        """The bucket for a configured rate."""
        return None if rate_per_s is None else Limit(rate_per_s, max(1.0, rate_per_s * self.burst_s))


@dataclass(frozen=True, slots=True)
class ThrottleDecision:
    """Admitted or not, with the headers to send either way."""

    allowed: bool
    retry_after_s: int
    headers: Mapping[str, str]
    reason: str = ""
    limit: str = ""  # "principal" or "topic" when refused


class PublishThrottle:
    """Charges a publish request against its principal's and its topic's buckets."""

    def __init__(self, limiter: RateLimiter, limits: RateLimits) -> None:
        self._limiter = limiter
        self._limits = limits

    @property
    def enabled(self) -> bool:
        """False when no limit is configured (then ``admit`` is never needed)."""
        return self._limits.enabled

    async def admit(self, principal: str, topic: str, messages: int, size_bytes: int) -> ThrottleDecision:
        """Charge ``messages`` and ``size_bytes``; refused requests take nothing from any bucket."""
        limits = self._limits
        scopes = [(f"principal:{principal}", "principal", self._charges(limits.principal_messages_per_s,
                                                                       limits.principal_bytes_per_s,
                                                                       messages, size_bytes)),
                  (f"topic:{topic}", "topic", self._charges(limits.topic_messages_per_s, limits.topic_bytes_per_s,
                                                             messages, size_bytes))]
        taken: list[tuple[str, list[Charge]]] = []
        verdicts: list[tuple[Verdict, list[Charge]]] = []
        for scope, what, charges in scopes:
            if not charges:
                continue
            verdict = await self._limiter.acquire(scope, charges)
            if not verdict.allowed:
                for earlier_scope, earlier in taken:
                    await self._limiter.refund(earlier_scope, earlier)
                return _refused(verdict, charges, what)
            taken.append((scope, charges))
            verdicts.append((verdict, charges))
        return _admitted(verdicts)

    def _charges(self, messages_per_s: float | None, bytes_per_s: float | None, messages: int,
                 size_bytes: int) -> list[Charge]:
        out = []
        if (limit := self._limits.limit(messages_per_s)) is not None:
            out.append(Charge("messages", limit, messages))
        if (limit := self._limits.limit(bytes_per_s)) is not None:
            out.append(Charge("bytes", limit, size_bytes))
        return out


def _policy(charges: Sequence[Charge]) -> str:
    return ", ".join(f'"{c.bucket}";q={int(c.limit.burst)};w={max(1, round(c.limit.burst / c.limit.rate_per_s))}'
                     for c in charges)


def _admitted(verdicts: Sequence[tuple[Verdict, list[Charge]]]) -> ThrottleDecision:
    if not verdicts:
        return ThrottleDecision(True, 0, {})
    tightest = min((verdict for verdict, _ in verdicts), key=lambda verdict: verdict.remaining)
    headers = {"RateLimit-Policy": _policy([c for _, cs in verdicts for c in cs]),
               "RateLimit": f"remaining={tightest.remaining}, reset={math.ceil(tightest.reset_s)}"}
    return ThrottleDecision(True, 0, headers)


def _refused(verdict: Verdict, charges: Sequence[Charge], what: str) -> ThrottleDecision:
    headers = {"RateLimit-Policy": _policy(charges)}
    if verdict.never:
        return ThrottleDecision(False, 0, headers, f"the request is larger than the {what} burst allows at all",
                                what)
    retry_after_s = max(1, math.ceil(verdict.retry_after_s))
    headers["RateLimit"] = f"remaining=0, reset={retry_after_s}"
    return ThrottleDecision(False, retry_after_s, headers, f"{what} rate limit exceeded", what)


__all__ = ["PublishThrottle", "RateLimiter", "RateLimits", "ThrottleDecision"]
