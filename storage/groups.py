"""RedisGroupStore: the GroupStore port on Redis Stream consumer groups, one per partition stream
(``sg:{<topic>/<p>}:log``), named as given."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from functools import partial
from typing import Any, TypeVar

from storage.archive.catch_up import CatchUp, catch_up_key, catching_up_key
from storage.archive.manifest import archive_readers_key, segment_refs, segments_key
from storage.cluster import ClusterRouter
from storage.codec import (
    decode_offset,
    decode_raw_entries,
    offset_key,
    validate_offset,
    validate_offsets,
)
from storage.errors import StorageError
from storage.group_replies import (
    clamp_idle_ms,
    find_group,
    info_row,
    is_missing_group,
    lost_range,
    parse_parked,
    parse_pending,
    parse_read_reply,
    present,
    start_id,
    state_from,
    text,
)
from storage.group_scripts import (
    CLAIM_IDS_SCRIPT,
    CREATE_GROUP_SCRIPT,
    PARK_SCRIPT,
    READ_UNTIL_SCRIPT,
)
from storage.keys import log_key, parked_keys_key, slot_of, slot_of_key
from storage.models import (
    Delivery,
    GroupPartitionState,
    LostRange,
    ParkedKey,
    PendingEntry,
    StoredEntry,
)
from storage.wire.errors import ResponseError
from storage.wire.lanes import NodeLanes
from storage.wire.resp import encode_command, encode_command_with_ids
from storage.wire.scripts import run_script

T = TypeVar("T")
# a read of a key, the store's retry of it, and what a lost reply handed out first
_Attempt = Callable[[str, Callable[[], Awaitable[Any]]], Awaitable[list[StoredEntry]]]
# how long a read waits while a caught-up group's last deliveries settle
CATCH_UP_WAIT_MS = 50


class RedisGroupStore:
    """Consumer groups on a Redis Cluster, sharing the router and node lanes of a RedisStreamStore
    (``RedisStreamStore.groups``), which own them.

    A read without BLOCK and XACK go on the shared connection of the slot's primary, pipelined with
    the appends, as do admin commands (XINFO, XPENDING, XCLAIM, XGROUP); a blocking read holds a
    connection of its own (``NodeLanes.execute_blocking``), so blocked readers never hold up a
    write. A cancelled or timed-out read closes its connection, so no late reply answers the next
    command; entries Redis handed to such a read stay pending and come first in the consumer's
    next read when it names its ``last_read`` (else through ``expired``/``claim``). Everything
    is retried on transient errors inside the store's deadline (``ClusterRouter.call``); nothing
    above this module sees a redis exception.
    """

    def __init__(self, router: ClusterRouter, lanes: NodeLanes,
                 catch_up: CatchUp | None = None) -> None:
        self._router = router
        self._settings = router.settings
        self._lanes = lanes  # reads (blocking ones on connections of their own) and XACK
        # with an archive: groups placed inside it read through catch-up streams; where this
        # store last found each group (tried first)
        self._catch_up = catch_up
        self._catching_up: set[tuple[str, int, str]] = set()

    async def ensure_group(self, topic: str, partition: int, group: str, start: str) -> None:
        """Create the group at ``start`` (earliest/latest/offset) with MKSTREAM; an existing group
        stays put. With an archive, a start before its last offset reads through a catch-up
        stream (``storage/archive/catch_up.py``)."""
        first_id = start_id(start)
        if self._catch_up is not None:
            placed = await self._catch_up.place(topic, partition, group, _full_id(first_id),
                                                seek=False)
            self._note_place(topic, partition, group, placed)
            return
        key = log_key(topic, partition)
        await self._write("ensure_group", lambda: self._create(key, group, first_id))

    def _note_place(self, topic: str, partition: int, group: str, placed: int) -> None:
        if placed == 1:
            self._catching_up.add((topic, partition, group))
        elif placed == 0:
            self._catching_up.discard((topic, partition, group))

    def _group_keys(self, topic: str, partition: int, group: str) -> tuple[str, ...]:
        """The keys that may hold the group, the likelier first: the log, and with an archive the
        group's catch-up stream."""
        log = log_key(topic, partition)
        if self._catch_up is None:
            return (log,)
        behind = catch_up_key(topic, partition, group)
        return (behind, log) if (topic, partition, group) in self._catching_up else (log, behind)

    async def _on_group(self, topic: str, partition: int, group: str,
                        run: Callable[[str], Awaitable[T]], missing: T) -> T:
        """``run`` on the key that holds the group (``run`` raises ``_MissingGroup`` on a key
        without it); ``missing`` when none does."""
        for key in self._group_keys(topic, partition, group):
            try:
                result = await run(key)
            except _MissingGroup:
                continue
            if key == log_key(topic, partition):
                self._catching_up.discard((topic, partition, group))
            else:
                self._catching_up.add((topic, partition, group))
            return result
        return missing

    async def _on(self, key: str, command: tuple[Any, ...]) -> Any:
        """One command on the node connection of the primary of ``key``'s slot (asked at each
        attempt); an error reply is raised."""
        return await self._router.execute_on(self._lanes, slot_of_key(key), command)

    async def _create(self, key: str, group: str, first_id: str) -> bool:
        """XGROUP CREATE ... MKSTREAM, on a full node too; False when the group already
        existed."""
        created = await run_script(self._lanes, self._router.node_for_slot(slot_of_key(key)),
                                   CREATE_GROUP_SCRIPT, [key], [group, first_id])
        return bool(created)

    async def read_new(
        self, topic: str, partition: int, group: str, consumer: str, *, count: int, block_ms: int,
        until: str | None = None, last_read: str | None = None, lost: bool = False
    ) -> list[StoredEntry]:
        """Never-delivered entries (XREADGROUP >), blocking up to ``block_ms`` (0 = no block);
        with ``until``, none after that offset and no blocking (``READ_UNTIL_LUA``).

        ``last_read`` (the newest offset this consumer's reads returned, or where it started)
        makes a read whose reply may have been lost recoverable: after a failed attempt, or with
        ``lost`` (the caller's own last read failed), the consumer's pending entries after it
        come first (XREADGROUP with that id), so a reply lost with a failed primary is not
        redelivered behind newer entries after its ack timeout.

        A missing group (or stream) is created from "earliest" and the read retried once. A read
        that does not block goes on the node connection of the slot's primary (pipelined with the
        acks); a blocking one holds a node connection of its own (``NodeLanes.execute_blocking``).
        """
        if count <= 0 or block_ms < 0 or (until is not None and block_ms):
            raise ValueError("count must be > 0, block_ms >= 0, and 0 with until")
        slot = slot_of(topic, partition)
        cap = None if until is None else validate_offset(until)
        maybe_lost = lost

        async def attempt(key: str, read: Callable[[], Awaitable[Any]]) -> list[StoredEntry]:
            nonlocal maybe_lost
            if last_read is not None and maybe_lost:
                recovery = encode_command(("XREADGROUP", "GROUP", group, consumer, "COUNT", count,
                                           "STREAMS", key, validate_offset(last_read)))
                recovered = await self._read_on_node(slot, recovery, 0)
                entries = parse_read_reply(partition, recovered, present_only=True)
                if entries:
                    maybe_lost = False
                    return entries
            maybe_lost = True  # until the reply is in: a failure from here on may lose it
            entries = parse_read_reply(partition, await read())
            maybe_lost = False
            return entries

        async def read(key: str, block: int) -> list[StoredEntry]:
            if cap is None:
                return await self._read_once(slot, group, consumer, count, block, key, attempt)
            return await self._read_until(key, slot, group, consumer, count, cap, attempt)

        async def read_on(key: str) -> list[StoredEntry] | None:
            if key == log_key(topic, partition):
                return await read(key, block_ms)
            return await self._read_behind(topic, partition, group, key, read, block_ms)

        for _ in range(2):
            entries = await self._on_group(topic, partition, group, read_on, None)
            if entries is not None:
                return entries
            await self.ensure_group(topic, partition, group, "earliest")
        raise StorageError(f"read_new: group {group!r} vanished again on "
                           f"{log_key(topic, partition)}")

    async def _read_behind(self, topic: str, partition: int, group: str, key: str,
                           read: Callable[[str, int], Awaitable[list[StoredEntry]]],
                           block_ms: int) -> list[StoredEntry]:
        """A read of a group catching up: its catch-up stream, refilled from the archive once read
        to its end; once everything was read and settled there, the group moves onto the log and
        reads it."""
        assert self._catch_up is not None
        entries = await read(key, 0)
        if entries:
            return entries
        if await self._catch_up.fill(topic, partition, group):
            return await read(key, 0)
        if await self._catch_up.finish(topic, partition, group) != 0:
            self._catching_up.discard((topic, partition, group))
            return await read(log_key(topic, partition), block_ms)
        # the last deliveries are not settled yet: the group waits on its catch-up stream
        await asyncio.sleep(min(block_ms, CATCH_UP_WAIT_MS) / 1000)
        return []

    async def _read_once(
        self, slot: int, group: str, consumer: str, count: int, block_ms: int, key: str,
        attempt: _Attempt
    ) -> list[StoredEntry]:
        block = ("BLOCK", block_ms) if block_ms else ()
        command = encode_command(("XREADGROUP", "GROUP", group, consumer, "COUNT", count, *block,
                                  "STREAMS", key, ">"))
        return await self._router.call(
            "read_new", self._settings.read_deadline_s + block_ms / 1000,
            lambda: attempt(key, lambda: self._read_on_node(slot, command, block_ms)))

    async def _read_until(
        self, key: str, slot: int, group: str, consumer: str, count: int, until: str,
        attempt: _Attempt
    ) -> list[StoredEntry]:
        async def op() -> Any:
            try:
                return await run_script(self._lanes, self._router.node_for_slot(slot),
                                        READ_UNTIL_SCRIPT, [key], [group, consumer, count, until])
            except ResponseError as exc:
                if is_missing_group(exc):
                    raise _MissingGroup(str(exc)) from exc
                raise

        return await self._router.call("read_new", self._settings.read_deadline_s,
                                       lambda: attempt(key, op))

    async def _read_on_node(self, slot: int, command: bytes, block_ms: int) -> Any:
        """An XREADGROUP or XREAD on the node connections of the slot's primary: the shared one
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
                                        lambda: self._read_on_node(slot, command, block_ms))
        return parse_read_reply(partition, reply)

    async def ack(self, topic: str, partition: int, group: str, offsets: Sequence[str]) -> int:
        """XACK the offsets; returns how many were pending. An empty list is 0 without a call."""
        if not offsets:
            return 0
        ids = validate_offsets(offsets)
        slot = slot_of(topic, partition)
        acked = 0
        # XACK answers 0 for a group its key does not hold: the other key is asked only then
        for key in self._group_keys(topic, partition, group):
            acked += await self._write("ack", partial(self._ack_on_node, slot, key, group, ids))
            if acked >= len(ids):
                break
        return acked

    async def _ack_on_node(self, slot: int, key: str, group: str, ids: Sequence[str]) -> int:
        """XACK on the node connection of the slot's primary (far less client CPU than through
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
        low = f"({validate_offset(after)}" if after is not None else "-"

        async def on(key: str) -> list[Any]:
            return list(await self._read("expired", partial(self._group_command, key, (
                "XPENDING", key, group, "IDLE", max(0, min_idle_ms), low, "+", count,
                *(() if consumer is None else (consumer,))))))

        return parse_pending(partition, await self._on_group(topic, partition, group, on, []))

    async def _group_command(self, key: str, command: tuple[Any, ...]) -> Any:
        """One command on a group of ``key``; ``_MissingGroup`` when the key holds no group."""
        try:
            return await self._on(key, command)
        except ResponseError as exc:
            if is_missing_group(exc):
                raise _MissingGroup(str(exc)) from exc
            raise

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

        async def on(key: str) -> list[Delivery]:
            reply = list(await self._write("claim", partial(self._group_command, key, (
                "XCLAIM", key, group, consumer, max(0, min_idle_ms), *counts))))
            claimed = present(reply)
            if len(claimed) < len(reply):
                await self._ack_trimmed(key, slot_of(topic, partition), group, list(counts))
            entries = decode_raw_entries(partition, claimed)
            return [Delivery(entry, counts[entry.offset] + 1) for entry in entries
                    if entry.offset in counts]

        return await self._on_group(topic, partition, group, on, [])

    async def claim_offsets(self, topic: str, partition: int, group: str, consumer: str,
                            offsets: Sequence[str], *, min_idle_ms: int) -> list[Delivery]:
        """XCLAIM these pending entries for ``consumer`` by offset, each with its delivery count +
        1, in one script that seeks each id (no walk of the pending list).

        Offsets not pending, or idle below ``min_idle_ms`` (someone claimed them meanwhile), are
        skipped; so are trimmed entries, as in ``claim``."""
        if not offsets:
            return []
        slot = slot_of(topic, partition)
        ids = [validate_offset(offset) for offset in offsets]

        async def on(key: str) -> list[Delivery]:
            async def op() -> Any:
                try:
                    return await run_script(self._lanes, self._router.node_for_slot(slot),
                                            CLAIM_IDS_SCRIPT, [key],
                                            [group, consumer, max(0, min_idle_ms), *ids])
                except ResponseError as exc:
                    if is_missing_group(exc):
                        raise _MissingGroup(str(exc)) from exc
                    raise

            taken, counts_before, reply = await self._write("claim", op)
            counts = {text(i): int(n) for i, n in zip(taken, counts_before, strict=True)}
            claimed = present(reply)
            if len(claimed) < len(reply):  # an older server's nil for a trimmed entry
                await self._ack_trimmed(key, slot, group, list(counts))
            return [Delivery(entry, counts[entry.offset] + 1)
                    for entry in decode_raw_entries(partition, claimed) if entry.offset in counts]

        return await self._on_group(topic, partition, group, on, [])

    async def _ack_trimmed(self, key: str, slot: int, group: str, ids: list[str]) -> None:
        """Ack the ids that no longer exist in the stream (they can never be delivered)."""

        async def exists(entry_id: str) -> bool:
            return bool(await self._on(key, ("XRANGE", key, entry_id, entry_id, "COUNT", 1)))

        async def op() -> None:
            gone = [i for i in ids if not await exists(i)]
            if gone:
                await self._ack_on_node(slot, key, group, gone)

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

        async def on(key: str) -> None:
            await self._write("set_idle", partial(self._group_command, key, (
                "XCLAIM", key, group, consumer, 0, *ids, "IDLE", idle, "JUSTID")))

        await self._on_group(topic, partition, group, on, None)

    async def state(self, topic: str, partition: int, group: str) -> GroupPartitionState:
        """Last delivered offset, pending count, oldest pending offset and lag (None when Redis
        cannot tell)."""
        async def on(key: str) -> GroupPartitionState:
            behind = key != log_key(topic, partition)
            return await self._read("state", partial(self._state, key, partition, group, behind))

        return await self._on_group(topic, partition, group, on,
                                    state_from(partition, None, None))

    async def _state(self, key: str, partition: int, group: str,
                     behind: bool = False) -> GroupPartitionState:
        info = find_group(await self._group_infos(key), group)
        if info is None:
            raise _MissingGroup(f"no group {group!r} on {key}")
        if behind:  # a catch-up stream's lag would count its window alone: unknown
            info = {**info, "lag": None}
        if not int(info.get("pending") or 0):
            return state_from(partition, info, None)
        summary = await self._group_command(key, ("XPENDING", key, group))
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
        """The range after ``after`` that a reader lost, or None.

        Trims take a stream's oldest entries, so while the entry at ``after`` is still there (in
        the stream, or in a segment of the archive, where a replay reads on) nothing after it
        went; once it is gone, something was removed and the first entry left is past it, whatever
        lay between went. How many only ``group``'s read counter can tell (when Redis kept it
        valid): entries added past the group's position less those still there. A compacted
        topic's holes leave its first entry in place: no gap. A group placed inside the archive
        reads it through its catch-up stream: archived entries are no gap to it either.
        """
        key, position = log_key(topic, partition), validate_offset(after)
        segments = segments_key(topic, partition)

        async def op() -> tuple[Any, Any, Any]:
            at = await self._on(key, ("XRANGE", key, position, position))
            beyond = segment_refs(await self._on(
                segments, ("XRANGE", segments, "(" + position, "+", "COUNT", 1)))
            if not at and beyond:  # inside a segment
                at = offset_key(beyond[0].first_offset) <= offset_key(position)
            if not at:  # the last offset of a segment
                at = await self._on(segments, ("XRANGE", segments, position, position))
            try:
                info = await self._on(key, ("XINFO", "STREAM", key))
            except ResponseError as exc:
                if is_missing_group(exc):
                    return at, None, None
                raise
            row = None if group is None else find_group(await self._group_infos(key), group)
            return at, info, row

        at, flat, row = await self._read("lost_after", op)
        if position == "0-0":  # a reader from the very start lost nothing it ever had
            return None
        return None if at or flat is None else lost_range(partition, position, flat, row)

    async def seek(self, topic: str, partition: int, group: str, start: str) -> None:
        """Move the group to ``start`` (XGROUP SETID), creating group and stream if absent. Pending
        stays."""
        new_id = start_id(start)
        if self._catch_up is not None:
            placed = await self._catch_up.place(topic, partition, group, _full_id(new_id),
                                                seek=True)
            self._note_place(topic, partition, group, placed)
            return
        key = log_key(topic, partition)

        async def op() -> None:
            if not await self._create(key, group, new_id):
                await self._on(key, ("XGROUP", "SETID", key, group, new_id))

        await self._write("seek", op)

    async def groups(self, topic: str, partition: int) -> list[str]:
        """Names of the groups on a partition (those catching up too); [] when its stream does
        not exist."""
        key, behind = log_key(topic, partition), catching_up_key(topic, partition)
        infos = await self._read("groups", lambda: self._group_infos(key))
        names = [text(info["name"]) for info in infos]
        if self._catch_up is not None:
            members = await self._read("groups", lambda: self._on(behind, ("SMEMBERS", behind)))
            names += sorted(set(map(text, members)) - set(names))
        return names

    async def delete_group(self, topic: str, partition: int, group: str) -> None:
        """XGROUP DESTROY, its catch-up stream deleted, off the archive readers; a missing group
        or stream is fine."""
        key, readers = log_key(topic, partition), archive_readers_key(topic, partition)
        behind = catching_up_key(topic, partition)
        self._catching_up.discard((topic, partition, group))

        async def op() -> None:
            try:
                await self._on(key, ("XGROUP", "DESTROY", key, group))
            except ResponseError as exc:
                if not is_missing_group(exc):
                    raise
            await self._on(key, ("DEL", catch_up_key(topic, partition, group)))
            await self._on(key, ("SREM", behind, group))
            await self._on(readers, ("SREM", readers, group))

        await self._write("delete_group", op)

    async def park(self, topic: str, partition: int, group: str,
                   parked: Sequence[ParkedKey]) -> None:
        """Record keys of a key_shared group as parked (visible to every gateway)."""
        if not parked:
            return
        key = parked_keys_key(topic, partition, group)
        fields = [part for entry in parked
                  for part in (entry.key, f"{entry.offset} {entry.since_ms}")]
        await self._write("park", lambda: run_script(
            self._lanes, self._router.node_for_slot(slot_of_key(key)), PARK_SCRIPT, [key],
            fields))

    async def unpark(self, topic: str, partition: int, group: str, keys: Sequence[bytes]) -> None:
        """Forget parked keys (``keys`` empty: all of the group's on the partition)."""
        key = parked_keys_key(topic, partition, group)
        command: tuple[Any, ...] = ("HDEL", key, *keys) if keys else ("DEL", key)
        await self._write("unpark", lambda: self._on(key, command))

    async def parked(self, topic: str, partition: int, group: str) -> list[ParkedKey]:
        """The group's parked keys on the partition, oldest first."""
        key = parked_keys_key(topic, partition, group)
        flat = await self._read("parked", lambda: self._on(key, ("HGETALL", key))) or []
        return parse_parked(flat)

    async def _read(self, what: str, op: Callable[[], Awaitable[T]]) -> T:
        return await self._router.call(what, self._settings.read_deadline_s, op)

    async def _write(self, what: str, op: Callable[[], Awaitable[T]]) -> T:
        return await self._router.call(what, self._settings.write_deadline_s, op)


def _full_id(position: str) -> str:
    """A group position as the scripts compare it: ``0`` is ``0-0``; ``$`` stays."""
    return "0-0" if position == "0" else position


class _MissingGroup(StorageError):
    """Internal: XREADGROUP found no group (or no stream); read_new re-creates it and retries
    once."""


__all__ = ["RedisGroupStore"]
