"""Purging a partition: every entry and scheduled message goes at one cut, and every consumer
group's position moves to that cut, so no group waits for, or is redelivered, what was purged."""

from __future__ import annotations

from typing import Any

from storage.cluster import ClusterRouter
from storage.group_replies import is_missing_group
from storage.key_index import KeyHistory
from storage.keys import compaction_key, delayed_data_key, delayed_key, log_key, slot_of
from storage.models import PurgeReport
from storage.wire.errors import ResponseError
from storage.wire.lanes import NodeLanes
from storage.wire.scripts import LuaScript, run_script

# KEYS: the log, the schedule (sorted set and data hash), the compaction set. Reply: entries
# removed, the cut (the stream's last id, false when it never had one), scheduled messages removed,
# then the names of the groups moved to the cut.
_PURGE_LUA = """
local function field(flat, name)
  for i = 1, #flat, 2 do
    if flat[i] == name then return flat[i + 1] end
  end
  return false
end
local log = KEYS[1]
local removed, cut = 0, false
local groups = {}
if redis.call('EXISTS', log) == 1 then
  removed = redis.call('XTRIM', log, 'MAXLEN', 0)
  local info = redis.call('XINFO', 'STREAM', log)
  cut = field(info, 'last-generated-id')
  local added = field(info, 'entries-added')
  for _, group in ipairs(redis.call('XINFO', 'GROUPS', log)) do
    local name = field(group, 'name')
    redis.call('XGROUP', 'SETID', log, name, cut, 'ENTRIESREAD', added)
    groups[#groups + 1] = name
  end
end
local scheduled = redis.call('ZCARD', KEYS[2])
redis.call('DEL', KEYS[2], KEYS[3], KEYS[4])
local out = {removed, cut, scheduled}
for _, name in ipairs(groups) do out[#out + 1] = name end
return out
"""

# KEYS[1]: the log; ARGV: the group, the cut, the page size. Acks a page of the group's pending
# entries up to the cut; how many.
_ACK_BELOW_LUA = """
local rows = redis.call('XPENDING', KEYS[1], ARGV[1], '-', ARGV[2], tonumber(ARGV[3]))
if #rows == 0 then return 0 end
local ids = {}
for i, row in ipairs(rows) do ids[i] = row[1] end
redis.call('XACK', KEYS[1], ARGV[1], unpack(ids))
return #rows
"""

PURGE_SCRIPT = LuaScript.of(_PURGE_LUA)
ACK_BELOW_SCRIPT = LuaScript.of(_ACK_BELOW_LUA)
ACK_PAGE = 1000


class Purge:
    """Purges partitions on the cluster, sharing a RedisStreamStore's router and lanes.

    The cut is atomic (one script: trim, groups' positions, the schedule); the groups' pending
    entries below it are acked afterwards in pages, as reads of deleted pending entries already skip
    them.
    """

    def __init__(self, router: ClusterRouter, lanes: NodeLanes) -> None:
        self._router = router
        self._lanes = lanes

    async def partition(self, topic: str, partition: int) -> PurgeReport:
        """Remove every entry and scheduled message of the partition; the groups follow."""
        slot = slot_of(topic, partition)
        log = log_key(topic, partition)
        keys = [log, delayed_key(topic, partition), delayed_data_key(topic, partition),
                compaction_key(topic, partition)]
        reply = await self._script("purge", slot, PURGE_SCRIPT, keys, [])
        removed, cut, scheduled = int(reply[0]), _text(reply[1]), int(reply[2])
        groups = [_text(name) or "" for name in reply[3:]]
        if cut is not None:
            for group in groups:
                await self._ack_below(slot, log, group, cut)
        await KeyHistory(self._router, self._lanes).sweep(topic, partition)
        return PurgeReport(partition, removed, scheduled, cut, tuple(groups))

    async def _ack_below(self, slot: int, log: str, group: str, cut: str) -> None:
        try:
            while int(await self._script("purge_acks", slot, ACK_BELOW_SCRIPT, [log],
                                         [group, cut, ACK_PAGE])) == ACK_PAGE:
                pass
        except ResponseError as exc:
            if not is_missing_group(exc):  # a group destroyed meanwhile has nothing to ack
                raise

    async def _script(self, what: str, slot: int, script: LuaScript, keys: list[str],
                      args: list[Any]) -> Any:
        async def run() -> Any:
            return await run_script(self._lanes, self._router.node_for_slot(slot), script, keys,
                                    args)

        return await self._router.call(what, self._router.settings.write_deadline_s, run)


def _text(raw: Any) -> str | None:
    if raw is None or raw is False:
        return None
    return raw.decode() if isinstance(raw, bytes) else str(raw)
