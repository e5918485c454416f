"""A consumer group placed inside the archive reads it through a catch-up stream in its partition's
slot: archived entries copied in bounded windows with their own IDs, under a consumer group of the
same name, until the group reaches the log's first entry and moves onto the log."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from storage.archive.manifest import (
    OLDER_LUA,
    catch_up_key,
    catching_up_key,
    segment_refs,
    segments_key,
)
from storage.archive.tier import ArchiveTier
from storage.cluster import ClusterRouter
from storage.codec import offset_key
from storage.group_scripts import INFO_LUA
from storage.keys import log_key, slot_of
from storage.models import GroupPartitionState
from storage.wire.connection import NodeAddress
from storage.wire.lanes import NodeLanes
from storage.wire.scripts import LuaScript, run_script

# Undeclared keys. Redis asks a script to name in KEYS every key it touches. ABANDON and STATES here
# and COMMIT's pass-behind (storage/archive/manifest.py) also touch the catch-up streams of groups
# they find as they run (in the partition's set, or behind a segment), named from a prefix: a
# caller could list them only with a read before the script and a retry when they changed. They
# are safe as they are: every key of a partition carries its hash tag, so these streams live in
# the slot, and on the node, of the keys the script declares, and Redis Cluster runs the script
# there atomically and refuses any access to another slot.

# what one fill copies at most: the catch-up stream's undelivered part stays this small
WINDOW_ENTRIES = 1_000
WINDOW_BYTES = 1 << 20

# KEYS: the log, the group's catch-up stream, the manifest's segments, the partition's set of
# groups catching up. ARGV: group, position (an ID, or $), mode (create: only a group that exists
# nowhere yet; seek: wherever it is). A position before the archive's last offset puts the group
# on the catch-up stream (off the log: a read there finds no group), else on the log. 1: catching
# up, 0: on the log, -1: left where it was. Runs on a full node too (allow-oom): a few bytes.
PLACE = LuaScript.of("#!lua flags=allow-oom\n" + OLDER_LUA + INFO_LUA + """
if ARGV[3] == 'create' and ((groups_of(KEYS[1]) or {})[ARGV[1]]
                            or (groups_of(KEYS[2]) or {})[ARGV[1]]) then
  return -1
end
local tip = redis.call('XREVRANGE', KEYS[3], '+', '-', 'COUNT', 1)[1]
redis.call('DEL', KEYS[2])
if ARGV[2] ~= '$' and tip and older(ARGV[2], tip[1]) then
  pcall(redis.call, 'XGROUP', 'DESTROY', KEYS[1], ARGV[1])
  redis.call('XGROUP', 'CREATE', KEYS[2], ARGV[1], ARGV[2], 'MKSTREAM')
  redis.call('SADD', KEYS[4], ARGV[1])
  return 1
end
redis.call('SREM', KEYS[4], ARGV[1])
if not pcall(redis.call, 'XGROUP', 'CREATE', KEYS[1], ARGV[1], ARGV[2], 'MKSTREAM') then
  redis.call('XGROUP', 'SETID', KEYS[1], ARGV[1], ARGV[2])
end
return 0
""")

# KEYS[1]: a catch-up stream; ARGV[1]: its group. {last generated ID, the group's last delivered,
# its oldest pending or false}, or false when the group is not catching up.
PROGRESS = LuaScript.of(INFO_LUA + """
local group = (groups_of(KEYS[1]) or {})[ARGV[1]]
if not group then return false end
local pending = redis.call('XPENDING', KEYS[1], ARGV[1])
return {stream_info(KEYS[1])['last-generated-id'], group['last-delivered-id'], pending[2]}
""")

# KEYS[1]: a catch-up stream. ARGV: what it may lose (XTRIM MINID), then per entry its ID, its
# number of fields and the fields. Entries a concurrent fill copied first are skipped; how many
# went in. Allow-oom: a window is small and bounded, and reads keep working on a full node.
FILL = LuaScript.of("#!lua flags=allow-oom\n" + OLDER_LUA + INFO_LUA + """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('XTRIM', KEYS[1], 'MINID', ARGV[1])
local last, added, i = stream_info(KEYS[1])['last-generated-id'], 0, 2
while i <= #ARGV do
  local id, count = ARGV[i], tonumber(ARGV[i + 1])
  if older(last, id) then
    redis.call('XADD', KEYS[1], id, unpack(ARGV, i + 2, i + 1 + count))
    last, added = id, added + 1
  end
  i = i + 2 + count
end
return added
""")

# KEYS as PLACE's; ARGV[1]: the group. Once everything copied was delivered and settled and the
# archive holds nothing after it, the group moves onto the log at that offset (the log's first
# entry comes right after the archive's last) and its catch-up stream goes. 1: moved, 0: not
# yet, -1: not catching up. Allow-oom: it frees far more than it writes.
FINISH = LuaScript.of("#!lua flags=allow-oom\n" + OLDER_LUA + INFO_LUA + """
local group = (groups_of(KEYS[2]) or {})[ARGV[1]]
if not group then return -1 end
local delivered = group['last-delivered-id']
if group['pending'] > 0 or older(delivered, stream_info(KEYS[2])['last-generated-id']) then
  return 0
end
local tip = redis.call('XREVRANGE', KEYS[3], '+', '-', 'COUNT', 1)[1]
if tip and older(delivered, tip[1]) then return 0 end
if not pcall(redis.call, 'XGROUP', 'CREATE', KEYS[1], ARGV[1], delivered, 'MKSTREAM') then
  redis.call('XGROUP', 'SETID', KEYS[1], ARGV[1], delivered)
end
redis.call('DEL', KEYS[2])
redis.call('SREM', KEYS[4], ARGV[1])
return 1
""")

# KEYS: the log, the partition's set of groups catching up; ARGV[1]: the prefix of their catch-up
# streams (undeclared keys: see above). Every group catching up back on the log at its start (a
# purge then moves it to its cut).
ABANDON = LuaScript.of("#!lua flags=allow-oom\n" + """
for _, name in ipairs(redis.call('SMEMBERS', KEYS[2])) do
  redis.call('DEL', ARGV[1] .. name)
  pcall(redis.call, 'XGROUP', 'CREATE', KEYS[1], name, '0-0', 'MKSTREAM')
end
return redis.call('DEL', KEYS[2])
""")


# KEYS: the log, the partition's set of groups catching up, the manifest's segments; ARGV[1]: the
# prefix of their catch-up streams (undeclared keys: see above). Per group catching up: its name,
# last delivered offset, pending count, lag counting every archived segment after its position
# whole and the log's length, and the manifest entry of the segment its position is inside (its
# entries after the position are then counted from the file), else false.
STATES = LuaScript.of(OLDER_LUA + INFO_LUA + """
local states, hot = {}, redis.call('XLEN', KEYS[1])
for _, name in ipairs(redis.call('SMEMBERS', KEYS[2])) do
  local group = (groups_of(ARGV[1] .. name) or {})[name]
  if group then
    local delivered, lag, inside = group['last-delivered-id'], hot, false
    for i, segment in ipairs(redis.call('XRANGE', KEYS[3], '(' .. delivered, '+')) do
      local fields = by_name(segment[2])
      lag = lag + tonumber(fields['count'])
      if i == 1 and not older(delivered, fields['first']) then inside = segment end
    end
    for _, part in ipairs({name, delivered, group['pending'], lag, inside}) do
      table.insert(states, part)
    end
  end
end
return states
""")


async def catch_up_states(lanes: NodeLanes, address: NodeAddress, topic: str, partition: int,
                          tier: ArchiveTier | None) -> dict[str, GroupPartitionState]:
    """The partition's groups catching up (asked of the node holding its slot): each one's
    position in the archive, pending count and lag across both tiers (``STATES``; with ``tier``,
    the segment a position is inside counted from its file, else whole)."""
    keys = [log_key(topic, partition), catching_up_key(topic, partition),
            segments_key(topic, partition)]
    flat = await run_script(lanes, address, STATES, keys, [catch_up_key(topic, partition, "")])
    states = {}
    for i in range(0, len(flat), 5):
        delivered, lag = _text(flat[i + 1]), int(flat[i + 3])
        inside = segment_refs([flat[i + 4]]) if flat[i + 4] else []
        if inside and tier is not None:
            lag += await tier.count_after(inside[0], delivered) - inside[0].count
        states[_text(flat[i])] = GroupPartitionState(partition, True, delivered,
                                                     int(flat[i + 2]), None, lag)
    return states


@dataclass(frozen=True, slots=True)
class Progress:
    """Where a catch-up stream stands: the last ID copied into it, its group's last delivered
    offset and oldest pending one."""

    copied: str
    delivered: str
    oldest_pending: str | None

    @property
    def copy_after(self) -> str:
        """Where the next window starts: after what was copied, or the group's start."""
        return max(self.copied, self.delivered, key=offset_key)

    @property
    def trim_below(self) -> str:
        """What the stream may lose: everything delivered and settled."""
        return self.oldest_pending or self.delivered


class CatchUp:
    """Places groups on the log or a catch-up stream, fills and finishes catch-up streams."""

    def __init__(self, router: ClusterRouter, lanes: NodeLanes, tier: ArchiveTier) -> None:
        self._router = router
        self._lanes = lanes
        self.tier = tier

    async def place(self, topic: str, partition: int, group: str, position: str, *,
                    seek: bool) -> int:
        """Put ``group`` at ``position`` (an ID or ``$``): on a catch-up stream when the archive
        holds entries after it (1), else on the log (0); without ``seek`` only a group that does
        not exist yet (-1: left as it was)."""
        args = [group, position, "seek" if seek else "create"]
        return int(await self._script("group_place", topic, partition, group, PLACE, args))

    async def abandon(self, topic: str, partition: int) -> None:
        """Put every group catching up on the partition back on the log at its start, their
        catch-up streams deleted (a purge, which then moves the log's groups to its cut)."""
        await self._script("catch_up_abandon", topic, partition, "", ABANDON,
                           [catch_up_key(topic, partition, "")],
                           keys=[log_key(topic, partition), catching_up_key(topic, partition)])

    async def finish(self, topic: str, partition: int, group: str) -> int:
        """Move a caught-up group onto the log (1); 0 while it has entries to read or settle or
        the archive has more; -1 when it is not catching up."""
        return int(await self._script("catch_up_finish", topic, partition, group, FINISH,
                                      [group]))

    async def fill(self, topic: str, partition: int, group: str) -> int:
        """Copy the next window of archived entries into the group's catch-up stream (and trim
        what it delivered and settled); how many were copied (0: the archive has no more)."""
        key = catch_up_key(topic, partition, group)
        progress = await self.progress(topic, partition, group)
        if progress is None:
            return 0
        items = _window(await self.tier.archived_after(topic, partition, progress.copy_after,
                                                        WINDOW_ENTRIES))
        if not items:
            return 0
        args: list[Any] = [progress.trim_below]
        for entry_id, fields in items:
            args += [entry_id, len(fields), *fields]
        await self._script("catch_up_fill", topic, partition, group, FILL, args, keys=[key])
        return len(items)

    async def positions(self, topic: str, partition: int) -> dict[str, str]:
        """Each group catching up on the partition and where its next copy starts."""
        members = await self._router.call(
            "catch_up_groups", self._router.settings.read_deadline_s,
            lambda: self._lanes.execute_one(self._router.node_for_slot(slot_of(topic, partition)),
                                            ("SMEMBERS", catching_up_key(topic, partition))))
        positions = {}
        for group in sorted(map(_text, members)):
            progress = await self.progress(topic, partition, group)
            if progress is not None:
                positions[group] = progress.copy_after
        return positions

    async def progress(self, topic: str, partition: int, group: str) -> Progress | None:
        """Where the group's catch-up stream stands; None when it is not catching up."""
        reply = await self._script("catch_up_progress", topic, partition, group, PROGRESS,
                                   [group], keys=[catch_up_key(topic, partition, group)])
        if not reply:
            return None
        copied, delivered, oldest = reply
        return Progress(_text(copied), _text(delivered), None if oldest is None else _text(oldest))

    async def _script(self, what: str, topic: str, partition: int, group: str,
                      script: LuaScript, args: list[Any],
                      keys: list[str] | None = None) -> Any:
        slot = slot_of(topic, partition)
        keys = keys or [log_key(topic, partition), catch_up_key(topic, partition, group),
                        segments_key(topic, partition), catching_up_key(topic, partition)]

        async def op() -> Any:
            return await run_script(self._lanes, self._router.node_for_slot(slot), script, keys,
                                    args)

        return await self._router.call(what, self._router.settings.write_deadline_s, op)


def _window(items: list[list[Any]]) -> list[list[Any]]:
    """The items up to ``WINDOW_BYTES`` of fields (at least one)."""
    size = 0
    for index, (_, fields) in enumerate(items):
        size += sum(len(part) for part in fields)
        if size >= WINDOW_BYTES:
            return items[:index + 1]
    return items


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
