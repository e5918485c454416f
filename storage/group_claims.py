"""Claims of a consumer group's pending entries for another consumer (XCLAIM, or a script by
offset), acking those trimmed away meanwhile."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

from storage.codec import decode_raw_entries, validate_offset
from storage.group_calls import GroupCalls
from storage.group_keys import GroupKeys
from storage.group_replies import present, text
from storage.group_scripts import CLAIM_IDS_SCRIPT
from storage.keys import slot_of
from storage.models import Delivery, PendingEntry


class GroupClaims:
    """The claims of a RedisGroupStore, on the key that holds the group."""

    def __init__(self, calls: GroupCalls, keys: GroupKeys) -> None:
        self._calls = calls
        self._keys = keys

    async def claim(self, topic: str, partition: int, group: str, consumer: str,
                    pending: Sequence[PendingEntry], *, min_idle_ms: int) -> list[Delivery]:
        """``RedisGroupStore.claim``."""
        if not pending:
            return []
        counts = {validate_offset(p.offset): p.delivery_count for p in pending}

        async def on(key: str) -> list[Delivery]:
            reply = list(await self._calls.write("claim", partial(self._calls.group_command, key, (
                "XCLAIM", key, group, consumer, max(0, min_idle_ms), *counts))))
            claimed = present(reply)
            if len(claimed) < len(reply):
                await self._ack_trimmed(key, slot_of(topic, partition), group, list(counts))
            entries = decode_raw_entries(partition, claimed)
            return [Delivery(entry, counts[entry.offset] + 1) for entry in entries
                    if entry.offset in counts]

        return await self._keys.on_group(topic, partition, group, on, [])

    async def claim_offsets(self, topic: str, partition: int, group: str, consumer: str,
                            offsets: Sequence[str], *, min_idle_ms: int) -> list[Delivery]:
        """``RedisGroupStore.claim_offsets``."""
        if not offsets:
            return []
        slot = slot_of(topic, partition)
        ids = [validate_offset(offset) for offset in offsets]

        async def on(key: str) -> list[Delivery]:
            async def op() -> Any:
                return await self._calls.group_script(slot, CLAIM_IDS_SCRIPT, key,
                                                      [group, consumer, max(0, min_idle_ms), *ids])

            taken, counts_before, reply = await self._calls.write("claim", op)
            counts = {text(i): int(n) for i, n in zip(taken, counts_before, strict=True)}
            claimed = present(reply)
            if len(claimed) < len(reply):  # an older server's nil for a trimmed entry
                await self._ack_trimmed(key, slot, group, list(counts))
            return [Delivery(entry, counts[entry.offset] + 1)
                    for entry in decode_raw_entries(partition, claimed) if entry.offset in counts]

        return await self._keys.on_group(topic, partition, group, on, [])

    async def _ack_trimmed(self, key: str, slot: int, group: str, ids: list[str]) -> None:
        """Ack the ids that no longer exist in the stream (they can never be delivered)."""

        async def exists(entry_id: str) -> bool:
            return bool(await self._calls.on(key, ("XRANGE", key, entry_id, entry_id, "COUNT", 1)))

        async def op() -> None:
            gone = [i for i in ids if not await exists(i)]
            if gone:
                await self._calls.ack_on_node(slot, [key], group, gone)

        await self._calls.write("claim", op)
