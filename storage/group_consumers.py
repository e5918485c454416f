"""The consumers inside a group on one partition: list them, and remove one only while it holds
nothing."""

from __future__ import annotations

from typing import Any

from storage.cluster import ClusterRouter
from storage.group_replies import info_row, is_missing_group, text
from storage.keys import log_key, slot_of
from storage.models import ConsumerInfo
from storage.wire.errors import ResponseError
from storage.wire.lanes import NodeLanes
from storage.wire.scripts import LuaScript, run_script

REMOVE_IF_EMPTY = LuaScript.of("""
local held = redis.call('XPENDING', KEYS[1], ARGV[1], '-', '+', 1, ARGV[2])
if #held > 0 then return 0 end
return redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], ARGV[2]) + 1
""")


class RedisGroupConsumers:
    """Consumer bookkeeping on the ClusterRouter of a RedisStreamStore
    (``RedisStreamStore.consumers``).

    Redis keeps a consumer (and its pending entries) until someone deletes it; ``XGROUP
    DELCONSUMER`` drops the consumer's pending entries with it, which would silently ack them. So
    removal is one Lua script that deletes the consumer only if ``XPENDING`` shows it holds no
    entry, atomically: a reader that takes entries under that name a moment later simply recreates
    the consumer.
    """

    def __init__(self, router: ClusterRouter, lanes: NodeLanes) -> None:
        self._router = router
        self._lanes = lanes
        self._settings = router.settings

    async def consumers(self, topic: str, partition: int, group: str) -> list[ConsumerInfo]:
        """Every consumer of the group on the partition; [] when the group or stream is absent."""
        key, slot = log_key(topic, partition), slot_of(topic, partition)

        async def op() -> list[Any]:
            try:
                return [info_row(flat) for flat in await self._router.execute_on(
                    self._lanes, slot, ("XINFO", "CONSUMERS", key, group))]
            except ResponseError as exc:
                if is_missing_group(exc):
                    return []
                raise

        rows = await self._router.call("consumers", self._settings.read_deadline_s, op)
        return [ConsumerInfo(text(row["name"]), int(row["pending"]), int(row["idle"]))
                for row in rows]

    async def remove_if_empty(self, topic: str, partition: int, group: str, consumer: str) -> bool:
        """Delete the consumer if it holds no pending entry; True when it was deleted (or already
        absent)."""
        key, slot = log_key(topic, partition), slot_of(topic, partition)

        async def op() -> Any:
            try:
                return await run_script(self._lanes, self._router.node_for_slot(slot),
                                        REMOVE_IF_EMPTY, [key], [group, consumer])
            except ResponseError as exc:
                if is_missing_group(exc):
                    return 1
                raise

        removed = await self._router.call("remove_consumer", self._settings.write_deadline_s, op)
        return int(removed) > 0


__all__ = ["REMOVE_IF_EMPTY", "RedisGroupConsumers"]
