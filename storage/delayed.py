"""Delayed (scheduled) messages: records parked per partition until their due time, then promoted
into the stream (``RedisDelayedStore``; Lua and layout in ``storage.delayed_scripts``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from storage.append.appender import Appender
from storage.append.calls import PreparedCall, ScriptCall
from storage.cluster import ClusterRouter
from storage.delayed_scripts import (
    PROMOTE_SCRIPT,
    build_schedule_call,
    parse_promote_reply,
    parse_schedule_reply,
    promote_keys_and_args,
)
from storage.keys import delayed_key, slot_of
from storage.models import Acks, AppendOptions, AppendResult, Record, ScheduledResult
from storage.wire.lanes import NodeLanes
from storage.wire.scripts import LuaScript, run_script

PROMOTE_CALL_CACHE = 100_000  # prepared promote commands kept (one per owned partition in use)


class RedisDelayedStore:
    """Delayed messages on a Redis Cluster, sharing the ClusterRouter of a RedisStreamStore.

    Take it from ``RedisStreamStore.delayed``; it owns no connections of its own.

    ``schedule`` writes through the append path's writer (``storage.append.appender``): one script
    call per partition, partitions grouped by owning primary, one pipeline per node, and for
    ``Acks.ALL`` a WAIT on that same connection (fewer replicas raise NotEnoughReplicas). Its retry
    semantics are the append's: a record with an idempotency key is scheduled once; a retry answers
    the first schedule id with ``duplicate=True``.

    ``promote_due`` is one script per call (``promote_due_partitions`` sends many partitions' calls
    in one pipeline per node), so it is atomic on the primary: it reads the server clock (``TIME``;
    Redis 7 replicates a script's effects, so a write after it is allowed), moves up to ``limit``
    due messages in (due time, schedule id) order into the stream and removes them from the
    schedule. Two owners running it at the same moment therefore promote every message exactly
    once, in due order. A call whose reply is lost (connection error) is retried; the retry
    promotes whatever is due then, and the lost call's offsets are not reported.
    """

    def __init__(self, router: ClusterRouter, lanes: NodeLanes) -> None:
        self._router = router
        self._settings = router.settings
        self._lanes = lanes
        self._writer: Appender[ScheduledResult] = Appender(router, parse_schedule_reply, lanes)
        self._promoter: Appender[AppendResult] = Appender(router, parse_promote_reply, lanes)
        self._promote_calls: dict[tuple[str, int, int, int | None], PreparedCall] = {}

    async def schedule(
        self, topic: str, items: Sequence[tuple[Record, int]], options: AppendOptions
    ) -> list[ScheduledResult]:
        """Schedule each record for its due time (epoch ms); one result per item, in input order.

        ``options.acks`` (LEADER/ALL) and ``dedup_ttl_ms`` apply as for append; ``max_length``
        applies at promotion (pass it to ``promote_due``). Raises StorageUnavailable /
        NotEnoughReplicas like append.
        """
        if not items:
            return []
        if any(due_ms < 0 for _, due_ms in items):
            raise ValueError("due times must be epoch milliseconds >= 0")
        positions: dict[int, list[int]] = {}
        for index, (record, _) in enumerate(items):
            positions.setdefault(record.partition, []).append(index)
        calls = [build_schedule_call(topic, p, [items[i] for i in idx], options)
                 for p, idx in positions.items()]
        written = await self._writer.write(topic, calls, wait=options.acks is Acks.ALL)
        ordered: list[ScheduledResult | None] = [None] * len(items)
        for partition, indexes in positions.items():
            for index, result in zip(indexes, written[partition], strict=True):
                ordered[index] = result
        return ordered  # type: ignore[return-value]

    async def promote_due(
        self, topic: str, partition: int, *, limit: int = 100, max_length: int | None = None
    ) -> list[AppendResult]:
        """Move up to ``limit`` messages due by the server's clock into the stream; their offsets in
        due order.

        ``max_length`` trims the stream like append (``MAXLEN ~``). An empty list means nothing was
        due.
        """
        if limit <= 0:
            raise ValueError(f"limit must be > 0, got {limit}")
        keys, args = promote_keys_and_args(topic, partition, limit, max_length)
        slot = slot_of(topic, partition)
        reply = await self._router.call(
            "promote_due", self._settings.write_deadline_s,
            lambda: self._evalsha(slot, PROMOTE_SCRIPT, keys, args)
        )
        return parse_promote_reply(partition, reply)

    async def promote_due_partitions(
        self, topic: str, partitions: Sequence[int], *, limit: int = 100,
        max_length: int | None = None
    ) -> dict[int, list[AppendResult]]:
        """``promote_due`` for several partitions of a topic at once: their script calls go out
        together, one pipeline per owning node (on the node connections when the store has them).
        Each call is the same atomic script, so the guarantees are ``promote_due``'s; the retries
        are the append path's.
        """
        if limit <= 0:
            raise ValueError(f"limit must be > 0, got {limit}")
        calls = [self._promote_call(topic, partition, limit, max_length)
                 for partition in dict.fromkeys(partitions)]
        return await self._promoter.write(topic, calls, wait=False) if calls else {}

    def _promote_call(self, topic: str, partition: int, limit: int,
                      max_length: int | None) -> PreparedCall:
        """The same command every tick for a partition: built and encoded once (a bounded cache)."""
        key = (topic, partition, limit, max_length)
        call = self._promote_calls.get(key)
        if call is None:
            if len(self._promote_calls) >= PROMOTE_CALL_CACHE:
                self._promote_calls.clear()
            keys, args = promote_keys_and_args(topic, partition, limit, max_length)
            call = self._promote_calls[key] = PreparedCall.of(
                ScriptCall(partition, keys, args, PROMOTE_SCRIPT))
        return call

    async def next_due_ms(self, topic: str, partition: int) -> int | None:
        """The earliest due time (epoch ms) of the partition's waiting messages, or None when there
        are none."""
        key = delayed_key(topic, partition)
        items = await self._on_partition("next_due_ms", topic, partition,
                                         ("ZRANGE", key, 0, 0, "WITHSCORES"))
        return int(float(items[1])) if items else None

    async def scheduled_count(self, topic: str, partition: int) -> int:
        """How many messages of the partition are waiting (due or not)."""
        key = delayed_key(topic, partition)
        count = await self._on_partition("scheduled_count", topic, partition, ("ZCARD", key))
        return int(count)

    async def _on_partition(self, what: str, topic: str, partition: int,
                            command: tuple[Any, ...]) -> Any:
        return await self._router.call_on_slot(self._lanes, what, self._settings.read_deadline_s,
                                               slot_of(topic, partition), command)

    async def _evalsha(self, slot: int, script: LuaScript, keys: list[str], args: list[Any]) -> Any:
        # MOVED surfaces as an error, so the router refreshes the slot map and retries.
        return await run_script(self._lanes, self._router.node_for_slot(slot), script, keys, args)


__all__ = ["RedisDelayedStore"]
