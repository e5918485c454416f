"""RedisGroupStore: the GroupStore port on Redis Stream consumer groups, one per partition stream
(``sg:{<topic>/<p>}:log``), named as given."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

from storage.archive.catch_up import CatchUp, catch_up_states
from storage.archive.manifest import (
    archive_readers_key,
    catch_up_key,
    catching_up_key,
    segment_refs,
    segments_key,
)
from storage.cluster import ClusterRouter
from storage.codec import decode_offset, offset_key, validate_offset, validate_offsets
from storage.group_calls import GroupCalls
from storage.group_claims import GroupClaims
from storage.group_keys import GroupKeys, MissingGroup
from storage.group_reads import GroupReads
from storage.group_replies import (
    clamp_idle_ms,
    find_group,
    info_row,
    is_missing_group,
    lost_range,
    parse_parked,
    parse_pending,
    start_id,
    state_from,
    text,
)
from storage.group_scripts import PARK_SCRIPT, SET_IDLE_SCRIPT
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
from storage.wire.scripts import run_script


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
    above this store sees a redis exception. Its rooms: routing to the key that holds a group
    (``GroupKeys``), reads (``GroupReads``) and claims (``GroupClaims``), over ``GroupCalls``.
    """

    def __init__(self, router: ClusterRouter, lanes: NodeLanes,
                 catch_up: CatchUp | None = None) -> None:
        self._calls = GroupCalls(router, lanes)
        # with an archive: groups placed inside it read through catch-up streams
        self._keys = GroupKeys(catch_up)
        self._reads = GroupReads(self._calls, self._keys, self.ensure_group)
        self._claims = GroupClaims(self._calls, self._keys)

    async def ensure_group(self, topic: str, partition: int, group: str, start: str) -> None:
        """Create the group at ``start`` (earliest/latest/offset) with MKSTREAM; an existing group
        stays put. With an archive, a start before its last offset reads through a catch-up
        stream (``storage/archive/catch_up.py``)."""
        first_id = start_id(start)
        if await self._keys.place(topic, partition, group, first_id, seek=False):
            return
        key = log_key(topic, partition)
        await self._calls.write("ensure_group", lambda: self._calls.create(key, group, first_id))

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
        return await self._reads.read_new(topic, partition, group, consumer, count=count,
                                          block_ms=block_ms, until=until,
                                          last_read=last_read, lost=lost)

    async def read_after(
        self, topic: str, partition: int, *, after: str | None, count: int, block_ms: int
    ) -> list[StoredEntry]:
        """Entries strictly after ``after`` (None: from the first), blocking up to ``block_ms``
        (XREAD BLOCK).

        No group is involved: this is the shared tail of broadcast subscriptions. A missing stream
        blocks and returns [] like an empty one.
        """
        return await self._reads.read_after(topic, partition, after=after, count=count,
                                            block_ms=block_ms)

    async def ack(self, topic: str, partition: int, group: str, offsets: Sequence[str]) -> int:
        """XACK the offsets; returns how many were pending. An empty list is 0 without a call."""
        if not offsets:
            return 0
        ids = validate_offsets(offsets)
        # every key that may hold the group, in one script: the group and its pending entries
        # may move between them (a pressed move, the end of a catch-up) at any time
        keys = self._keys.keys(topic, partition, group)
        return await self._calls.write("ack", partial(
            self._calls.ack_on_node, slot_of(topic, partition), keys, group, ids))

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
            return list(await self._calls.read("expired", partial(self._calls.group_command, key, (
                "XPENDING", key, group, "IDLE", max(0, min_idle_ms), low, "+", count,
                *(() if consumer is None else (consumer,))))))

        return parse_pending(partition, await self._keys.on_group(topic, partition, group, on, []))

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
        return await self._claims.claim(topic, partition, group, consumer, pending,
                                        min_idle_ms=min_idle_ms)

    async def claim_offsets(self, topic: str, partition: int, group: str, consumer: str,
                            offsets: Sequence[str], *, min_idle_ms: int) -> list[Delivery]:
        """XCLAIM these pending entries for ``consumer`` by offset, each with its delivery count +
        1, in one script that seeks each id (no walk of the pending list).

        Offsets not pending, or idle below ``min_idle_ms`` (someone claimed them meanwhile), are
        skipped; so are trimmed entries, as in ``claim``."""
        return await self._claims.claim_offsets(topic, partition, group, consumer, offsets,
                                                min_idle_ms=min_idle_ms)

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

        # on whichever key holds the group when it runs (``SET_IDLE_SCRIPT``), as ``ack``
        keys = self._keys.keys(topic, partition, group)
        await self._calls.write("set_idle", lambda: run_script(
            self._calls.lanes, self._calls.router.node_for_slot(slot_of(topic, partition)),
            SET_IDLE_SCRIPT, keys, [group, consumer, idle, *ids]))

    async def state(self, topic: str, partition: int, group: str) -> GroupPartitionState:
        """Last delivered offset, pending count, oldest pending offset and lag (None when Redis
        cannot tell)."""
        async def on(key: str) -> GroupPartitionState:
            state = await self._calls.read("state", partial(self._state, key, partition, group))
            if key == log_key(topic, partition):
                return state
            # a catch-up stream's own lag counts its window alone: the lag across both tiers
            catch_up = self._keys.catch_up
            behind = await self._calls.read("state", partial(
                catch_up_states, self._calls.lanes, self._calls.router.node_for_slot(
                    slot_of(topic, partition)), topic, partition,
                None if catch_up is None else catch_up.tier))
            lag = behind[group].lag if group in behind else None
            return dataclasses.replace(state, lag=lag)

        return await self._keys.on_group(topic, partition, group, on,
                                         state_from(partition, None, None))

    async def _state(self, key: str, partition: int, group: str) -> GroupPartitionState:
        info = find_group(await self._group_infos(key), group)
        if info is None:
            raise MissingGroup(f"no group {group!r} on {key}")
        if not int(info.get("pending") or 0):
            return state_from(partition, info, None)
        summary = await self._calls.group_command(key, ("XPENDING", key, group))
        return state_from(partition, info, decode_offset(summary[1]))

    async def _group_infos(self, key: str) -> list[Mapping[str, Any]]:
        try:
            return [info_row(flat) for flat in await self._calls.on(key, ("XINFO", "GROUPS", key))]
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
            at = await self._calls.on(key, ("XRANGE", key, position, position))
            beyond = segment_refs(await self._calls.on(
                segments, ("XRANGE", segments, "(" + position, "+", "COUNT", 1)))
            if not at and beyond:  # inside a segment
                at = offset_key(beyond[0].first_offset) <= offset_key(position)
            if not at:  # the last offset of a segment
                at = await self._calls.on(segments, ("XRANGE", segments, position, position))
            try:
                info = await self._calls.on(key, ("XINFO", "STREAM", key))
            except ResponseError as exc:
                if is_missing_group(exc):
                    return at, None, None
                raise
            row = None if group is None else find_group(await self._group_infos(key), group)
            return at, info, row

        at, flat, row = await self._calls.read("lost_after", op)
        if position == "0-0":  # a reader from the very start lost nothing it ever had
            return None
        return None if at or flat is None else lost_range(partition, position, flat, row)

    async def seek(self, topic: str, partition: int, group: str, start: str) -> None:
        """Move the group to ``start`` (XGROUP SETID), creating group and stream if absent. Pending
        stays."""
        new_id = start_id(start)
        if await self._keys.place(topic, partition, group, new_id, seek=True):
            return
        key = log_key(topic, partition)

        async def op() -> None:
            if not await self._calls.create(key, group, new_id):
                await self._calls.on(key, ("XGROUP", "SETID", key, group, new_id))

        await self._calls.write("seek", op)

    async def groups(self, topic: str, partition: int) -> list[str]:
        """Names of the groups on a partition (those catching up too); [] when its stream does
        not exist."""
        key, behind = log_key(topic, partition), catching_up_key(topic, partition)
        infos = await self._calls.read("groups", lambda: self._group_infos(key))
        names = [text(info["name"]) for info in infos]
        if self._keys.catch_up is not None:
            members = await self._calls.read(
                "groups", lambda: self._calls.on(behind, ("SMEMBERS", behind)))
            names += sorted(set(map(text, members)) - set(names))
        return names

    async def delete_group(self, topic: str, partition: int, group: str) -> None:
        """XGROUP DESTROY, its catch-up stream deleted, off the archive readers; a missing group
        or stream is fine."""
        key, readers = log_key(topic, partition), archive_readers_key(topic, partition)
        behind = catching_up_key(topic, partition)
        self._keys.forget(topic, partition, group)

        async def op() -> None:
            try:
                await self._calls.on(key, ("XGROUP", "DESTROY", key, group))
            except ResponseError as exc:
                if not is_missing_group(exc):
                    raise
            await self._calls.on(key, ("DEL", catch_up_key(topic, partition, group)))
            await self._calls.on(key, ("SREM", behind, group))
            await self._calls.on(readers, ("SREM", readers, group))

        await self._calls.write("delete_group", op)

    async def park(self, topic: str, partition: int, group: str,
                   parked: Sequence[ParkedKey]) -> None:
        """Record keys of a key_shared group as parked (visible to every gateway)."""
        if not parked:
            return
        key = parked_keys_key(topic, partition, group)
        fields = [part for entry in parked
                  for part in (entry.key, f"{entry.offset} {entry.since_ms}")]
        await self._calls.write("park", lambda: run_script(
            self._calls.lanes, self._calls.router.node_for_slot(slot_of_key(key)), PARK_SCRIPT,
            [key], fields))

    async def unpark(self, topic: str, partition: int, group: str, keys: Sequence[bytes]) -> None:
        """Forget parked keys (``keys`` empty: all of the group's on the partition)."""
        key = parked_keys_key(topic, partition, group)
        command: tuple[Any, ...] = ("HDEL", key, *keys) if keys else ("DEL", key)
        await self._calls.write("unpark", lambda: self._calls.on(key, command))

    async def parked(self, topic: str, partition: int, group: str) -> list[ParkedKey]:
        """The group's parked keys on the partition, oldest first."""
        key = parked_keys_key(topic, partition, group)
        flat = await self._calls.read("parked", lambda: self._calls.on(key, ("HGETALL", key))) or []
        return parse_parked(flat)

__all__ = ["RedisGroupStore"]
