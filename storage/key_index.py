"""Per-key indexes and conditional appends: the script that appends while keeping each key's index
and checking expected positions, the history read, and the sweep that follows retention.

A key's index is a stream of its own holding only the offsets of the key's entries (the same IDs),
so a key's history is read without scanning its partition; the partition's registry (a sorted set
of index names scored by their newest entry's ms) lets retention drop indexes whose entries are all
gone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from storage.codec import decode_raw_entries, encode_fields
from storage.errors import ConditionFailed
from storage.keys import (
    batch_dedup_key,
    dedup_key,
    key_index_key,
    key_registry_key,
    log_key,
    slot_of,
)
from storage.models import AppendOptions, Conditions, Records, StoredEntry
from storage.resp import ResponseError, encode_command
from storage.scripts import LuaScript, run_script

if TYPE_CHECKING:
    from storage.cluster import ClusterRouter
    from storage.lean import NodeLanes

CONFLICT = "SG_CONFLICT"  # the script's error code for an expectation that does not hold

_ID_ORDER_LUA = """
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
local function first_id(log)
  local head = redis.call('XRANGE', log, '-', '+', 'COUNT', 1)[1]
  return head and head[1] or false
end
"""

# KEYS[1] = the log, KEYS[2] = the registry, KEYS[3] = the batch marker when ARGV[4] is 1, then
# dedup keys and key indexes. ARGV[1] = approximate max length (0 = unbounded), ARGV[2] = dedup TTL
# in ms, ARGV[3] = the partition's expected last offset ('' = none expected, 'none' = empty), then
# per record: dedup key index (0 = none), key index's index (0 = not indexed), the key's expected
# offset ('' = none expected, 'none' = no retained message), field count, fields...
# Reply: flat [offset, dupflag, ...] as the append scripts; a failed expectation is the error
# 'SG_CONFLICT <record index or -1> <expected> <current>' and writes nothing.
INDEXED_APPEND_LUA = _ID_ORDER_LUA + """
local log, registry = KEYS[1], KEYS[2]
local maxlen, ttl = tonumber(ARGV[1]), ARGV[2]
local marker = ARGV[4] == '1' and KEYS[3] or nil
local records, i, n = {}, 5, #ARGV
while i <= n do
  local count = tonumber(ARGV[i + 3])
  records[#records + 1] = {tonumber(ARGV[i]), tonumber(ARGV[i + 1]), ARGV[i + 2], i + 4,
                           i + 3 + count}
  i = i + 4 + count
end
local out = {}
if marker then
  local found = redis.call('GET', marker)
  if found then
    -- replicated, so a following WAIT also covers the first write
    redis.call('SET', marker, found, 'KEEPTTL')
    for id in string.gmatch(found, '%S+') do
      out[#out + 1] = id
      out[#out + 1] = 1
    end
    if #out ~= 2 * #records then
      return redis.error_reply('IDEMPOTENCY_CONFLICT the key was used for another batch')
    end
    return out
  end
end
local found, fresh = {}, false
for r = 1, #records do
  local d = records[r][1]
  if d > 0 then found[r] = redis.call('GET', KEYS[d]) end
  if not found[r] then fresh = true end
end
if fresh then
  -- a request that wrote before is a duplicate, never a conflict: expectations are checked only
  -- for a request with something new to write
  local last_expected = ARGV[3]
  if last_expected ~= '' then
    local last = redis.call('XREVRANGE', log, '+', '-', 'COUNT', 1)[1]
    local current = last and last[1] or 'none'
    if current ~= last_expected then
      return redis.error_reply('""" + CONFLICT + """ -1 ' .. last_expected .. ' ' .. current)
    end
  end
  local first = nil
  for r = 1, #records do
    local expected = records[r][3]
    if expected ~= '' then
      local newest = redis.call('XREVRANGE', KEYS[records[r][2]], '+', '-', 'COUNT', 1)[1]
      local current = 'none'
      if newest then
        if first == nil then first = first_id(log) end
        if first and not id_before(newest[1], first) then current = newest[1] end
      end
      if current ~= expected then
        return redis.error_reply('""" + CONFLICT + """ ' .. (r - 1) .. ' ' .. expected .. ' '
                                 .. current)
      end
    end
  end
end
local ids, indexed = {}, {}
for r = 1, #records do
  local record = records[r]
  local d = record[1]
  if found[r] then
    redis.call('SET', KEYS[d], found[r], 'KEEPTTL')
    out[#out + 1] = found[r]
    out[#out + 1] = 1
  else
    local id
    if maxlen > 0 then
      id = redis.call('XADD', log, 'MAXLEN', '~', maxlen, '*', unpack(ARGV, record[4], record[5]))
    else
      id = redis.call('XADD', log, '*', unpack(ARGV, record[4], record[5]))
    end
    if d > 0 then redis.call('SET', KEYS[d], id, 'PX', ttl, 'NX') end
    if record[2] > 0 then
      redis.call('XADD', KEYS[record[2]], id, 'o', '')
      indexed[record[2]] = id
    end
    ids[#ids + 1] = id
    out[#out + 1] = id
    out[#out + 1] = 0
  end
end
if next(indexed) then
  -- entries retention removed from the log leave the key's index with the key's next append
  local first = first_id(log)
  for x, id in pairs(indexed) do
    if first then redis.call('XTRIM', KEYS[x], 'MINID', first) end
    redis.call('ZADD', registry, split_id(id), KEYS[x])
  end
end
if marker then redis.call('SET', marker, table.concat(ids, ' '), 'PX', ttl) end
return out
"""

# KEYS[1] = the key's index, KEYS[2] = the log. ARGV[1] = lowest offset (inclusive, '-' for the
# first), ARGV[2] = highest ('+' for the newest; '(' + offset for exclusive), ARGV[3] = how many,
# ARGV[4] = 1 for newest first. Reply: XRANGE items of the log, entries retention removed skipped.
HISTORY_LUA = _ID_ORDER_LUA + """
local index, log = KEYS[1], KEYS[2]
local first = first_id(log)
if not first then return {} end
local low = ARGV[1]
if low == '-' or id_before((string.gsub(low, '^%(', '')), first) then low = first end
local ids
if ARGV[4] == '1' then
  ids = redis.call('XREVRANGE', index, ARGV[2], low, 'COUNT', ARGV[3])
else
  ids = redis.call('XRANGE', index, low, ARGV[2], 'COUNT', ARGV[3])
end
local out = {}
for _, item in ipairs(ids) do
  local entry = redis.call('XRANGE', log, item[1], item[1])[1]
  if entry then out[#out + 1] = entry end
end
return out
"""

# KEYS[1] = the registry. ARGV[1] = the first offset left in the log ('' when it is empty), ARGV[2]
# = its ms ('+inf' when empty), ARGV[3] = at most how many indexes to look at. Indexes whose newest
# entry is older than that offset are dropped whole (atomically with any append, which would have
# raised the score). Reply: how many were looked at, and how many dropped.
SWEEP_LUA = _ID_ORDER_LUA + """
local stale = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[2], 'LIMIT', 0, ARGV[3])
local dropped = 0
for _, index in ipairs(stale) do
  local newest = redis.call('XREVRANGE', index, '+', '-', 'COUNT', 1)[1]
  if ARGV[1] == '' or not newest or id_before(newest[1], ARGV[1]) then
    redis.call('DEL', index)
    redis.call('ZREM', KEYS[1], index)
    dropped = dropped + 1
  end
end
return {#stale, dropped}
"""

INDEXED_APPEND_SCRIPT = LuaScript.of(INDEXED_APPEND_LUA)
HISTORY_SCRIPT = LuaScript.of(HISTORY_LUA)
SWEEP_SCRIPT = LuaScript.of(SWEEP_LUA)
SWEEP_PAGE = 1000


def conflict_of(partition: int, reply: BaseException) -> ConditionFailed | None:
    """The failed expectation an error reply of the indexed script names, else None."""
    if not isinstance(reply, ResponseError) or not str(reply).startswith(CONFLICT):
        return None
    _, index, expected, current = str(reply).split()[:4]
    return ConditionFailed(partition, None if index == "-1" else int(index), expected, current)


class IndexedAppendCall:
    """One partition's records through the indexed script: on a topic with key indexes, or with
    expectations to check (a ``PartitionCall``; its reply is the append scripts' flat one)."""

    __slots__ = ("conditions", "options", "partition", "records", "topic")

    script = INDEXED_APPEND_SCRIPT
    wire_replies = 1
    transaction_size = None

    def __init__(self, topic: str, partition: int, records: Records, options: AppendOptions,
                 conditions: Conditions | None) -> None:
        self.topic = topic
        self.partition = partition
        self.records = records
        self.options = options
        self.conditions = conditions

    def _layout(self) -> tuple[list[str | bytes], list[list[Any]]]:
        """KEYS, and per record its dedup index, index key's index and expected offset."""
        topic, partition, records = self.topic, self.partition, self.records
        keys: list[str | bytes] = [log_key(topic, partition), key_registry_key(topic, partition)]
        batch_key = records.batch_key if records.idempotency_keys is None else None
        if batch_key is not None:
            keys.append(batch_dedup_key(topic, partition, batch_key))
        dedup = records.idempotency_keys or [None] * len(records)
        expected = (self.conditions.key_offsets if self.conditions is not None
                    and self.conditions.key_offsets is not None else [None] * len(records))
        positions: dict[bytes, int] = {}
        heads: list[list[Any]] = []
        for idempotency_key, key, expect in zip(dedup, records.keys, expected, strict=True):
            d = 0
            if idempotency_key is not None:
                keys.append(dedup_key(topic, partition, idempotency_key))
                d = len(keys)
            x = 0
            if key is not None and (self.options.key_index or expect is not None):
                x = positions.get(key, 0)
                if not x:
                    keys.append(key_index_key(topic, partition, key))
                    x = positions[key] = len(keys)
            heads.append([d, x, expect or ""])
        return keys, heads

    def evalsha_command(self) -> tuple[Any, ...]:
        """The raw ``EVALSHA`` command (script SHA, key count, keys, args)."""
        keys, heads = self._layout()
        conditions, records = self.conditions, self.records
        marked = records.batch_key is not None and records.idempotency_keys is None
        args: list[Any] = [self.options.max_length or 0, self.options.dedup_ttl_ms,
                           (conditions.last_offset or "") if conditions else "",
                           1 if marked else 0]
        for head, record in zip(heads, records.rows(), strict=True):
            fields = encode_fields(record)
            args += (*head, len(fields), *fields)
        return ("EVALSHA", self.script.sha, len(keys), *keys, *args)

    def wire(self) -> bytes:
        """The script call as RESP bytes."""
        return encode_command(self.evalsha_command())

    def fold_replies(self, replies: list[Any]) -> Any:
        """The script's reply."""
        return replies[0]


class KeyHistory:
    """Reads a key's history and sweeps indexes retention emptied, on a store's connections."""

    def __init__(self, router: ClusterRouter, lanes: NodeLanes) -> None:
        self._router = router
        self._lanes = lanes

    async def read(self, topic: str, partition: int, key: bytes, *, low: str, high: str,
                   limit: int, newest_first: bool) -> list[StoredEntry]:
        """Up to ``limit`` of the key's entries with offsets in [low, high] (``-``/``+`` open,
        ``(`` exclusive), oldest or newest first; entries retention removed are never returned."""
        keys: list[str | bytes] = [key_index_key(topic, partition, key), log_key(topic, partition)]
        args = [low, high, limit, 1 if newest_first else 0]
        slot = slot_of(topic, partition)
        raw = await self._router.call(
            "key_history", self._router.settings.read_deadline_s,
            lambda: run_script(self._lanes, self._router.node_for_slot(slot), HISTORY_SCRIPT,
                               keys, args))
        return decode_raw_entries(partition, raw or [])

    async def sweep(self, topic: str, partition: int, first: str | None) -> int:
        """Drop the key indexes of the partition whose entries are all older than ``first`` (the
        log's first offset, None when it is empty); how many went."""
        keys: list[str | bytes] = [key_registry_key(topic, partition)]
        args = ["", "+inf"] if first is None else [first, first.partition("-")[0]]
        slot, dropped = slot_of(topic, partition), 0
        while True:
            looked, gone = await self._router.call(
                "key_index_sweep", self._router.settings.write_deadline_s,
                lambda: run_script(self._lanes, self._router.node_for_slot(slot), SWEEP_SCRIPT,
                                   keys, [*args, SWEEP_PAGE]))
            dropped += int(gone)
            # indexes kept stay in the range: a full page that dropped nothing would repeat
            if int(looked) < SWEEP_PAGE or not int(gone):
                return dropped
