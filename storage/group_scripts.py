"""The Lua of consumer-group reads and claims that must not interleave with another reader of the
group (a read capped at an offset, a claim of given ids that are idle long enough), and the small
group writes that go on when Redis is at its maxmemory."""

from __future__ import annotations

from storage.wire.scripts import LuaScript

# groups_of(key): the stream's consumer groups by name, each its XINFO GROUPS fields by name (nil
# when the key holds no stream); stream_info(key): its XINFO STREAM fields by name.
INFO_LUA = """local function by_name(flat)
  local fields = {}
  for i = 1, #flat, 2 do fields[flat[i]] = flat[i + 1] end
  return fields
end
local function groups_of(key)
  local ok, rows = pcall(redis.call, 'XINFO', 'GROUPS', key)
  if not ok then return nil end
  local groups = {}
  for _, row in ipairs(rows) do
    local fields = by_name(row)
    groups[fields['name']] = fields
  end
  return groups
end
local function stream_info(key)
  return by_name(redis.call('XINFO', 'STREAM', key))
end
"""

# XREADGROUP > of at most ARGV[3] entries, none after offset ARGV[4]: counts what lies between the
# group's last delivered entry and the cap, then reads that many (one script, so no other reader
# of the group moves it in between).
READ_UNTIL_LUA = INFO_LUA + """
local groups = groups_of(KEYS[1])
if not groups then
  return redis.error_reply('NOGROUP no stream ' .. KEYS[1])
end
if not groups[ARGV[1]] then
  return redis.error_reply('NOGROUP no group ' .. ARGV[1])
end
local last = groups[ARGV[1]]['last-delivered-id']
local ahead = redis.call('XRANGE', KEYS[1], '(' .. last, ARGV[4], 'COUNT', ARGV[3])
if #ahead == 0 then
  return false
end
return redis.call('XREADGROUP', 'GROUP', ARGV[1], ARGV[2], 'COUNT', #ahead, 'STREAMS', KEYS[1],
                  '>')
"""
READ_UNTIL_SCRIPT = LuaScript.of(READ_UNTIL_LUA)

# XCLAIM of the ids among ARGV[4..] pending and idle at least ARGV[3] ms, for consumer ARGV[2] of
# group ARGV[1]: {those ids, their delivery counts before, XCLAIM's reply}. Each XPENDING seeks
# one id, where XPENDING ... IDLE would walk the whole pending list to find them.
CLAIM_IDS_LUA = """
local ids, counts = {}, {}
local min_idle = tonumber(ARGV[3])
for i = 4, #ARGV do
  local row = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[i], ARGV[i], 1)[1]
  if row and row[3] >= min_idle then
    ids[#ids + 1] = ARGV[i]
    counts[#counts + 1] = row[4]
  end
end
if #ids == 0 then
  return {{}, {}, {}}
end
return {ids, counts, redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], ARGV[3], unpack(ids))}
"""
CLAIM_IDS_SCRIPT = LuaScript.of(CLAIM_IDS_LUA)

# XACK of the IDs ARGV[2..] for group ARGV[1] on every key in KEYS (a partition's log and the
# group's catch-up stream): a group moves between them atomically with its pending entries, so
# acking both in one script counts the acks wherever it is; asked one after the other, a move in
# between would answer 0 on each. IDs go in runs that Lua's unpack takes. Allow-oom: it frees.
ACK_SCRIPT = LuaScript.of("""#!lua flags=allow-oom
local acked = 0
for first = 2, #ARGV, 4000 do
  local last = math.min(first + 3999, #ARGV)
  for _, key in ipairs(KEYS) do
    acked = acked + redis.call('XACK', key, ARGV[1], unpack(ARGV, first, last))
  end
end
return acked
""")

# XCLAIM ... IDLE ARGV[3] JUSTID of the IDs ARGV[4..] for consumer ARGV[2] of group ARGV[1], on the
# key of KEYS that holds the group (as ACK_SCRIPT: found and claimed in one script); 0 when none
# does. Allow-oom, as XCLAIM itself: a nack or an extend works on a full node (a few bytes at most).
SET_IDLE_SCRIPT = LuaScript.of("#!lua flags=allow-oom\n" + INFO_LUA + """
for _, key in ipairs(KEYS) do
  if (groups_of(key) or {})[ARGV[1]] then
    for first = 4, #ARGV, 4000 do
      local claim = {'XCLAIM', key, ARGV[1], ARGV[2], 0}
      for i = first, math.min(first + 3999, #ARGV) do claim[#claim + 1] = ARGV[i] end
      for _, word in ipairs({'IDLE', ARGV[3], 'JUSTID'}) do claim[#claim + 1] = word end
      redis.call(unpack(claim))
    end
    return 1
  end
end
return 0
""")

# The group bookkeeping a full node still takes (``allow-oom``): creating a group and parking a
# key are a few bytes each, bounded by the group quota and the keys in flight, and without them a
# full partition could not be consumed, which is what makes room again.
CREATE_GROUP_SCRIPT = LuaScript.of("""#!lua flags=allow-oom
local ok, err = pcall(redis.call, 'XGROUP', 'CREATE', KEYS[1], ARGV[1], ARGV[2], 'MKSTREAM')
if ok then
  return 1
end
local text = type(err) == 'table' and err.err or tostring(err)
if string.find(text, 'BUSYGROUP', 1, true) then
  return 0
end
return redis.error_reply(text)
""")
PARK_SCRIPT = LuaScript.of("""#!lua flags=allow-oom
return redis.call('HSET', KEYS[1], unpack(ARGV))
""")
