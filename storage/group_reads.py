"""Reads of consumer groups (XREADGROUP, recovering a read whose reply was lost) and of the
shared broadcast tail (XREAD), on the node connections of a partition's primary."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from storage.codec import validate_offset
from storage.errors import StorageError
from storage.group_calls import GroupCalls
from storage.group_keys import GroupKeys, MissingGroup
from storage.group_replies import is_missing_group, parse_read_reply
from storage.group_scripts import READ_UNTIL_SCRIPT
from storage.keys import log_key, slot_of
from storage.models import StoredEntry
from storage.wire.resp import encode_command

# a read of a key, the store's retry of it, and what a lost reply handed out first
_Attempt = Callable[[str, Callable[[], Awaitable[Any]]], Awaitable[list[StoredEntry]]]
# one XREADGROUP or XREAD on a slot's primary: (slot, command, block_ms) -> its raw reply
NodeRead = Callable[[int, bytes, int], Awaitable[Any]]
# how long a read waits while a caught-up group's last deliveries settle
CATCH_UP_WAIT_MS = 50


class GroupReads:
    """The reads of a RedisGroupStore; ``ensure_group`` is the store's, for a read that finds its
    group missing."""

    def __init__(self, calls: GroupCalls, keys: GroupKeys,
                 ensure_group: Callable[[str, int, str, str], Awaitable[None]]) -> None:
        self._calls = calls
        self._keys = keys
        self._ensure_group = ensure_group
        # an attribute, not a method: a test stands a failing node in
        self.read_on_node: NodeRead = self._read_on_node

    async def read_new(
        self, topic: str, partition: int, group: str, consumer: str, *, count: int, block_ms: int,
        until: str | None = None, last_read: str | None = None, lost: bool = False
    ) -> list[StoredEntry]:
        """``RedisGroupStore.read_new``."""
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
                recovered = await self.read_on_node(slot, recovery, 0)
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
            entries = await self._keys.on_group(topic, partition, group, read_on, None)
            if entries is not None:
                return entries
            await self._ensure_group(topic, partition, group, "earliest")
        raise StorageError(f"read_new: group {group!r} vanished again on "
                           f"{log_key(topic, partition)}")

    async def _read_behind(self, topic: str, partition: int, group: str, key: str,
                           read: Callable[[str, int], Awaitable[list[StoredEntry]]],
                           block_ms: int) -> list[StoredEntry]:
        """A read of a group catching up: its catch-up stream, refilled from the archive once read
        to its end; once everything was read and settled there, the group moves onto the log and
        reads it."""
        catch_up = self._keys.catch_up
        assert catch_up is not None
        entries = await read(key, 0)
        if entries:
            return entries
        if await catch_up.fill(topic, partition, group):
            return await read(key, 0)
        if await catch_up.finish(topic, partition, group) != 0:
            self._keys.forget(topic, partition, group)
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
        return await self._calls.router.call(
            "read_new", self._calls.settings.read_deadline_s + block_ms / 1000,
            lambda: attempt(key, lambda: self.read_on_node(slot, command, block_ms)))

    async def _read_until(
        self, key: str, slot: int, group: str, consumer: str, count: int, until: str,
        attempt: _Attempt
    ) -> list[StoredEntry]:
        async def op() -> Any:
            return await self._calls.group_script(slot, READ_UNTIL_SCRIPT, key,
                                                  [group, consumer, count, until])

        return await self._calls.read("read_new", lambda: attempt(key, op))

    async def _read_on_node(self, slot: int, command: bytes, block_ms: int) -> Any:
        """An XREADGROUP or XREAD on the node connections of the slot's primary: the shared one
        without BLOCK (pipelined with the acks), a connection of its own with it. Its raw RESP2
        reply (nil when nothing is new); an error reply is raised for the router to retry (MOVED
        refreshes the slot map)."""
        address = self._calls.router.node_for_slot(slot)
        lanes = self._calls.lanes
        if block_ms:
            reply = await lanes.execute_blocking(address, command, block_ms / 1000)
        else:
            (reply,) = await lanes.execute(address, [command], exclusive=False)
        if isinstance(reply, BaseException):
            if is_missing_group(reply):
                raise MissingGroup(str(reply)) from reply
            raise reply
        return reply

    async def read_after(
        self, topic: str, partition: int, *, after: str | None, count: int, block_ms: int
    ) -> list[StoredEntry]:
        """``RedisGroupStore.read_after``."""
        if count <= 0 or block_ms < 0:
            raise ValueError("count must be > 0 and block_ms >= 0")
        position = "0-0" if after is None else validate_offset(after)
        block = ("BLOCK", block_ms) if block_ms else ()
        command = encode_command(("XREAD", "COUNT", count, *block, "STREAMS",
                                  log_key(topic, partition), position))
        slot = slot_of(topic, partition)
        reply = await self._calls.router.call(
            "read_after", self._calls.settings.read_deadline_s + block_ms / 1000,
            lambda: self.read_on_node(slot, command, block_ms))
        return parse_read_reply(partition, reply)
