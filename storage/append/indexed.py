"""Appends that keep each key's index and check expected positions: the indexed append script and
``IndexedAppendCall``, its call (``ConditionFailed`` from its conflict reply)."""

from __future__ import annotations

from typing import Any

from storage._speedups import xadd_transaction
from storage.append.encoding import (
    FORMAT_FIELD_COUNT,
    FORMAT_WIRE,
    records_fields_wire,
    small_int_wire,
    without_array_header,
)
from storage.append.lua import XADD_LUA
from storage.archive.manifest import segments_key
from storage.codec import encode_fields
from storage.errors import ConditionFailed
from storage.key_index import INDEX_LUA
from storage.keys import (
    batch_dedup_key,
    compaction_key,
    dedup_key,
    key_identity,
    key_index_key,
    key_registry_key,
    log_key,
)
from storage.models import AppendOptions, Conditions, Records, ValueFormat
from storage.wire.errors import ResponseError
from storage.wire.resp import encode_command
from storage.wire.scripts import LuaScript

CONFLICT = "SG_CONFLICT"  # the script's error code for an expectation that does not hold

# KEYS[1] = the log, KEYS[2] = the registry, KEYS[3] = the set of indexes compaction has work in,
# KEYS[4] = the archive manifest's segments, KEYS[5] = the batch marker when ARGV[4] is 1, then
# dedup keys and key indexes.
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
local log, registry, segments = KEYS[1], KEYS[2], KEYS[4]
local maxlen, ttl = tonumber(ARGV[1]), ARGV[2]
local marker = ARGV[4] == '1' and KEYS[5] or nil
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
local bounds = log_bounds(log, segments)
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
      if newest and retained(bounds, newest) then current = newest end
      if current ~= expected then
        return redis.error_reply('""" + CONFLICT + """ ' .. (r - 1) .. ' ' .. expected .. ' '
                                 .. current)
      end
    end
  end
end
local ids, written = {}, {}
local i = 9
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
        note_index(registry, KEYS[x], id, length, bounds)
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
INDEXED_APPEND_SCRIPT = LuaScript.of(INDEXED_APPEND_LUA)


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
        """The log, the registry, the compaction set, the archive's segments and the batch's
        marker (when it has one)."""
        topic, partition, records = self.topic, self.partition, self.records
        keys: list[str | bytes] = [log_key(topic, partition), key_registry_key(topic, partition),
                                   compaction_key(topic, partition),
                                   segments_key(topic, partition)]
        if records.batch_key is not None and records.idempotency_keys is None:
            keys.append(batch_dedup_key(topic, partition, records.batch_key))
        return keys

    def _index_places(self, keys: list[str | bytes], expected: list[str | None] | None
                      ) -> list[str]:
        """Each record's key index's place in KEYS ("0": none), appending each key's once: the
        index of the key's identity in the records' key space."""
        topic, partition, every = self.topic, self.partition, self.options.key_index
        space = self.records.key_space
        places: dict[bytes, str] = {}
        indexes = []
        for i, key in enumerate(self.records.keys):
            if key is None or not (every or (expected is not None and expected[i] is not None)):
                indexes.append("0")
                continue
            place = places.get(key)
            if place is None:
                keys.append(key_index_key(topic, partition, key_identity(space, key)))
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
