"""Compacted topics: compaction keeps the newest message of every key (a tombstone, a JSON null,
goes after the lag too), and snapshots read the newest value of every key as of one offset."""

from __future__ import annotations

import base64
import re
from typing import Any

from storage.cluster import ClusterRouter
from storage.codec import decode_raw_entries
from storage.errors import SnapshotExpired
from storage.group_scripts import INFO_LUA
from storage.key_index import INDEX_LUA
from storage.keys import (
    compaction_key,
    key_identity,
    key_index_key,
    key_registry_key,
    key_space_range,
    log_key,
    slot_of,
)
from storage.models import StoredEntry
from storage.wire.errors import ResponseError
from storage.wire.lanes import NodeLanes
from storage.wire.scripts import LuaScript, run_script

EXPIRED = "SG_SNAPSHOT_GONE"
BASE64URL = re.compile(r"[A-Za-z0-9_-]*={0,2}")
SCAN_PAGE = 200

_COMPACTION_LUA = """
local function is_tombstone(fields)
  if fields[2] ~= 'null' then return false end
  for j = 3, #fields, 2 do
    if fields[j] == 'f' then return false end
  end
  return true
end
local function now_ms()
  local now = redis.call('TIME')
  return tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
end
"""

# KEYS[1] = the log, KEYS[2] = the registry, KEYS[3] = the compaction set, then indexes from it.
# ARGV[1] = the lag in ms. An offset superseded by one older than the lag goes (so a snapshot
# younger than the lag still finds every value it needs), and a lone tombstone older than the lag
# goes with its index. An index with nothing left to do leaves the set. Reply: entries removed.
COMPACT_LUA = INDEX_LUA + _COMPACTION_LUA + """
local log, registry, work = KEYS[1], KEYS[2], KEYS[3]
local cutoff = (now_ms() - tonumber(ARGV[1])) .. '-0'
local removed = 0
for k = 4, #KEYS do
  local index = KEYS[k]
  local ids = redis.call('LRANGE', index, 0, -1)
  local n = #ids
  local gone = 0
  while gone < n - 1 and id_before(ids[gone + 2], cutoff) do gone = gone + 1 end
  if gone > 0 then
    redis.call('XDEL', log, unpack(ids, 1, gone))
    redis.call('LTRIM', index, gone, -1)
    removed = removed + gone
  end
  if n == 0 then
    redis.call('SREM', work, index)
    redis.call('ZREM', registry, index)
  elseif gone == n - 1 then
    local newest = ids[n]
    local entry = redis.call('XRANGE', log, newest, newest)[1]
    if entry == nil or (is_tombstone(entry[2]) and id_before(newest, cutoff)) then
      if entry then
        redis.call('XDEL', log, newest)
        removed = removed + 1
      end
      redis.call('DEL', index)
      redis.call('ZREM', registry, index)
      redis.call('SREM', work, index)
    elseif not is_tombstone(entry[2]) then
      redis.call('SREM', work, index)
    end
  end
end
return removed
"""

# KEYS[1] = the registry, KEYS[2] = the log. ARGV[1] = the index the page starts after ('' from
# the first), ARGV[2] = the snapshot's offset, ARGV[3] = how many indexes, ARGV[4] = the lag in ms,
# ARGV[5] and ARGV[6] = the ZRANGEBYLEX bounds of the key space's indexes (absent: every index;
# the first page starts at ARGV[5], every page ends before ARGV[6]). Reply: the page's last index
# ('' when none) and, per key, its newest entry at or before the offset unless that is a
# tombstone. A snapshot compaction may have taken values from: SG_SNAPSHOT_GONE.
SNAPSHOT_LUA = INDEX_LUA + _COMPACTION_LUA + INFO_LUA + """
-- Compaction removes an offset once the one superseding it is older than the lag: only offsets
-- written after as_of and older than the lag take from its snapshot, however old as_of is. One
-- deleted after as_of counts as old (its time is gone with it).
local function snapshot_gone(log, as_of, cutoff)
  if as_of == '0-0' or not id_before(as_of, cutoff) then return false end
  local ok, after = pcall(redis.call, 'XRANGE', log, '(' .. as_of, '+', 'COUNT', 1)
  if not ok or (after[1] and id_before(after[1][1], cutoff)) then return true end
  return redis.call('EXISTS', log) == 1
    and id_before(as_of, stream_info(log)['max-deleted-entry-id'])
end
local registry, log, as_of = KEYS[1], KEYS[2], ARGV[2]
if snapshot_gone(log, as_of, (now_ms() - tonumber(ARGV[4])) .. '-0') then
  return redis.error_reply('""" + EXPIRED + """ messages written after the snapshot are older '
    .. 'than the compaction lag')
end
local start = ARGV[1] == '' and (ARGV[5] or '-') or ('(' .. ARGV[1])
local indexes = redis.call('ZRANGEBYLEX', registry, start, ARGV[6] or '+', 'LIMIT', 0, ARGV[3])
local entries = {}
for _, index in ipairs(indexes) do
  local at = lower_bound(index, as_of, true) - 1
  if at >= 0 then
    local id = redis.call('LINDEX', index, at)
    local entry = redis.call('XRANGE', log, id, id)[1]
    if not entry then
      return redis.error_reply('""" + EXPIRED + """ ' .. id .. ' was compacted')
    end
    if not is_tombstone(entry[2]) then entries[#entries + 1] = entry end
  end
end
return {indexes[#indexes] or '', entries}
"""

# KEYS[1] = the log. Reply: the newest offset the partition ever had ('0-0' when none), a
# compacted one included: a snapshot as of it misses nothing later.
SNAPSHOT_OFFSET_LUA = INFO_LUA + """
if redis.call('EXISTS', KEYS[1]) == 0 then return '0-0' end
return stream_info(KEYS[1])['last-generated-id']
"""

COMPACT_SCRIPT = LuaScript.of(COMPACT_LUA)
SNAPSHOT_SCRIPT = LuaScript.of(SNAPSHOT_LUA)
SNAPSHOT_OFFSET_SCRIPT = LuaScript.of(SNAPSHOT_OFFSET_LUA)


def snapshot_cursor(topic: str, partition: int, index: bytes, key_space: bytes = b"") -> str:
    """A page's end as the API's cursor: the key within ``key_space``, base64url (keys are
    bytes). The space is not in it: ``cursor_index`` puts the reader's own back."""
    prefix = key_index_key(topic, partition, key_identity(key_space, b""))
    return base64.urlsafe_b64encode(index[len(prefix):]).decode()


def cursor_index(topic: str, partition: int, cursor: str, key_space: bytes = b"") -> bytes:
    """The index a cursor names in ``key_space``: whatever a cursor holds, it names a key of the
    reader's own space (ValueError when it is not base64url: the lenient decoder would drop what
    is not, and page from elsewhere)."""
    if BASE64URL.fullmatch(cursor) is None:
        raise ValueError("a snapshot cursor is base64url")
    key = base64.b64decode(cursor.encode(), altchars=b"-_", validate=True)
    return key_index_key(topic, partition, key_identity(key_space, key))


class Compaction:
    """Compaction and snapshots of compacted partitions, on a store's connections.

    Both run on the key indexes (``storage.key_index``): a compacted topic's registry lists its
    indexes in key order with score 0, and the append script adds an index to the compaction set
    when it gets a second offset or a tombstone. Both take the time from the primary's clock
    (``TIME``), so the lag that protects a snapshot and the one compaction honours are measured by
    one clock.
    """

    def __init__(self, router: ClusterRouter, lanes: NodeLanes) -> None:
        self._router = router
        self._lanes = lanes

    async def compact(self, topic: str, partition: int, lag_ms: int) -> int:
        """One pass over the partition's compaction set; entries removed."""
        slot, work = slot_of(topic, partition), compaction_key(topic, partition)
        base: list[str | bytes] = [log_key(topic, partition), key_registry_key(topic, partition),
                                   work]
        cursor: Any = b"0"
        removed = 0
        while True:
            cursor, indexes = await self._router.call_on_slot(
                self._lanes, "compaction", self._router.settings.read_deadline_s, slot,
                ("SSCAN", work, cursor, "COUNT", SCAN_PAGE))
            if indexes:
                removed += await self._compact_indexes(slot, [*base, *indexes], lag_ms)
            if cursor in (b"0", "0", 0):
                return removed

    async def _compact_indexes(self, slot: int, keys: list[str | bytes], lag_ms: int) -> int:
        async def compact() -> Any:
            return await run_script(self._lanes, self._router.node_for_slot(slot),
                                    COMPACT_SCRIPT, keys, [lag_ms])

        return int(await self._router.call("compaction", self._router.settings.write_deadline_s,
                                           compact))

    async def snapshot_offset(self, topic: str, partition: int) -> str:
        """The offset a snapshot taken now is as of: the partition's newest ever, '0-0' when it
        has none. Not its newest retained one: that may be older than a compacted tombstone,
        which a snapshot as of it would need."""
        slot, log = slot_of(topic, partition), log_key(topic, partition)

        async def newest() -> Any:
            return await run_script(self._lanes, self._router.node_for_slot(slot),
                                    SNAPSHOT_OFFSET_SCRIPT, [log], [])

        offset = await self._router.call("snapshot", self._router.settings.read_deadline_s,
                                         newest)
        return offset.decode() if isinstance(offset, bytes) else str(offset)

    async def snapshot_page(self, topic: str, partition: int, *, after: str | None, as_of: str,
                            limit: int, lag_ms: int, key_space: bytes = b""
                            ) -> tuple[str | None, list[StoredEntry]]:
        """Up to ``limit`` keys of ``key_space`` after the cursor ``after`` (the empty space's
        snapshot holds every space's keys): each one's newest value at or before ``as_of``
        (tombstones and keys created later left out), and the cursor of the next page (None at
        the end). ``SnapshotExpired`` once messages written after ``as_of`` are older than the
        lag (compaction may have taken values it needs)."""
        slot = slot_of(topic, partition)
        keys: list[str | bytes] = [key_registry_key(topic, partition), log_key(topic, partition)]
        start = b"" if after is None else cursor_index(topic, partition, after, key_space)
        low, high = key_space_range(topic, partition, key_space)

        async def page() -> Any:
            try:
                return await run_script(self._lanes, self._router.node_for_slot(slot),
                                        SNAPSHOT_SCRIPT, keys,
                                        [start, as_of, limit, lag_ms, low, high])
            except ResponseError as exc:
                if str(exc).startswith(EXPIRED):
                    raise SnapshotExpired(str(exc).removeprefix(EXPIRED).strip()) from exc
                raise

        last, raw = await self._router.call("snapshot", self._router.settings.read_deadline_s,
                                            page)
        entries = decode_raw_entries(partition, raw or [])
        more = bool(last) and await self._has_after(slot, keys[0], last, high)
        return (snapshot_cursor(topic, partition, last, key_space) if more else None), entries

    async def _has_after(self, slot: int, registry: str | bytes, last: bytes,
                         high: bytes) -> bool:
        after = await self._router.call_on_slot(
            self._lanes, "snapshot", self._router.settings.read_deadline_s, slot,
            ("ZRANGEBYLEX", registry, b"(" + last, high, "LIMIT", 0, 1))
        return bool(after)
