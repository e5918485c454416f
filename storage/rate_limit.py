"""Token buckets shared by every gateway replica, kept in Redis (GCRA: one timestamp per bucket)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from storage.cluster import ClusterRouter
from storage.keys import PREFIX, slot_of_key
from storage.wire.lanes import NodeLanes
from storage.wire.scripts import LuaScript, run_script

US_PER_S = 1_000_000

# KEYS: the buckets. ARGV: per bucket (interval_us, tolerance_us, cost), then the refund flag.
# Returns {allowed, retry_after_us (-1 = never), min remaining units, max reset_us}. It runs on a
# node at its maxmemory too (allow-oom): a bucket is one small expiring key, and a refused bucket
# would refuse the reads that go on when publishes cannot.
GCRA = LuaScript.of("""#!lua flags=allow-oom
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local refund = ARGV[#ARGV] == '1'
local tats, allowed, retry, never, remaining, reset = {}, 1, 0, 0, math.huge, 0
for i, key in ipairs(KEYS) do
  local interval = tonumber(ARGV[3 * i - 2])
  local tolerance = tonumber(ARGV[3 * i - 1])
  local cost = tonumber(ARGV[3 * i])
  local tat = tonumber(redis.call('GET', key)) or now
  if tat < now then tat = now end
  if refund then
    tats[i] = math.max(now, tat - interval * cost)
  else
    local new_tat = tat + interval * cost
    local wait = new_tat - tolerance - now
    if interval * cost > tolerance then
      allowed, never = 0, 1
    elseif wait > 0 then
      allowed = 0
      if wait > retry then retry = wait end
    end
    tats[i] = new_tat
    local left = math.floor((tolerance - (new_tat - now)) / interval)
    if left < remaining then remaining = left end
  end
end
if allowed == 0 then
  if never == 1 then retry = -1 end
  return {0, math.ceil(retry), 0, 0}
end
for i, key in ipairs(KEYS) do
  local ahead = tats[i] - now
  if ahead > 0 then
    redis.call('SET', key, string.format('%.0f', tats[i]), 'PX', math.ceil(ahead / 1000) + 1)
  else
    redis.call('DEL', key)
  end
  if ahead > reset then reset = ahead end
end
if remaining == math.huge then remaining = 0 end
return {1, 0, math.max(remaining, 0), math.ceil(reset)}
""")


@dataclass(frozen=True, slots=True)
class Limit:
    """``rate_per_s`` units per second on average, up to ``burst`` units at once."""

    rate_per_s: float
    burst: float

    def __post_init__(self) -> None:
        if self.rate_per_s <= 0 or self.burst <= 0:
            raise ValueError(f"a limit needs a positive rate and burst, got {self}")


@dataclass(frozen=True, slots=True)
class Charge:
    """``cost`` units against the bucket ``bucket`` (e.g. "messages", "bytes") limited by
    ``limit``."""

    bucket: str
    limit: Limit
    cost: float


@dataclass(frozen=True, slots=True)
class Verdict:
    """Whether the charges were admitted; when not, how long until they would be (``never`` if they
    never fit).

    ``remaining`` is the fewest units left in any charged bucket, ``reset_s`` the time until every
    bucket is full again (both after this charge, for RateLimit headers).
    """

    allowed: bool
    retry_after_s: float = 0.0
    never: bool = False
    remaining: int = 0
    reset_s: float = 0.0


def bucket_key(scope: str, bucket: str) -> str:
    """The Redis key of one bucket; a scope's buckets share the hash tag ``{rl:<scope>}``."""
    return f"{PREFIX}:{{rl:{scope}}}:{bucket}"


class RedisRateLimiter:
    """Charges token buckets on the ClusterRouter of a RedisStreamStore
    (``RedisStreamStore.rate_limiter``).

    A bucket with ``rate_per_s`` r and ``burst`` b admits a cost c when c more units fit: its
    "theoretical arrival time" (TAT) moves forward by c/r per admitted cost, and a cost is refused
    while TAT + c/r would be more than b/r ahead of now. One Lua script charges every bucket of one
    scope (a principal, a topic) at once, all or nothing, reading the server's clock (``TIME``), so
    replicas with skewed clocks agree. The buckets of a scope share a hash tag, hence one slot;
    buckets of different scopes are charged one scope after another and a later refusal refunds the
    earlier scopes (``refund``), so a refused request costs nothing.

    A cost larger than a bucket's burst can never be admitted: the verdict says so (``never``)
    instead of naming a retry time.
    """

    def __init__(self, router: ClusterRouter, lanes: NodeLanes) -> None:
        self._router = router
        self._lanes = lanes
        self._settings = router.settings

    async def acquire(self, scope: str, charges: Sequence[Charge]) -> Verdict:
        """Charge every bucket of ``scope`` at once, or none of them."""
        if not charges:
            return Verdict(True, remaining=0)
        reply = await self._run("rate_limit", scope, charges, refund=False)
        allowed, retry_us, remaining, reset_us = (int(x) for x in reply)
        if allowed:
            return Verdict(True, remaining=remaining, reset_s=reset_us / US_PER_S)
        if retry_us < 0:
            return Verdict(False, never=True)
        return Verdict(False, retry_after_s=retry_us / US_PER_S)

    async def refund(self, scope: str, charges: Sequence[Charge]) -> None:
        """Give back what ``acquire`` took (a later scope refused the request)."""
        if charges:
            await self._run("rate_limit_refund", scope, charges, refund=True)

    async def _run(self, what: str, scope: str, charges: Sequence[Charge], *,
                   refund: bool) -> list[Any]:
        keys = [bucket_key(scope, charge.bucket) for charge in charges]
        args: list[Any] = []
        for charge in charges:
            interval_us = US_PER_S / charge.limit.rate_per_s
            args += [_number(interval_us), _number(interval_us * charge.limit.burst),
                     _number(charge.cost)]
        args.append("1" if refund else "0")

        slot = slot_of_key(keys[0])  # one hash tag: every bucket of a scope in one slot

        async def op() -> list[Any]:
            address = self._router.node_for_slot(slot)
            return list(await run_script(self._lanes, address, GCRA, keys, args))

        return await self._router.call(what, self._settings.write_deadline_s, op)


def _number(value: float) -> str:
    """A float as Lua's tonumber reads it, without exponent surprises for huge or tiny values."""
    if not math.isfinite(value):
        raise ValueError(f"not a finite number: {value}")
    return repr(float(value))


__all__ = ["GCRA", "Charge", "Limit", "RedisRateLimiter", "Verdict", "bucket_key"]
