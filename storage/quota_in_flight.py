"""In-flight counts shared between gateways: one small hash per subject (an opaque string), field =
a gateway's node id, value = its count and when Redis took it; stale fields are ignored and pruned.
"""

from __future__ import annotations

import hashlib

from storage.cluster import ClusterRouter
from storage.keys import PREFIX, slot_of_key
from storage.wire.lanes import NodeLanes
from storage.wire.scripts import LuaScript, run_script

# KEYS: the subject's hash. ARGV: node id, its count, key ttl ms, stale ms. Returns the sum of the
# other nodes' fresh counts. Redis's clock stamps every field, so gateways' clocks never disagree.
# allow-oom: a refused share would leave every gateway blind to the others' deliveries.
SHARE = LuaScript.of("""#!lua flags=allow-oom
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local stale = tonumber(ARGV[4])
local fields = redis.call('HGETALL', KEYS[1])
local others = 0
for i = 1, #fields, 2 do
  if fields[i] ~= ARGV[1] then
    local count, at = string.match(fields[i + 1], '^(-?%d+):(%d+)$')
    if count == nil or now - tonumber(at) > stale then
      redis.call('HDEL', KEYS[1], fields[i])
    else
      others = others + tonumber(count)
    end
  end
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2] .. ':' .. now)
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return others
""")


def in_flight_key(subject: str) -> str:
    """The hash of a subject's per-gateway counts (its hash tag, a digest of the subject, is the
    one of its retained-bytes ledger: one slot per subject)."""
    digest = hashlib.sha256(subject.encode()).hexdigest()
    return f"{PREFIX}:{{quota:{digest}}}:in_flight"


class RedisInFlightBoard:
    """Shares this gateway's in-flight count per subject and reads the other gateways' sum."""

    def __init__(self, router: ClusterRouter, lanes: NodeLanes) -> None:
        self._router, self._lanes = router, lanes

    async def share(self, subject: str, node_id: str, count: int, stale_ms: int) -> int:
        """Write ``count`` as ``node_id``'s and return the sum the other gateways wrote within
        ``stale_ms`` (the hash is kept a few times that long unless written again)."""
        key = in_flight_key(subject)
        slot = slot_of_key(key)
        args = [node_id.encode(), str(count).encode(), str(3 * stale_ms).encode(),
                str(stale_ms).encode()]

        async def op() -> int:
            return int(await run_script(self._lanes, self._router.node_for_slot(slot), SHARE,
                                    [key], args))

        return await self._router.call("share_in_flight", self._router.settings.write_deadline_s,
                                       op)
