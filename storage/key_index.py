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
from storage.models import AppendOptions, Conditions, Records, StoredEntry, ValueFormat
from storage.resp import ResponseError, encode_command
from storage.scripts import (
    FORMAT_FIELD_COUNT,
    FORMAT_WIRE,
    LuaScript,
    encode_fields_wire,
    record_columns,
    run_script,
    small_int_wire,
    without_array_header,
)

if TYPE_CHECKING:
    from storage.cluster import ClusterRouter
    from storage.lean import NodeLanes

CONFLICT = "SG_CONFLICT"  # the script's error code for an expectation that does not hold

_INDEX_LUA = """
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

# KEYS[1] = the log, KEYS[2] = the registry, KEYS[3] = the batch marker when ARGV[4] is 1, then
# dedup keys and key indexes. ARGV[1] = approximate max length (0 = unbounded), ARGV[2] = dedup TTL
# in ms, ARGV[3] = the partition's expected last offset ('' = none expected, 'none' = empty),
# ARGV[4] = 1 with a batch marker, ARGV[5] = 1 when some record has a dedup key or an expected
# offset, then per record: dedup key index (0 = none), key index's index (0 = not indexed), the
# key's expected offset ('' = none expected, 'none' = no retained message), field count, fields...
# Reply: flat [offset, dupflag, ...] as the append scripts; a failed expectation is the error
# 'SG_CONFLICT <record index or -1> <expected> <current>' and writes nothing. The registry's score
# of an index is a hint, refreshed on an index's first and every 64th offset (the sweep checks).
INDEXED_APPEND_LUA = _INDEX_LUA + """
local log, registry = KEYS[1], KEYS[2]
local maxlen, ttl = tonumber(ARGV[1]), ARGV[2]
local marker = ARGV[4] == '1' and KEYS[3] or nil
local n = #ARGV
local out = {}
if marker then
  local found = redis.call('GET', marker)
  if found then
    -- replicated, so a following WAIT also covers the first write
    redis.call('SET', marker, found, 'KEEPTTL')
    local count, i = 0, 6
    while i <= n do
      count = count + 1
      i = i + 4 + tonumber(ARGV[i + 3])
    end
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
local first = nil
if ARGV[5] == '1' or ARGV[3] ~= '' then
  local fresh, i, r = false, 6, 0
  while i <= n do
    r = r + 1
    local d = tonumber(ARGV[i])
    if d > 0 then found[r] = redis.call('GET', KEYS[d]) end
    if not found[r] then fresh = true end
    i = i + 4 + tonumber(ARGV[i + 3])
  end
  -- a request that wrote before is a duplicate, never a conflict: expectations are checked only
  -- for a request with something new to write
  if fresh and ARGV[3] ~= '' then
    local last = redis.call('XREVRANGE', log, '+', '-', 'COUNT', 1)[1]
    local current = last and last[1] or 'none'
    if current ~= ARGV[3] then
      return redis.error_reply('""" + CONFLICT + """ -1 ' .. ARGV[3] .. ' ' .. current)
    end
  end
  i, r = 6, 0
  while fresh and i <= n do
    r = r + 1
    local expected = ARGV[i + 2]
    if expected ~= '' then
      local newest = redis.call('LINDEX', KEYS[tonumber(ARGV[i + 1])], -1)
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
    i = i + 4 + tonumber(ARGV[i + 3])
  end
end
-- one record's entry, its dedup key and its key's index
local function append_record(i, last)
  local id
  if maxlen > 0 then
    id = redis.call('XADD', log, 'MAXLEN', '~', maxlen, '*', unpack(ARGV, i + 4, last))
  else
    id = redis.call('XADD', log, '*', unpack(ARGV, i + 4, last))
  end
  local d, x = tonumber(ARGV[i]), tonumber(ARGV[i + 1])
  if d > 0 then redis.call('SET', KEYS[d], id, 'PX', ttl, 'NX') end
  if x > 0 and redis.call('RPUSH', KEYS[x], id) % 64 == 1 then
    if first == nil then first = first_id(log) end
    note_index(registry, KEYS[x], id, first)
  end
  return id
end
local ids = {}
local i, r = 6, 0
first = nil
while i <= n do
  r = r + 1
  local last = i + 3 + tonumber(ARGV[i + 3])
  if found[r] then
    redis.call('SET', KEYS[tonumber(ARGV[i])], found[r], 'KEEPTTL')
    out[#out + 1] = found[r]
    out[#out + 1] = 1
  else
    local id = append_record(i, last)
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
HISTORY_LUA = _INDEX_LUA + """
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
SWEEP_LUA = _INDEX_LUA + """
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


_UNINDEXED_HEAD = b"$1\r\n0\r\n$1\r\n0\r\n$0\r\n\r\n"  # no dedup key, no index, no expectation


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

    @staticmethod
    def _checked(heads: list[list[Any]]) -> int:
        """1 when some record has a dedup key or an expected offset (the script looks first)."""
        return 1 if any(dedup or expected for dedup, _, expected in heads) else 0

    def evalsha_command(self) -> tuple[Any, ...]:
        """The raw ``EVALSHA`` command (script SHA, key count, keys, args)."""
        keys, heads = self._layout()
        conditions, records = self.conditions, self.records
        marked = records.batch_key is not None and records.idempotency_keys is None
        args: list[Any] = [self.options.max_length or 0, self.options.dedup_ttl_ms,
                           (conditions.last_offset or "") if conditions else "",
                           1 if marked else 0, self._checked(heads)]
        for head, record in zip(heads, records.rows(), strict=True):
            fields = encode_fields(record)
            args += (*head, len(fields), *fields)
        return ("EVALSHA", self.script.sha, len(keys), *keys, *args)

    def wire(self) -> bytes:
        """The script call as RESP bytes, identical to ``encode_command(self.evalsha_command())``
        (tests pin it), each record's fields encoded straight from the columns."""
        records = self.records
        if (records.idempotency_keys is None and records.headers is None and self.conditions
                is None and self.options.key_index and isinstance(records.formats, ValueFormat)):
            return self._plain_wire(records.formats)
        keys, heads = self._layout()
        chunks, count = self._head_wire(keys, self._checked(heads))
        for (dedup, index, expected), (value, fmt, key, headers) in zip(
                heads, record_columns(records), strict=True):
            fields, field_count = encode_fields_wire(value, fmt, key, headers)
            chunks.append(b"%b%b$%d\r\n%b\r\n%b%b" % (
                small_int_wire(dedup), small_int_wire(index), len(expected), expected.encode(),
                small_int_wire(field_count), fields))
            count += 4 + field_count
        chunks[0] = b"*%d\r\n" % count
        return b"".join(chunks)

    def _plain_wire(self, value_format: ValueFormat) -> bytes:
        """``wire`` of the common publish to a key-indexed topic: plain records of one format, no
        idempotency key of their own, no expectation (no record of ``_layout``'s per record)."""
        records, topic, partition = self.records, self.topic, self.partition
        keys: list[str | bytes] = [log_key(topic, partition), key_registry_key(topic, partition)]
        if records.batch_key is not None:
            keys.append(batch_dedup_key(topic, partition, records.batch_key))
        positions: dict[bytes, bytes] = {}
        format_wire, format_fields = FORMAT_WIRE[value_format], FORMAT_FIELD_COUNT[value_format]
        keyed_tail, keyless_tail = (small_int_wire(2 + format_fields),
                                    small_int_wire(2 + format_fields))
        record_chunks = []
        for value, key in zip(records.values, records.keys, strict=True):
            if key is None:
                record_chunks.append(b"%b%b$1\r\nv\r\n$%d\r\n%b\r\n%b" % (
                    _UNINDEXED_HEAD, keyless_tail, len(value), value, format_wire))
                continue
            position = positions.get(key)
            if position is None:
                keys.append(key_index_key(topic, partition, key))
                position = positions[key] = small_int_wire(len(keys))
            record_chunks.append(b"$1\r\n0\r\n%b$0\r\n\r\n%b$%d\r\nK%b\r\n$%d\r\n%b\r\n%b" % (
                position, keyed_tail, len(key) + 1, key, len(value), value, format_wire))
        chunks, count = self._head_wire(keys, 0)
        chunks[0] = b"*%d\r\n" % (count + len(records) * (6 + format_fields))
        return b"".join(chunks + record_chunks)

    def _head_wire(self, keys: list[str | bytes], checked: int) -> tuple[list[bytes], int]:
        """The command's head as RESP bulk strings (after an empty slot for the array header) and
        how many there are: EVALSHA, the keys, the five call arguments."""
        conditions, records = self.conditions, self.records
        marked = records.batch_key is not None and records.idempotency_keys is None
        head: tuple[str | bytes | int, ...] = (
            "EVALSHA", self.script.sha, len(keys), *keys, self.options.max_length or 0,
            self.options.dedup_ttl_ms, (conditions.last_offset or "") if conditions else "",
            1 if marked else 0, checked)
        return [b"", without_array_header(encode_command(head), len(head))], len(head)

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
