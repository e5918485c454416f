"""The append scripts' Lua: one partition's records appended atomically, deduplicated per record
(``APPEND_LUA``) or per batch (``APPEND_BATCH_LUA``); both reply ``[offset, dupflag, ...]``."""

from __future__ import annotations

from storage.wire.errors import ResponseError
from storage.wire.scripts import LuaScript

# One entry of fields t[first..last] on a stream, trimmed to about maxlen entries (0: untrimmed).
XADD_LUA = """
local function xadd(log, maxlen, t, first, last)
  if maxlen > 0 then
    return redis.call('XADD', log, 'MAXLEN', '~', maxlen, '*', unpack(t, first, last))
  end
  return redis.call('XADD', log, '*', unpack(t, first, last))
end
"""

# KEYS[1] = the partition's stream; KEYS[2..] = dedup keys of the records that carry an idempotency
# key. ARGV[1] = approximate max length (0 = unbounded); ARGV[2] = dedup TTL in ms; then per record:
# dedup index (0 = none, i means KEYS[i + 1]), field count, fields... Reply: a flat array
# [offset, dupflag, offset, dupflag, ...] in record order.
APPEND_LUA = XADD_LUA + """
local log = KEYS[1]
local maxlen = tonumber(ARGV[1])
local ttl = ARGV[2]
local out = {}
local i = 3
local n = #ARGV
while i <= n do
  local d = tonumber(ARGV[i])
  local last = i + 1 + tonumber(ARGV[i + 1])
  local found = false
  if d > 0 then
    found = redis.call('GET', KEYS[d + 1])
  end
  if found then
    -- A replicated write on the duplicate path, so a following WAIT on this connection also covers
    -- the original entry (replication is in order); a bare GET would let acks=all confirm an
    -- unreplicated write.
    redis.call('SET', KEYS[d + 1], found, 'KEEPTTL')
    out[#out + 1] = found
    out[#out + 1] = 1
  else
    local id = xadd(log, maxlen, ARGV, i + 2, last)
    if d > 0 then
      redis.call('SET', KEYS[d + 1], id, 'PX', ttl, 'NX')
    end
    out[#out + 1] = id
    out[#out + 1] = 0
  end
  i = last + 1
end
return out
"""

BATCH_KEY_REUSED = "IDEMPOTENCY_CONFLICT"  # the batch script's own error code


def is_reused_batch_key(reply: BaseException) -> bool:
    """Whether an error reply is the batch script refusing a key used for another batch."""
    return isinstance(reply, ResponseError) and str(reply).startswith(BATCH_KEY_REUSED)


# A whole batch's records in this partition, idempotent as one: KEYS[2] is the batch's marker;
# ARGV[1] = approximate max length, ARGV[2] = dedup TTL in ms, then per record: field count,
# fields... The marker holds the records' offsets; a retry answers them as duplicates.
APPEND_BATCH_LUA = XADD_LUA + """
local marker = KEYS[2]
local n = #ARGV
local out = {}
local found = redis.call('GET', marker)
if found then
  -- replicated, so a following WAIT also covers the first write (see the script above)
  redis.call('SET', marker, found, 'KEEPTTL')
  local count = 0
  local i = 3
  while i <= n do
    count = count + 1
    i = i + 1 + tonumber(ARGV[i])
  end
  for id in string.gmatch(found, '%S+') do
    out[#out + 1] = id
    out[#out + 1] = 1
  end
  if #out ~= 2 * count then
    return redis.error_reply('""" + BATCH_KEY_REUSED + """ the key was used for another batch')
  end
  return out
end
local log = KEYS[1]
local maxlen = tonumber(ARGV[1])
local ids = {}
local i = 3
while i <= n do
  local last = i + tonumber(ARGV[i])
  local id = xadd(log, maxlen, ARGV, i + 1, last)
  ids[#ids + 1] = id
  out[#out + 1] = id
  out[#out + 1] = 0
  i = last + 1
end
redis.call('SET', marker, table.concat(ids, ' '), 'PX', ARGV[2])
return out
"""


APPEND_SCRIPT = LuaScript.of(APPEND_LUA)
APPEND_SHA = APPEND_SCRIPT.sha
APPEND_BATCH_SCRIPT = LuaScript.of(APPEND_BATCH_LUA)
