"""Per-key indexes: the Lua they share with the indexed append, a key's history read from its index
and the sweep that follows retention (``KeyHistory``)."""

from __future__ import annotations

from storage.archive.manifest import segments_key
from storage.archive.tier import ArchiveTier
from storage.cluster import ClusterRouter
from storage.codec import decode_raw_entries
from storage.keys import (
    key_identity,
    key_index_key,
    key_registry_key,
    log_key,
    slot_of,
)
from storage.models import StoredEntry
from storage.wire.lanes import NodeLanes
from storage.wire.scripts import LuaScript, run_script

INDEX_LUA = """
local function split_id(id)
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  return tonumber(ms), tonumber(seq)
end
local function id_before(a, b)
  local am, as = split_id(a)
  local bm, bs = split_id(b)
  if am ~= bm then return am < bm end
  return as < bs
end
-- the stream's first offset, false when it is empty
local function head_id(log)
  local head = redis.call('XRANGE', log, '-', '+', 'COUNT', 1)[1]
  return head and head[1] or false
end
-- the whole log's first offset: its archive's first segment's (the manifest's segments, a key the
-- caller declares), else the stream's first
local function first_id(log, segments)
  local oldest = redis.call('XRANGE', segments, '-', '+', 'COUNT', 1)[1]
  if oldest then
    for i = 1, #oldest[2], 2 do
      if oldest[2][i] == 'first' then return oldest[2][i + 1] end
    end
  end
  return head_id(log)
end
-- the first position of a key's index (a list of offsets, ascending) whose offset is not before
-- id (after id when exclusive), by binary search
local function lower_bound(index, id, exclusive)
  local low, high = 0, redis.call('LLEN', index)
  while low < high do
    local middle = math.floor((low + high) / 2)
    local at = redis.call('LINDEX', index, middle)
    if id_before(at, id) or (exclusive and at == id) then low = middle + 1 else high = middle end
  end
  return low
end
-- drops the offsets retention removed from the log (those before its first offset)
local function trim_index(index, first)
  local oldest = redis.call('LINDEX', index, 0)
  if not oldest then return end
  if not first then
    redis.call('DEL', index)
  elseif id_before(oldest, first) then
    redis.call('LTRIM', index, lower_bound(index, first, false), -1)
  end
end
-- the first offsets of the stream (head) and of the whole log (first) for one call, each read at
-- most once and only when asked: a call that writes keeps an older one, which trims less
local function log_bounds(log, segments)
  return {log = log, segments = segments}
end
local function head_of(bounds)
  if bounds.head == nil then bounds.head = head_id(bounds.log) end
  return bounds.head
end
local function first_of(bounds)
  if bounds.first == nil then bounds.first = first_id(bounds.log, bounds.segments) end
  return bounds.first
end
-- whether offset id is in the whole log (not before its first offset): one from the stream's
-- first on is, and only an older one asks the manifest
local function retained(bounds, id)
  local head = head_of(bounds)
  if head and not id_before(id, head) then return true end
  local first = first_of(bounds)
  return first and not id_before(id, first)
end
-- an index's registry hint (the ms of an offset of it), on its first and every 64th offset (length:
-- the index's length with id); there the offsets retention removed go too (none from an index of
-- the newest offset alone, nor from one whose oldest is retained)
local function note_index(registry, index, id, length, bounds)
  redis.call('ZADD', registry, (split_id(id)), index)
  if length > 1 and not retained(bounds, redis.call('LINDEX', index, 0)) then
    trim_index(index, first_of(bounds))
  end
end
"""

# KEYS[1] = the key's index, KEYS[2] = the log, KEYS[3] = the manifest's segments. ARGV[1] = lowest
# offset ('-' for the first; a leading '(' excludes it), ARGV[2] = highest ('+' for the newest; '('
# excludes), ARGV[3] = how many, ARGV[4] = 1 for newest first. Reply: XRANGE items of the log, an
# archived entry as its offset alone (the caller reads it from the segments); offsets retention
# removed are never read.
HISTORY_LUA = INDEX_LUA + """
local index, log = KEYS[1], KEYS[2]
local first = first_id(log, KEYS[3])
if not first then return {} end
local low, low_open = ARGV[1], false
if string.sub(low, 1, 1) == '(' then low, low_open = string.sub(low, 2), true end
if low == '-' or id_before(low, first) then low, low_open = first, false end
local high, high_open = ARGV[2], false
if string.sub(high, 1, 1) == '(' then high, high_open = string.sub(high, 2), true end
local count = tonumber(ARGV[3])
local start = lower_bound(index, low, low_open)
local stop = redis.call('LLEN', index) - 1
if high ~= '+' then stop = lower_bound(index, high, not high_open) - 1 end
if ARGV[4] == '1' then
  start = math.max(start, stop - count + 1)
else
  stop = math.min(stop, start + count - 1)
end
if stop < start then return {} end
local ids = redis.call('LRANGE', index, start, stop)
local out = {}
local from, to, step = 1, #ids, 1
if ARGV[4] == '1' then from, to, step = #ids, 1, -1 end
local head = head_id(log)
for k = from, to, step do
  local entry = redis.call('XRANGE', log, ids[k], ids[k])[1]
  if entry then
    out[#out + 1] = entry
  elseif not head or id_before(ids[k], head) then
    out[#out + 1] = ids[k]
  end
end
return out
"""

# KEYS[1] = the registry, KEYS[2] = the log, KEYS[3] = the manifest's segments. ARGV[1] = at most
# how many indexes to look at. Indexes hinted no newer than the ms of the log's first offset are
# checked: dropped whole when all their offsets are gone, else trimmed and their hint refreshed.
# Reply: how many were looked at, and how many dropped.
SWEEP_LUA = INDEX_LUA + """
local registry, log = KEYS[1], KEYS[2]
local first = first_id(log, KEYS[3])
local below = first and (split_id(first)) or '+inf'
local stale = redis.call('ZRANGEBYSCORE', registry, '-inf', below, 'LIMIT', 0, ARGV[1])
local dropped = 0
for _, index in ipairs(stale) do
  trim_index(index, first)
  local newest = redis.call('LINDEX', index, -1)
  if newest then
    redis.call('ZADD', registry, (split_id(newest)), index)
  else
    redis.call('ZREM', registry, index)
    dropped = dropped + 1
  end
end
return {#stale, dropped}
"""

HISTORY_SCRIPT = LuaScript.of(HISTORY_LUA)
SWEEP_SCRIPT = LuaScript.of(SWEEP_LUA)
SWEEP_PAGE = 1000

class KeyHistory:
    """Reads a key's history and sweeps indexes retention emptied, on a store's connections.

    A key's index is a list of its own holding only the offsets of the key's entries (the same
    IDs), so a key's history is read without scanning its partition; the partition's registry (a
    sorted set of index names scored by their newest entry's ms) lets retention drop indexes whose
    entries are all gone.
    """

    def __init__(self, router: ClusterRouter, lanes: NodeLanes,
                 archive: ArchiveTier | None = None) -> None:
        self._router = router
        self._lanes = lanes
        self._archive = archive  # where offsets older than the stream's first are read

    async def read(self, topic: str, partition: int, key: bytes, *, low: str, high: str,
                   limit: int, newest_first: bool, key_space: bytes = b"") -> list[StoredEntry]:
        """Up to ``limit`` of the key's entries in ``key_space`` with offsets in [low, high]
        (``-``/``+`` open, ``(`` exclusive), oldest or newest first, archived ones read from their
        segments; entries retention removed are never returned."""
        index = key_index_key(topic, partition, key_identity(key_space, key))
        keys: list[str | bytes] = [index, log_key(topic, partition),
                                   segments_key(topic, partition)]
        args = [low, high, limit, 1 if newest_first else 0]
        slot = slot_of(topic, partition)
        raw = await self._router.call(
            "key_history", self._router.settings.read_deadline_s,
            lambda: run_script(self._lanes, self._router.node_for_slot(slot), HISTORY_SCRIPT,
                               keys, args))
        items = list(raw or [])
        archived = [_text(item) for item in items if not isinstance(item, list)]
        if not archived:
            return decode_raw_entries(partition, items)
        found = ({} if self._archive is None else
                 await self._archive.entries_at(topic, partition, archived))
        return [entry for item in items for entry in (
            decode_raw_entries(partition, [item]) if isinstance(item, list)
            else [found[_text(item)]] if _text(item) in found else [])]

    async def sweep(self, topic: str, partition: int) -> int:
        """Drop the key indexes of the partition whose offsets retention removed from the log
        (trimming those it removed part of); how many went."""
        keys: list[str | bytes] = [key_registry_key(topic, partition), log_key(topic, partition),
                                   segments_key(topic, partition)]
        slot, dropped = slot_of(topic, partition), 0
        while True:
            looked, gone = await self._router.call(
                "key_index_sweep", self._router.settings.write_deadline_s,
                lambda: run_script(self._lanes, self._router.node_for_slot(slot), SWEEP_SCRIPT,
                                   keys, [SWEEP_PAGE]))
            dropped += int(gone)
            # a full page may hide more, unless it dropped nothing (all kept: offsets in the
            # first offset's ms, which stay in the range)
            if int(looked) < SWEEP_PAGE or not int(gone):
                return dropped


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
