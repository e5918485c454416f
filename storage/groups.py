"""RedisGroupStore: the GroupStore port on Redis Stream consumer groups (one group per partition
stream).

The Redis group name is the group name as given, on the partition's stream ``sg:{<topic>/<p>}:log``.

Reads and acks go on the lean connections of the slot's primary (``storage.lean``): a read without
BLOCK and XACK on the shared connection, pipelined with the appends; ``XREADGROUP``/``XREAD ...
BLOCK ms`` on a connection of its own, whose reply may take ``block_ms`` beyond the reply timeout,
so blocked readers never hold up a write. A cancelled or timed-out read closes its connection, so no
late reply answers the next command; entries Redis handed to such a read stay pending and come back
through ``expired``/``claim``. Admin commands (XINFO, XPENDING, XCLAIM, XGROUP) go on the shared
connection too. Everything is retried on transient errors inside the store's deadline
(``ClusterRouter.call``); nothing above this module sees a redis exception.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

from storage.cluster import ClusterRouter
from storage.codec import (
    decode_offset,
    decode_raw_entries,
    offset_key,
    validate_offset,
    validate_offsets,
)
from storage.errors import StorageError
from storage.keys import log_key, parked_keys_key, slot_of, slot_of_key
from storage.lean import NodeLanes
from storage.models import (
    Delivery,
    GroupPartitionState,
    LostRange,
    ParkedKey,
    PendingEntry,
    StoredEntry,
)
from storage.resp import ResponseError, encode_command, encode_command_with_ids
from storage.scripts import LuaScript, run_script

T = TypeVar("T")

# XREADGROUP > of at most ARGV[3] entries, none after offset ARGV[4]: counts what lies between the
# group's last delivered entry and the cap, then reads that many (one script, so no other reader
# of the group moves it in between).
READ_UNTIL_LUA = """
local ok, groups = pcall(redis.call, 'XINFO', 'GROUPS', KEYS[1])
if not ok then
  return redis.error_reply('NOGROUP no stream ' .. KEYS[1])
end
local last
for _, row in ipairs(groups) do
  local name, delivered
  for i = 1, #row, 2 do
    if row[i] == 'name' then name = row[i + 1] end
    if row[i] == 'last-delivered-id' then delivered = row[i + 1] end
  end
  if name == ARGV[1] then last = delivered end
end
if not last then
  return redis.error_reply('NOGROUP no group ' .. ARGV[1])
end
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

EARLIEST = "earliest"
LATEST = "latest"
# XCLAIM IDLE n sets the delivery time to now - n and Redis resets a negative time to *now* (idle
# 0), so an idle beyond the server's epoch time would silently mean "just delivered". Ten years is
# far past any ack timeout and far below the epoch.
MAX_IDLE_MS = 10 * 365 * 24 * 3600 * 1000


def start_id(start: str) -> str:
    """The XGROUP id for a start position: earliest -> "0", latest -> "$", else a validated
    offset."""
    if start == EARLIEST:
        return "0"
    if start == LATEST:
        return "$"
    return validate_offset(start)


def clamp_idle_ms(idle_ms: int) -> int:
    """An idle time Redis will honour (see MAX_IDLE_MS); negative values are rejected."""
    if idle_ms < 0:
        raise ValueError(f"idle_ms must be >= 0, got {idle_ms}")
    return min(idle_ms, MAX_IDLE_MS)


def is_missing_group(exc: BaseException) -> bool:
    """True for the replies meaning the stream or the group does not exist."""
    if not isinstance(exc, ResponseError):
        return False
    text = str(exc)
    return (text.startswith("NOGROUP") or "requires the key to exist" in text
            or text == "no such key")


def is_busy_group(exc: BaseException) -> bool:
    """True for XGROUP CREATE's reply when the group already exists."""
    return isinstance(exc, ResponseError) and str(exc).startswith("BUSYGROUP")


def text(raw: Any) -> str:
    """A reply string (bytes with decode_responses=False) as str."""
    return raw.decode() if isinstance(raw, bytes) else str(raw)


def parse_pending(partition: int, rows: Sequence[Sequence[Any]]) -> list[PendingEntry]:
    """PendingEntry values of an XPENDING range reply's rows: id, consumer, idle ms,
    deliveries."""
    return [PendingEntry(partition, text(offset), text(consumer), int(idle), int(count))
            for offset, consumer, idle, count in rows]


def present(items: Sequence[Any]) -> list[Any]:
    """The ``(id, fields)`` items of a stream reply whose entry still exists (nil items are deleted
    ones)."""
    return [item for item in items if item is not None and item[0] is not None
            and item[1] is not None]


def parse_read_reply(partition: int, reply: Any) -> list[StoredEntry]:
    """Entries of a raw XREADGROUP/XREAD reply for one stream (empty on a BLOCK timeout).

    RESP3 (redis-py's default protocol) answers with a map {stream: items}, RESP2 with [[stream,
    items]].
    """
    if not reply:
        return []
    items = next(iter(reply.values())) if isinstance(reply, dict) else reply[0][1]
    return decode_raw_entries(partition, items)


def info_row(flat: Sequence[Any]) -> dict[str, Any]:
    """One XINFO GROUPS (or CONSUMERS) entry, a flat name/value list, as a map by name."""
    return {text(flat[i]): flat[i + 1] for i in range(0, len(flat) - 1, 2)}


def find_group(infos: Sequence[Mapping[str, Any]], group: str) -> Mapping[str, Any] | None:
    """The XINFO GROUPS row of ``group``, or None."""
    for info in infos:
        if text(info["name"]) == group:
            return info
    return None


def state_from(partition: int, info: Mapping[str, Any] | None,
               oldest: str | None) -> GroupPartitionState:
    """A GroupPartitionState from a group's XINFO GROUPS row (None = no such group) and its oldest
    pending."""
    if info is None:
        return GroupPartitionState(partition, False, None, 0, None, None)
    lag = info.get("lag")
    return GroupPartitionState(
        partition=partition,
        exists=True,
        last_delivered_offset=decode_offset(info.get("last-delivered-id")),
        pending=int(info.get("pending") or 0),
        oldest_pending_offset=oldest,
        lag=None if lag is None else int(lag),
    )


class RedisGroupStore:
    """Consumer groups on a Redis Cluster, sharing the ClusterRouter of a RedisStreamStore.

    Build it with ``RedisGroupStore(router, lanes)`` or take ``RedisStreamStore.groups``; the
    router and the lean connections belong to whoever created them.
    """

    def __init__(self, router: ClusterRouter, lanes: NodeLanes) -> None:
        self._router = router
        self._settings = router.settings
        self._lanes = lanes  # reads (blocking ones on connections of their own) and XACK

    async def ensure_group(self, topic: str, partition: int, group: str, start: str) -> None:
        """Create the group at ``start`` (earliest/latest/offset) with MKSTREAM; an existing group
        stays put."""
        first_id = start_id(start)
        key = log_key(topic, partition)
        await self._write("ensure_group", lambda: self._create(key, group, first_id))

    async def _on(self, key: str, command: tuple[Any, ...]) -> Any:
        """One command on the lean connection of the primary of ``key``'s slot (asked at each
        attempt); an error reply is raised."""
        return await self._router.execute_on(self._lanes, slot_of_key(key), command)

    async def _create(self, key: str, group: str, first_id: str) -> bool:
        """XGROUP CREATE ... MKSTREAM; False when the group already existed."""
        try:
            await self._on(key, ("XGROUP", "CREATE", key, group, first_id, "MKSTREAM"))
        except ResponseError as exc:
            if is_busy_group(exc):
                return False
            raise
        return True

    async def read_new(
        self, topic: str, partition: int, group: str, consumer: str, *, count: int, block_ms: int,
        until: str | None = None
    ) -> list[StoredEntry]:
        """Never-delivered entries (XREADGROUP >), blocking up to ``block_ms`` (0 = no block);
        with ``until``, none after that offset and no blocking (``READ_UNTIL_LUA``).

        A missing group (or stream) is created from "earliest" and the read retried once. A read
        that does not block goes on the lean connection of the slot's primary (pipelined with the
        acks); a blocking one holds a lean connection of its own (``NodeLanes.execute_blocking``).
        """
        if count <= 0 or block_ms < 0 or (until is not None and block_ms):
            raise ValueError("count must be > 0, block_ms >= 0, and 0 with until")
        key, slot = log_key(topic, partition), slot_of(topic, partition)
        cap = None if until is None else validate_offset(until)

        async def read() -> list[StoredEntry]:
            if cap is None:
                return await self._read_once(key, slot, partition, group, consumer, count, block_ms)
            return await self._read_until(key, slot, partition, group, consumer, count, cap)

        try:
            return await read()
        except _MissingGroup:
            await self._write("read_new", lambda: self._create(key, group, "0"))
        try:
            return await read()
        except _MissingGroup as exc:
            raise StorageError(f"read_new: group {group!r} vanished again on {key}") from exc

    async def _read_once(
        self, key: str, slot: int, partition: int, group: str, consumer: str, count: int,
        block_ms: int
    ) -> list[StoredEntry]:
        block = ("BLOCK", block_ms) if block_ms else ()
        command = encode_command(("XREADGROUP", "GROUP", group, consumer, "COUNT", count, *block,
                                  "STREAMS", key, ">"))
        reply = await self._router.call("read_new",
                                        self._settings.read_deadline_s + block_ms / 1000,
                                        lambda: self._read_lean(slot, command, block_ms))
        return parse_read_reply(partition, reply)

    async def _read_until(self, key: str, slot: int, partition: int, group: str, consumer: str,
                          count: int, until: str) -> list[StoredEntry]:
        async def op() -> Any:
            try:
                return await run_script(self._lanes, self._router.node_for_slot(slot),
                                        READ_UNTIL_SCRIPT, [key], [group, consumer, count, until])
            except ResponseError as exc:
                if is_missing_group(exc):
                    raise _MissingGroup(str(exc)) from exc
                raise

        reply = await self._router.call("read_new", self._settings.read_deadline_s, op)
        return parse_read_reply(partition, reply)

    async def _read_lean(self, slot: int, command: bytes, block_ms: int) -> Any:
        """An XREADGROUP or XREAD on the lean connections of the slot's primary: the shared one
        without BLOCK (pipelined with the acks), a connection of its own with it. Its raw RESP2
        reply (nil when nothing is new); an error reply is raised for the router to retry (MOVED
        refreshes the slot map)."""
        address = self._router.node_for_slot(slot)
        if block_ms:
            reply = await self._lanes.execute_blocking(address, command, block_ms / 1000)
        else:
            (reply,) = await self._lanes.execute(address, [command], exclusive=False)
        if isinstance(reply, BaseException):
            if is_missing_group(reply):
                raise _MissingGroup(str(reply)) from reply
            raise reply
        return reply

    async def read_after(
        self, topic: str, partition: int, *, after: str | None, count: int, block_ms: int
    ) -> list[StoredEntry]:
        """Entries strictly after ``after`` (None: from the first), blocking up to ``block_ms``
        (XREAD BLOCK).

        No group is involved: this is the shared tail of broadcast subscriptions. A missing stream
        blocks and returns [] like an empty one.
        """
        if count <= 0 or block_ms < 0:
            raise ValueError("count must be > 0 and block_ms >= 0")
        position = "0-0" if after is None else validate_offset(after)
        block = ("BLOCK", block_ms) if block_ms else ()
        command = encode_command(("XREAD", "COUNT", count, *block, "STREAMS",
                                  log_key(topic, partition), position))
        slot = slot_of(topic, partition)
        reply = await self._router.call("read_after",
                                        self._settings.read_deadline_s + block_ms / 1000,
                                        lambda: self._read_lean(slot, command, block_ms))
        return parse_read_reply(partition, reply)

    async def ack(self, topic: str, partition: int, group: str, offsets: Sequence[str]) -> int:
        """XACK the offsets; returns how many were pending. An empty list is 0 without a call."""
        if not offsets:
            return 0
        ids = validate_offsets(offsets)
        key, slot = log_key(topic, partition), slot_of(topic, partition)
        return await self._write("ack", lambda: self._ack_lean(slot, key, group, ids))

    async def _ack_lean(self, slot: int, key: str, group: str, ids: Sequence[str]) -> int:
        """XACK on the lean connection of the slot's primary (far less client CPU than through
        redis-py); an error reply is raised for ``_write`` to retry (MOVED refreshes the slot map
        first)."""
        (reply,) = await self._lanes.execute(self._router.node_for_slot(slot),
                                             [encode_command_with_ids(("XACK", key, group), ids)],
                                             exclusive=False)
        if isinstance(reply, BaseException):
            if is_missing_group(reply):
                return 0
            raise reply
        return int(reply)

    async def expired(
        self, topic: str, partition: int, group: str, *, min_idle_ms: int, count: int,
        after: str | None = None, consumer: str | None = None,
    ) -> list[PendingEntry]:
        """Pending entries idle >= ``min_idle_ms``, in offset order (XPENDING key group IDLE n - +
        count).

        ``after`` pages on (offsets strictly after it); ``consumer`` keeps only that consumer's
        entries.
        """
        if count <= 0:
            return []
        key = log_key(topic, partition)
        low = f"({validate_offset(after)}" if after is not None else "-"

        async def op() -> list[Any]:
            try:
                return list(await self._on(key, (
                    "XPENDING", key, group, "IDLE", max(0, min_idle_ms), low, "+", count,
                    *(() if consumer is None else (consumer,)))))
            except ResponseError as exc:
                if is_missing_group(exc):
                    return []
                raise

        return parse_pending(partition, await self._read("expired", op))

    async def claim(
        self,
        topic: str,
        partition: int,
        group: str,
        consumer: str,
        pending: Sequence[PendingEntry],
        *,
        min_idle_ms: int,
    ) -> list[Delivery]:
        """XCLAIM the pending entries for ``consumer``; returns them with delivery_count + 1.

        Entries claimed by someone else meanwhile (idle below ``min_idle_ms``) are skipped. Entries
        trimmed away are skipped too and leave the pending list: Redis 7 drops them from the PEL
        inside XCLAIM; an older server replies nil for them, and then every requested id missing
        from the stream is acked.
        """
        if not pending:
            return []
        counts = {validate_offset(p.offset): p.delivery_count for p in pending}
        key = log_key(topic, partition)
        reply = await self._write("claim",
                                  lambda: self._xclaim(key, group, consumer, list(counts),
                                                       min_idle_ms))
        claimed = present(reply)
        if len(claimed) < len(reply):
            await self._ack_trimmed(key, slot_of(topic, partition), group, list(counts))
        entries = decode_raw_entries(partition, claimed)
        return [Delivery(entry, counts[entry.offset] + 1) for entry in entries
                if entry.offset in counts]

    async def claim_offsets(self, topic: str, partition: int, group: str, consumer: str,
                            offsets: Sequence[str], *, min_idle_ms: int) -> list[Delivery]:
        """XCLAIM these pending entries for ``consumer`` by offset, each with its delivery count +
        1, in one script that seeks each id (no walk of the pending list).

        Offsets not pending, or idle below ``min_idle_ms`` (someone claimed them meanwhile), are
        skipped; so are trimmed entries, as in ``claim``."""
        if not offsets:
            return []
        key, slot = log_key(topic, partition), slot_of(topic, partition)
        ids = [validate_offset(offset) for offset in offsets]

        async def op() -> Any:
            try:
                return await run_script(self._lanes, self._router.node_for_slot(slot),
                                        CLAIM_IDS_SCRIPT, [key],
                                        [group, consumer, max(0, min_idle_ms), *ids])
            except ResponseError as exc:
                if is_missing_group(exc):
                    return [[], [], []]
                raise

        taken, counts_before, reply = await self._write("claim", op)
        counts = {text(i): int(n) for i, n in zip(taken, counts_before, strict=True)}
        claimed = present(reply)
        if len(claimed) < len(reply):  # an older server's nil for a trimmed entry
            await self._ack_trimmed(key, slot, group, list(counts))
        return [Delivery(entry, counts[entry.offset] + 1)
                for entry in decode_raw_entries(partition, claimed) if entry.offset in counts]

    async def _xclaim(self, key: str, group: str, consumer: str, ids: list[str],
                      min_idle_ms: int) -> list[Any]:
        try:
            return list(await self._on(key, ("XCLAIM", key, group, consumer,
                                             max(0, min_idle_ms), *ids)))
        except ResponseError as exc:
            if is_missing_group(exc):
                return []
            raise

    async def _ack_trimmed(self, key: str, slot: int, group: str, ids: list[str]) -> None:
        """Ack the ids that no longer exist in the stream (they can never be delivered)."""

        async def exists(entry_id: str) -> bool:
            return bool(await self._on(key, ("XRANGE", key, entry_id, entry_id, "COUNT", 1)))

        async def op() -> None:
            gone = [i for i in ids if not await exists(i)]
            if gone:
                await self._ack_lean(slot, key, group, gone)

        await self._write("claim", op)

    async def set_idle(
        self, topic: str, partition: int, group: str, consumer: str, offsets: Sequence[str],
        idle_ms: int
    ) -> None:
        """Set the idle time of pending entries without counting a delivery (XCLAIM 0 ... IDLE n
        JUSTID).

        Idle times beyond MAX_IDLE_MS are clamped (Redis would otherwise treat them as 0).
        """
        if not offsets:
            return
        ids = [validate_offset(o) for o in offsets]
        idle = clamp_idle_ms(idle_ms)
        key = log_key(topic, partition)

        async def op() -> None:
            try:
                await self._on(key, ("XCLAIM", key, group, consumer, 0, *ids, "IDLE", idle,
                                     "JUSTID"))
            except ResponseError as exc:
                if not is_missing_group(exc):
                    raise

        await self._write("set_idle", op)

    async def state(self, topic: str, partition: int, group: str) -> GroupPartitionState:
        """Last delivered offset, pending count, oldest pending offset and lag (None when Redis
        cannot tell)."""
        key = log_key(topic, partition)
        return await self._read("state", lambda: self._state(key, partition, group))

    async def _state(self, key: str, partition: int, group: str) -> GroupPartitionState:
        info = find_group(await self._group_infos(key), group)
        if info is None or not int(info.get("pending") or 0):
            return state_from(partition, info, None)
        try:
            summary = await self._on(key, ("XPENDING", key, group))
        except ResponseError as exc:
            if is_missing_group(exc):  # destroyed between the two calls
                return state_from(partition, None, None)
            raise
        return state_from(partition, info, decode_offset(summary[1]))

    async def _group_infos(self, key: str) -> list[Mapping[str, Any]]:
        try:
            return [info_row(flat) for flat in await self._on(key, ("XINFO", "GROUPS", key))]
        except ResponseError as exc:
            if is_missing_group(exc):
                return []
            raise

    async def lost_after(self, topic: str, partition: int, after: str,
                         group: str | None = None) -> LostRange | None:
        """The range after ``after`` that retention trimmed, or None.

        Trims take a stream's oldest entries, so while the entry at ``after`` is still there
        nothing after it went; once it is gone, something was removed and the first entry left is
        past it, whatever lay between went. How many only ``group``'s read counter can tell (when
        Redis kept it valid): entries added past the group's position less those still there. A
        compacted topic's holes leave its first entry in place: no gap.
        """
        key, position = log_key(topic, partition), validate_offset(after)

        async def op() -> tuple[Any, Any, Any]:
            at = await self._on(key, ("XRANGE", key, position, position))
            try:
                info = await self._on(key, ("XINFO", "STREAM", key))
            except ResponseError as exc:
                if is_missing_group(exc):
                    return at, None, None
                raise
            row = None if group is None else find_group(await self._group_infos(key), group)
            return at, info, row

        at, flat, row = await self._read("lost_after", op)
        if at or flat is None:
            return None
        info = info_row(flat)
        added, length = int(info.get("entries-added") or 0), int(info.get("length") or 0)
        first = info.get("first-entry")
        first_kept = decode_offset(first[0]) if first else None
        bound = first_kept or decode_offset(info.get("last-generated-id")) or "0-0"
        if added == length or offset_key(bound) <= offset_key(position):
            return None
        read = None if row is None else row.get("entries-read")
        count = None if read is None else added - int(read) - length
        if count is not None and count <= 0:
            return None
        return LostRange(partition, position, first_kept, count)

    async def seek(self, topic: str, partition: int, group: str, start: str) -> None:
        """Move the group to ``start`` (XGROUP SETID), creating group and stream if absent. Pending
        stays."""
        new_id = start_id(start)
        key = log_key(topic, partition)

        async def op() -> None:
            if not await self._create(key, group, new_id):
                await self._on(key, ("XGROUP", "SETID", key, group, new_id))

        await self._write("seek", op)

    async def groups(self, topic: str, partition: int) -> list[str]:
        """Names of the groups on a partition; [] when its stream does not exist."""
        key = log_key(topic, partition)
        infos = await self._read("groups", lambda: self._group_infos(key))
        return [text(info["name"]) for info in infos]

    async def delete_group(self, topic: str, partition: int, group: str) -> None:
        """XGROUP DESTROY; a missing group or stream is fine."""
        key = log_key(topic, partition)

        async def op() -> None:
            try:
                await self._on(key, ("XGROUP", "DESTROY", key, group))
            except ResponseError as exc:
                if not is_missing_group(exc):
                    raise

        await self._write("delete_group", op)

    async def park(self, topic: str, partition: int, group: str,
                   parked: Sequence[ParkedKey]) -> None:
        """Record keys of a key_shared group as parked (visible to every gateway)."""
        if not parked:
            return
        key = parked_keys_key(topic, partition, group)
        fields = [part for entry in parked
                  for part in (entry.key, f"{entry.offset} {entry.since_ms}")]
        await self._write("park", lambda: self._on(key, ("HSET", key, *fields)))

    async def unpark(self, topic: str, partition: int, group: str, keys: Sequence[bytes]) -> None:
        """Forget parked keys (``keys`` empty: all of the group's on the partition)."""
        key = parked_keys_key(topic, partition, group)
        command: tuple[Any, ...] = ("HDEL", key, *keys) if keys else ("DEL", key)
        await self._write("unpark", lambda: self._on(key, command))

    async def parked(self, topic: str, partition: int, group: str) -> list[ParkedKey]:
        """The group's parked keys on the partition, oldest first."""
        key = parked_keys_key(topic, partition, group)
        flat = await self._read("parked", lambda: self._on(key, ("HGETALL", key))) or []
        found = []
        for name, value in zip(flat[0::2], flat[1::2], strict=True):
            offset, _, since = bytes(value).decode().partition(" ")
            found.append(ParkedKey(bytes(name), offset, int(since or 0)))
        return sorted(found, key=lambda parked: parked.since_ms)

    async def _read(self, what: str, op: Callable[[], Awaitable[T]]) -> T:
        return await self._router.call(what, self._settings.read_deadline_s, op)

    async def _write(self, what: str, op: Callable[[], Awaitable[T]]) -> T:
        return await self._router.call(what, self._settings.write_deadline_s, op)


class _MissingGroup(StorageError):
    """Internal: XREADGROUP found no group (or no stream); read_new re-creates it and retries
    once."""


__all__ = ["MAX_IDLE_MS", "RedisGroupStore", "clamp_idle_ms", "start_id"]
