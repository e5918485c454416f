"""A partition's archive manifest in Redis, in the stream's slot: one entry per committed segment
(its ID the segment's last offset) and the ownership epoch that committed last. Committing a
segment and trimming its entries from the stream are one script: an entry is in exactly one tier."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from storage.archive.segments import SegmentInfo
from storage.codec import offset_key
from storage.errors import ArchiveConflict
from storage.group_scripts import INFO_LUA
from storage.keys import PREFIX, log_key, partition_tag
from storage.models import ArchivedRange
from storage.wire.scripts import LuaScript

# the most pending entries a group may have for a pressed move to pass it (they are copied, in one
# script): one with more holds the move
PASS_MAX_PENDING = 10_000

# older(a, b): stream ID a is before b (Lua numbers: exact for every ms, and for sequences below
# 2**53, which a stream never reaches in practice)
OLDER_LUA = """local function older(a, b)
  local ams, aseq = string.match(a, '^(%d+)-(%d+)$')
  local bms, bseq = string.match(b, '^(%d+)-(%d+)$')
  ams, bms = tonumber(ams), tonumber(bms)
  return ams < bms or (ams == bms and tonumber(aseq) < tonumber(bseq))
end
"""

# pass_behind(name, group): a group reading the stream that is behind the segment moved onto a
# catch-up stream (prefix ARGV[9]): its pending entries copied there and pending again for the same
# consumers with their idle times and delivery counts, its position kept, its group on the stream
# destroyed; it then reads the archive (storage/archive/catch_up.py, where "Undeclared keys" says
# why its catch-up stream is not in KEYS).
PASS_BEHIND_LUA = """local function pass_behind(name, group)
  local key = ARGV[9] .. name
  redis.call('DEL', key)
  redis.call('XGROUP', 'CREATE', key, name, '0-0', 'MKSTREAM')
  if group['pending'] > 0 then
    for _, row in ipairs(redis.call('XPENDING', KEYS[1], name, '-', '+', group['pending'])) do
      local entry = redis.call('XRANGE', KEYS[1], row[1], row[1])[1]
      if entry then
        redis.call('XADD', key, row[1], unpack(entry[2]))
        redis.call('XREADGROUP', 'GROUP', name, row[2], 'COUNT', 1, 'STREAMS', key, '>')
        redis.call('XCLAIM', key, name, row[2], 0, row[1], 'IDLE', row[3], 'RETRYCOUNT', row[4],
                   'JUSTID')
      end
    end
  end
  redis.call('XGROUP', 'SETID', key, name, group['last-delivered-id'])
  redis.call('XGROUP', 'DESTROY', KEYS[1], name)
  redis.call('SADD', KEYS[5], name)
end
"""

# KEYS: the stream, the manifest's stream and hash, the archive readers, the groups catching up.
# ARGV: epoch, first, last, the ID after last, count, bytes, name, mode, the catch-up streams'
# prefix, the most pending entries a group passed may have. Refused when the stream is gone (GONE:
# its topic was deleted), when an owner of a later epoch committed (FENCED), when the segment does
# not start after the last one (OVERLAP), when the stream still holds an entry older than the
# segment (GAP: it would be stranded), or when a group reading the stream has not delivered and
# settled it all (BEHIND: created or moved back since the mover looked) unless the mode is `pass`
# (memory pressed) and it has few enough pending entries: then it moves to a catch-up stream.
# Runs on a full node too (allow-oom): it frees the stream far more than it adds.
COMMIT = LuaScript.of("#!lua flags=allow-oom\n" + OLDER_LUA + INFO_LUA + PASS_BEHIND_LUA + """
if redis.call('EXISTS', KEYS[1]) == 0 then
  return redis.error_reply('GONE the partition was deleted')
end
local held = tonumber(redis.call('HGET', KEYS[3], 'epoch') or '0')
if tonumber(ARGV[1]) < held then
  return redis.error_reply('FENCED ' .. held)
end
local tip = redis.call('XREVRANGE', KEYS[2], '+', '-', 'COUNT', 1)[1]
if tip and not older(tip[1], ARGV[2]) then
  return redis.error_reply('OVERLAP ' .. tip[1])
end
local head = redis.call('XRANGE', KEYS[1], '-', '+', 'COUNT', 1)[1]
if head and older(head[1], ARGV[2]) then
  return redis.error_reply('GAP ' .. head[1])
end
local behind = {}
for name, group in pairs(groups_of(KEYS[1])) do
  if redis.call('SISMEMBER', KEYS[4], name) == 0 then
    local late = older(group['last-delivered-id'], ARGV[3])
    if not late and group['pending'] > 0 then
      late = not older(ARGV[3], redis.call('XPENDING', KEYS[1], name)[2])
    end
    if late and (ARGV[8] ~= 'pass' or group['pending'] > tonumber(ARGV[10])) then
      return redis.error_reply('BEHIND ' .. name)
    end
    if late then behind[name] = group end
  end
end
for name, group in pairs(behind) do
  pass_behind(name, group)
end
redis.call('HSET', KEYS[3], 'epoch', ARGV[1])
redis.call('HINCRBY', KEYS[3], 'entries', ARGV[5])
redis.call('HINCRBY', KEYS[3], 'bytes', ARGV[6])
redis.call('XADD', KEYS[2], ARGV[3], 'first', ARGV[2], 'count', ARGV[5], 'bytes', ARGV[6],
           'name', ARGV[7])
return redis.call('XTRIM', KEYS[1], 'MINID', ARGV[4])
""")


# KEYS[1]: the stream, KEYS[2]: its archive readers (``archive_readers_key``). The end (XRANGE
# syntax) of what every consumer group of the stream that reads it has delivered and settled: the
# tightest of each group's last delivered offset (inclusive) and its oldest pending one
# (exclusive); false when no such group.
CONSUMED = LuaScript.of(OLDER_LUA + INFO_LUA + """
local bound, exclusive = nil, false
for name, group in pairs(groups_of(KEYS[1]) or {}) do
  if redis.call('SISMEMBER', KEYS[2], name) == 0 then
    local id, excl = group['last-delivered-id'], false
    if group['pending'] > 0 then
      id, excl = redis.call('XPENDING', KEYS[1], name)[2], true
    end
    if bound == nil or older(id, bound) or (id == bound and excl) then
      bound, exclusive = id, excl
    end
  end
end
if bound == nil then
  return false
end
if exclusive then
  return '(' .. bound
end
return bound
""")


# KEYS: the manifest's stream and hash. ARGV: (ID, name) of the segments to drop, oldest first.
# Each goes only while it is still the manifest's first entry with that name (a rerun, or another
# owner's drop, cannot make a gap), and takes its entries and bytes off the totals. How many went.
EXPIRE = LuaScript.of("""#!lua flags=allow-oom
local dropped = 0
for i = 1, #ARGV, 2 do
  local head = redis.call('XRANGE', KEYS[1], '-', '+', 'COUNT', 1)[1]
  if not head or head[1] ~= ARGV[i] then break end
  local fields = {}
  for j = 1, #head[2], 2 do fields[head[2][j]] = head[2][j + 1] end
  if fields['name'] ~= ARGV[i + 1] then break end
  redis.call('XDEL', KEYS[1], head[1])
  redis.call('HINCRBY', KEYS[2], 'entries', -tonumber(fields['count']))
  redis.call('HINCRBY', KEYS[2], 'bytes', -tonumber(fields['bytes']))
  dropped = dropped + 1
end
return dropped
""")


@dataclass(frozen=True, slots=True)
class SegmentRef:
    """One committed segment as the manifest holds it."""

    name: str
    first_offset: str
    last_offset: str
    count: int
    bytes: int


def segments_key(topic: str, partition: int) -> str:
    """The manifest's stream of committed segments (entry ID = a segment's last offset)."""
    return f"{PREFIX}:{partition_tag(topic, partition)}:segments"


def archive_readers_key(topic: str, partition: int) -> str:
    """The set of the partition's groups that read archived entries from the segments themselves
    (the Spark source's published progress): the mover does not wait for them."""
    return f"{PREFIX}:{partition_tag(topic, partition)}:archive-readers"


def catch_up_key(topic: str, partition: int, group: str) -> str:
    """The stream a group reads archived entries from while it catches up
    (``storage/archive/catch_up.py``)."""
    return f"{PREFIX}:{partition_tag(topic, partition)}:catchup:{group}"


def catching_up_key(topic: str, partition: int) -> str:
    """The set of the partition's groups that read through a catch-up stream."""
    return f"{PREFIX}:{partition_tag(topic, partition)}:catching-up"


def archive_key(topic: str, partition: int) -> str:
    """The manifest's hash: the epoch that committed last, entries and bytes archived."""
    return f"{PREFIX}:{partition_tag(topic, partition)}:archive"


def commit_call(info: SegmentInfo, epoch: int,
                pass_behind: bool) -> tuple[list[str], list[Any]]:
    """The keys and arguments of ``COMMIT`` for a written segment; ``pass_behind``: groups that
    have not consumed it move to catch-up streams instead of refusing it."""
    topic, partition = info.topic, info.partition
    ms, seq = offset_key(info.last_offset)
    keys = [log_key(topic, partition), segments_key(topic, partition),
            archive_key(topic, partition), archive_readers_key(topic, partition),
            catching_up_key(topic, partition)]
    return keys, [epoch, info.first_offset, info.last_offset, f"{ms}-{seq + 1}", info.count,
                  info.bytes, info.name, "pass" if pass_behind else "hold",
                  catch_up_key(topic, partition, ""), PASS_MAX_PENDING]


def expire_call(topic: str, partition: int,
                refs: Sequence[SegmentRef]) -> tuple[list[str], list[Any]]:
    """The keys and arguments of ``EXPIRE`` dropping ``refs`` (the manifest's oldest)."""
    return ([segments_key(topic, partition), archive_key(topic, partition)],
            [part for ref in refs for part in (ref.last_offset, ref.name)])


def expired_prefix(refs: Sequence[SegmentRef], total: int, before: str | None,
                   max_length: int | None) -> list[SegmentRef]:
    """The oldest of ``refs`` (the manifest's, oldest first) that retention drops: each whose last
    offset is before ``before``, or that the whole log (``total`` entries, archived and hot) can
    lose while keeping at least ``max_length``. A segment straddling the cut stays whole."""
    cut = None if before is None else offset_key(before)
    for index, ref in enumerate(refs):
        aged = cut is not None and offset_key(ref.last_offset) < cut
        surplus = max_length is not None and total - ref.count >= max_length
        if not (aged or surplus):
            return list(refs[:index])
        total -= ref.count
    return list(refs)


def range_commands(topic: str, partition: int) -> list[tuple[Any, ...]]:
    """What ``archived_range`` reads: the first and last segment, their count, the totals."""
    key = segments_key(topic, partition)
    return [("XRANGE", key, "-", "+", "COUNT", 1), ("XREVRANGE", key, "+", "-", "COUNT", 1),
            ("XLEN", key), ("HMGET", archive_key(topic, partition), "entries", "bytes")]


def archived_range(replies: Sequence[Any]) -> ArchivedRange:
    """The replies of ``range_commands`` as a range."""
    first, last, segments, (entries, size) = replies
    return ArchivedRange(segment_refs(first)[0].first_offset if first else None,
                         segment_refs(last)[0].last_offset if last else None,
                         int(entries or 0), int(segments), int(size or 0))


def conflict_of(exc: BaseException) -> ArchiveConflict | None:
    """The conflict a refused commit's error reply stands for; None for any other error."""
    text = str(exc)
    for code in ("FENCED", "OVERLAP", "GAP", "GONE", "BEHIND"):
        if text.startswith(code):
            return ArchiveConflict(f"archive commit refused: {text}", fenced=code == "FENCED")
    return None


def segment_refs(items: Sequence[Any]) -> list[SegmentRef]:
    """Manifest entries (XRANGE items of ``segments_key``) as references."""
    refs = []
    for entry_id, fields in items or []:
        values = _field_map(fields)
        refs.append(SegmentRef(values[b"name"].decode(), values[b"first"].decode(),
                               _bytes(entry_id).decode(), int(values[b"count"]),
                               int(values[b"bytes"])))
    return refs


def _field_map(fields: Any) -> dict[bytes, bytes]:
    if isinstance(fields, dict):
        return {_bytes(k): _bytes(v) for k, v in fields.items()}
    return {_bytes(fields[i]): _bytes(fields[i + 1]) for i in range(0, len(fields), 2)}


def _bytes(value: Any) -> bytes:
    return value if isinstance(value, bytes) else str(value).encode()
