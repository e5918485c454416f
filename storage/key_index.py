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
    compaction_key,
    dedup_key,
    key_index_key,
    key_registry_key,
    log_key,
    slot_of,
)
from storage.models import AppendOptions, Conditions, Records, StoredEntry, ValueFormat
from storage.resp import ResponseError, encode_command
from storage.scripts import (
    FORMAT_FIELD_COUNT,
    FORMAT_WIRE,
    XADD_LUA,
    LuaScript,
    records_fields_wire,
    run_script,
    small_int_wire,
    without_array_header,
    xadd_transaction,
)

if TYPE_CHECKING:
    from storage.cluster import ClusterRouter
    from storage.lean import NodeLanes

CONFLICT = "SG_CONFLICT"  # the script's error code for an expectation that does not hold

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
local function first_id(log)
  local head = redis.call('XRANGE', log, '-', '+', 'COUNT', 1)[1]
  return head and head[1] or false
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
-- an index's registry hint (the ms of an offset of it), on its first and every 64th offset; there
-- the offsets retention removed go too
local function note_index(registry, index, id, first)
  redis.call('ZADD', registry, (split_id(id)), index)
  trim_index(index, first)
end
"""

# KEYS[1] = the log, KEYS[2] = the registry, KEYS[3] = the set of indexes compaction has work in,
# KEYS[4] = the batch marker when ARGV[4] is 1, then dedup keys and key indexes.
# ARGV[1] = approximate max length (0 = unbounded), ARGV[2] = dedup TTL in ms, ARGV[3] = the
# partition's expected last offset ('' = none expected, 'none' = empty), ARGV[4] = 1 with a batch
# marker, then per record, space-separated in one argument each: ARGV[5] its dedup key's index in
# KEYS (0 = none; '' when no record has one), ARGV[6] its key index's index (0 = not indexed),
# ARGV[7] its key's expected offset ('.' = none expected, 'none' = no retained message; '' when no
# record expects); ARGV[8] = 1 on a compacted topic; then per record: field count, fields... (few
# arguments per record: each costs Redis an object and Lua a string).
# Reply: flat [offset, dupflag, ...] as the append scripts; a failed expectation is the error
# 'SG_CONFLICT <record index or -1> <expected> <current>' and writes nothing. The registry's score
# of an index is a hint, refreshed on an index's first and every 64th offset (the sweep checks).
INDEXED_APPEND_LUA = INDEX_LUA + XADD_LUA + """
local function numbers(packed)
  local found = {}
  for token in string.gmatch(packed, '%d+') do found[#found + 1] = tonumber(token) end
  return found
end
local log, registry = KEYS[1], KEYS[2]
local maxlen, ttl = tonumber(ARGV[1]), ARGV[2]
local marker = ARGV[4] == '1' and KEYS[4] or nil
local compact = ARGV[8] == '1'
local indexes = numbers(ARGV[6])
local count = #indexes
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
    if #out ~= 2 * count then
      return redis.error_reply('IDEMPOTENCY_CONFLICT the key was used for another batch')
    end
    return out
  end
end
local found = {}
local dedups = ARGV[5] ~= '' and numbers(ARGV[5]) or nil
local fresh = true
if dedups then
  fresh = false
  for r = 1, count do
    if dedups[r] > 0 then found[r] = redis.call('GET', KEYS[dedups[r]]) end
    if not found[r] then fresh = true end
  end
end
local first = nil
-- a request that wrote before is a duplicate, never a conflict: expectations are checked only for
-- a request with something new to write
if fresh and ARGV[3] ~= '' then
  local last = redis.call('XREVRANGE', log, '+', '-', 'COUNT', 1)[1]
  local current = last and last[1] or 'none'
  if current ~= ARGV[3] then
    return redis.error_reply('""" + CONFLICT + """ -1 ' .. ARGV[3] .. ' ' .. current)
  end
end
if fresh and ARGV[7] ~= '' then
  local r = 0
  for expected in string.gmatch(ARGV[7], '%S+') do
    r = r + 1
    if expected ~= '.' then
      local newest = redis.call('LINDEX', KEYS[indexes[r]], -1)
      local current = 'none'
      if newest then
        if first == nil then first = first_id(log) end
        if first and not id_before(newest, first) then current = newest end
      end
      if current ~= expected then
        return redis.error_reply('""" + CONFLICT + """ ' .. (r - 1) .. ' ' .. expected .. ' '
                                 .. current)
      end
    end
  end
end
local ids, written = {}, {}
local i = 9
first = nil
for r = 1, count do
  local last = i + tonumber(ARGV[i])
  local d = dedups and dedups[r] or 0
  -- a key twice in one request: the second is a duplicate of the first
  if not found[r] and d > 0 and written[d] then found[r] = written[d] end
  if found[r] then
    redis.call('SET', KEYS[d], found[r], 'KEEPTTL')
    out[#out + 1] = found[r]
    out[#out + 1] = 1
  else
    local id = xadd(log, maxlen, ARGV, i + 1, last)
    if d > 0 then
      redis.call('SET', KEYS[d], id, 'PX', ttl, 'NX')
      written[d] = id
    end
    local x = indexes[r]
    if x > 0 then
      local length = redis.call('RPUSH', KEYS[x], id)
      if compact then
        -- compacted: the registry in key order (snapshots page it), compaction told of every
        -- superseded offset and tombstone (a JSON null)
        if length == 1 then redis.call('ZADD', registry, 0, KEYS[x]) end
        if length == 2 or (ARGV[i + 2] == 'null' and ARGV[i + 3] ~= 'f') then
          redis.call('SADD', KEYS[3], KEYS[x])
        end
      elseif length % 64 == 1 then
        if first == nil then first = first_id(log) end
        note_index(registry, KEYS[x], id, first)
      end
    end
    ids[#ids + 1] = id
    out[#out + 1] = id
    out[#out + 1] = 0
  end
  i = last + 1
end
if marker then redis.call('SET', marker, table.concat(ids, ' '), 'PX', ttl) end
return out
"""

# KEYS[1] = the key's index, KEYS[2] = the log. ARGV[1] = lowest offset ('-' for the first; a
# leading '(' excludes it), ARGV[2] = highest ('+' for the newest; '(' excludes), ARGV[3] = how
# many, ARGV[4] = 1 for newest first. Reply: XRANGE items of the log; offsets retention removed
# are never read.
HISTORY_LUA = INDEX_LUA + """
local index, log = KEYS[1], KEYS[2]
local first = first_id(log)
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
for k = from, to, step do
  local entry = redis.call('XRANGE', log, ids[k], ids[k])[1]
  if entry then out[#out + 1] = entry end
end
return out
"""

# KEYS[1] = the registry, KEYS[2] = the log. ARGV[1] = at most how many indexes to look at.
# Indexes hinted no newer than the ms of the log's first offset are checked: dropped whole when
# all their offsets are gone, else trimmed and their hint refreshed. Reply: how many were looked
# at, and how many dropped.
SWEEP_LUA = INDEX_LUA + """
local registry, log = KEYS[1], KEYS[2]
local first = first_id(log)
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


# the MULTI and EXEC around what ``xadd_transaction`` writes: its records alone are the script's
_MULTI_SIZE, _EXEC_SIZE = len(encode_command(("MULTI",))), len(encode_command(("EXEC",)))


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

    def _layout(self) -> tuple[list[str | bytes], list[str]]:
        """KEYS, and the three per-record arguments: dedup keys' and key indexes' places in KEYS,
        and expected offsets, each space-separated."""
        topic, partition, records = self.topic, self.partition, self.records
        keys = self._base_keys()
        dedups = None
        if records.idempotency_keys is not None:
            dedups, places = [], {}
            for idempotency_key in records.idempotency_keys:
                if idempotency_key is not None and idempotency_key not in places:
                    keys.append(dedup_key(topic, partition, idempotency_key))
                    places[idempotency_key] = len(keys)
                dedups.append(0 if idempotency_key is None else places[idempotency_key])
        expected = None if self.conditions is None else self.conditions.key_offsets
        indexes = self._index_places(keys, expected)
        return keys, ["" if dedups is None else " ".join(map(str, dedups)), " ".join(indexes),
                      "" if expected is None else " ".join(e or "." for e in expected)]

    def _base_keys(self) -> list[str | bytes]:
        """The log, the registry, the compaction set and the batch's marker (when it has one)."""
        topic, partition, records = self.topic, self.partition, self.records
        keys: list[str | bytes] = [log_key(topic, partition), key_registry_key(topic, partition),
                                   compaction_key(topic, partition)]
        if records.batch_key is not None and records.idempotency_keys is None:
            keys.append(batch_dedup_key(topic, partition, records.batch_key))
        return keys

    def _index_places(self, keys: list[str | bytes], expected: list[str | None] | None
                      ) -> list[str]:
        """Each record's key index's place in KEYS ("0": none), appending each key's once."""
        topic, partition, every = self.topic, self.partition, self.options.key_index
        places: dict[bytes, str] = {}
        indexes = []
        for i, key in enumerate(self.records.keys):
            if key is None or not (every or (expected is not None and expected[i] is not None)):
                indexes.append("0")
                continue
            place = places.get(key)
            if place is None:
                keys.append(key_index_key(topic, partition, key))
                place = places[key] = str(len(keys))
            indexes.append(place)
        return indexes

    def _head(self, keys: list[str | bytes], packed: list[str]) -> tuple[str | bytes | int, ...]:
        conditions, records = self.conditions, self.records
        marked = records.batch_key is not None and records.idempotency_keys is None
        return ("EVALSHA", self.script.sha, len(keys), *keys, self.options.max_length or 0,
                self.options.dedup_ttl_ms, (conditions.last_offset or "") if conditions else "",
                1 if marked else 0, *packed, 1 if self.options.compact else 0)

    def evalsha_command(self) -> tuple[Any, ...]:
        """The raw ``EVALSHA`` command (script SHA, key count, keys, args)."""
        keys, packed = self._layout()
        args: list[Any] = []
        for record in self.records.rows():
            fields = encode_fields(record)
            args += (len(fields), *fields)
        return (*self._head(keys, packed), *args)

    def wire(self) -> bytes:
        """The script call as RESP bytes, identical to ``encode_command(self.evalsha_command())``
        (tests pin it), the records' fields encoded straight from the columns (plain records of
        one format in one compiled call)."""
        keys, packed = self._layout()
        head = self._head(keys, packed)
        records = self.records
        fmt = records.formats
        if records.headers is None and isinstance(fmt, ValueFormat):
            count = small_int_wire(2 + FORMAT_FIELD_COUNT[fmt])
            body = xadd_transaction(count, count, FORMAT_WIRE[fmt], records.values,
                                    records.keys)[_MULTI_SIZE:-_EXEC_SIZE]
            total = len(head) + len(records) * (3 + FORMAT_FIELD_COUNT[fmt])
            return b"*%d\r\n%b%b" % (total, without_array_header(encode_command(head),
                                                                 len(head)), body)
        chunks: list[bytes] = []
        total = len(head)
        for fields, field_count in records_fields_wire(records):
            chunks += (small_int_wire(field_count), fields)
            total += 1 + field_count
        return b"*%d\r\n%b%b" % (total, without_array_header(encode_command(head), len(head)),
                                  b"".join(chunks))

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

    async def sweep(self, topic: str, partition: int) -> int:
        """Drop the key indexes of the partition whose offsets retention removed from the log
        (trimming those it removed part of); how many went."""
        keys: list[str | bytes] = [key_registry_key(topic, partition), log_key(topic, partition)]
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
