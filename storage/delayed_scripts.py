"""The Lua scripts of delayed messages and the argument layouts they expect."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from storage.append.calls import ScriptCall
from storage.append.lua import XADD_LUA
from storage.codec import encode_fields, timestamp_ms
from storage.keys import (
    dedup_key,
    dedup_prefix,
    delayed_data_key,
    delayed_key,
    delayed_seq_key,
    log_key,
)
from storage.models import AppendOptions, AppendResult, Record, ScheduledResult
from storage.wire.scripts import LuaScript

# A partition's delayed messages live in its hash tag, so one script can touch all of them and its
# stream: ``sg:{<topic>/<p>}:delayed`` (sorted set: member = schedule id, score = due ms),
# ``:delayed:data`` (hash: schedule id -> encoded entry) and ``:delayed:seq`` (counter). Schedule
# ids are the counter zero-padded to 16 digits, so the sorted set's (score, member) order is (due
# time, schedule order).
#
# The encoded entry is a run of netstrings ``<len>:<bytes>``: the idempotency key ('' = none), then
# the XADD field/value list from ``codec.encode_fields``. Binary-safe and decodable in plain Lua (no
# cjson/cmsgpack).
#
# Idempotency shares the append path's dedup keys. While a message waits, its dedup key holds
# ``s:<schedule id>`` and lives until ``dedup_ttl_ms`` after the due time; promotion rewrites it to
# the stream offset (KEEPTTL), so a publish retry after promotion answers ``duplicate`` with the
# real offset.

SCHEDULED_PREFIX = "s:"

_NOW_MS = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
"""

# KEYS[1] = delayed zset, KEYS[2] = data hash, KEYS[3] = id counter, KEYS[4..] = dedup keys.
# ARGV[1] = dedup TTL ms; then per record: dedup index (0 = none, i means KEYS[i + 3]), due ms,
# encoded entry. Reply: flat [schedule id, due ms, dupflag, offset ('' unless the duplicate was
# already promoted), ...].
SCHEDULE_LUA = (
    _NOW_MS
    + """
local zset, data, seq = KEYS[1], KEYS[2], KEYS[3]
local ttl = tonumber(ARGV[1])
local out = {}
for i = 2, #ARGV, 3 do
  local d = tonumber(ARGV[i])
  local due = ARGV[i + 1]
  local found = false
  if d > 0 then
    found = redis.call('GET', KEYS[d + 3])
  end
  if found then
    redis.call('SET', KEYS[d + 3], found,
               'KEEPTTL')  -- replicated, so WAIT covers the first write too
  end
  if found and string.sub(found, 1, 2) == 's:' then
    local sid = string.sub(found, 3)
    local score = redis.call('ZSCORE', zset, sid)
    out[#out + 1] = sid
    out[#out + 1] = score or due
    out[#out + 1] = 1
    out[#out + 1] = ''
  elseif found then
    out[#out + 1] = ''
    out[#out + 1] = ''
    out[#out + 1] = 1
    out[#out + 1] = found
  else
    local sid = string.format('%016d', redis.call('INCR', seq))
    redis.call('ZADD', zset, due, sid)
    redis.call('HSET', data, sid, ARGV[i + 2])
    if d > 0 then
      local px = ttl + math.max(0, tonumber(due) - now)
      redis.call('SET', KEYS[d + 3], 's:' .. sid, 'PX', string.format('%.0f', px), 'NX')
    end
    out[#out + 1] = sid
    out[#out + 1] = due
    out[#out + 1] = 0
    out[#out + 1] = ''
  end
end
return out
"""
)

# KEYS[1] = delayed zset, KEYS[2] = data hash, KEYS[3] = the stream.
# ARGV[1] = limit, ARGV[2] = approximate max length (0 = unbounded), ARGV[3] = the partition's dedup
# key prefix. Reply: the new offsets, in (due, schedule id) order. The dedup keys are built here
# from the prefix; they share the hash tag, so they are in the script's slot.
PROMOTE_LUA = (
    _NOW_MS
    + XADD_LUA
    + """
local zset, data, log = KEYS[1], KEYS[2], KEYS[3]
local maxlen = tonumber(ARGV[2])
local function decode(blob)
  local parts, pos, n = {}, 1, #blob
  while pos <= n do
    local colon = string.find(blob, ':', pos, true)
    local len = tonumber(string.sub(blob, pos, colon - 1))
    parts[#parts + 1] = string.sub(blob, colon + 1, colon + len)
    pos = colon + len + 1
  end
  return parts
end
local due = redis.call('ZRANGEBYSCORE', zset, '-inf', string.format('%.0f', now), 'LIMIT', 0,
                      tonumber(ARGV[1]))
local out = {}
for _, sid in ipairs(due) do
  local blob = redis.call('HGET', data, sid)
  redis.call('ZREM', zset, sid)
  if blob then
    redis.call('HDEL', data, sid)
    local parts = decode(blob)
    local id = xadd(log, maxlen, parts, 2, #parts)
    if parts[1] ~= '' then
      local dk = ARGV[3] .. parts[1]
      if redis.call('GET', dk) == 's:' .. sid then
        redis.call('SET', dk, id, 'KEEPTTL')
      end
    end
    out[#out + 1] = id
  end
end
return out
"""
)

SCHEDULE_SCRIPT = LuaScript.of(SCHEDULE_LUA)
PROMOTE_SCRIPT = LuaScript.of(PROMOTE_LUA)


def encode_delayed(record: Record) -> bytes:
    """The stored form of a delayed record: netstrings of the idempotency key then the XADD
    fields."""
    parts = [(record.idempotency_key or "").encode(), *encode_fields(record)]
    return b"".join(b"%d:%s" % (len(part), part) for part in parts)


def build_schedule_call(
    topic: str, partition: int, items: Sequence[tuple[Record, int]], options: AppendOptions
) -> ScriptCall:
    """Lay out one partition's (record, due ms) pairs as the schedule script's KEYS and ARGV."""
    keys = [delayed_key(topic, partition), delayed_data_key(topic, partition),
            delayed_seq_key(topic, partition)]
    args: list[Any] = [options.dedup_ttl_ms]
    for record, due_ms in items:
        dedup_index = 0
        if record.idempotency_key is not None:
            keys.append(dedup_key(topic, partition, record.idempotency_key))
            dedup_index = len(keys) - 3
        args += (dedup_index, int(due_ms), encode_delayed(record))
    return ScriptCall(partition, keys, args, SCHEDULE_SCRIPT)


def parse_schedule_reply(partition: int, reply: Sequence[Any]) -> list[ScheduledResult]:
    """Turn the schedule script's flat reply into results in record order."""
    results = []
    for sid, due, flag, offset in zip(reply[0::4], reply[1::4], reply[2::4], reply[3::4],
                                      strict=True):
        stream_offset = _text(offset) or None
        due_ms = timestamp_ms(stream_offset) if stream_offset else int(float(_text(due)))
        results.append(ScheduledResult(partition, _text(sid), due_ms, bool(int(flag)),
                                       stream_offset))
    return results


def promote_keys_and_args(
    topic: str, partition: int, limit: int, max_length: int | None
) -> tuple[list[str], list[Any]]:
    """KEYS and ARGV of one promote script call."""
    keys = [delayed_key(topic, partition), delayed_data_key(topic, partition),
            log_key(topic, partition)]
    return keys, [limit, max_length or 0, dedup_prefix(topic, partition)]


def parse_promote_reply(partition: int, reply: Sequence[Any]) -> list[AppendResult]:
    """The promote script's offsets as AppendResults, in promotion order."""
    return [AppendResult(partition, _text(offset)) for offset in reply]


def _text(raw: bytes | str | int) -> str:
    return raw.decode() if isinstance(raw, bytes) else str(raw)
