"""A key-ordered partition's hand-over fence: a new reader's keys with pending entries (delivered
or read ahead by the partition's previous reader, not acked) go on from their first pending entry,
each in offset order, before anything the new reader reads.

The pending list is the record: XPENDING names each un-acked offset, its consumer (the gateway) and
how long it has been idle, so the new reader needs nothing from the old one. What a member on
another gateway still holds (within its ack timeout) waits there until it is settled, its ack
timeout passes or its member goes; the rest (a left member's released deliveries, a dead gateway's
past their ack timeout or released by the owner's sweep, this gateway's own) the reader claims
when it starts (``read_loop``), and each goes out in its key's turn.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence

from gateway.delivery.group_config import ReaderScope
from gateway.delivery.key_order import KeyOrder
from gateway.delivery.retry_policy import LOOKUP_PAGE
from gateway.offsets import predecessor
from storage.codec import offset_key
from storage.errors import StorageError
from storage.groups_protocol import GroupStore
from storage.models import PendingEntry

log = logging.getLogger(__name__)

FENCE_POLL_S = 0.1  # how soon a key held elsewhere goes on once its message is acked there
HELD_PAGE = 10_000  # pending entries looked at when a reader starts


async def gone_from_pending(store: GroupStore, scope: ReaderScope,
                            offsets: Sequence[str]) -> list[str]:
    """Those of ``offsets`` no longer pending in the group (acked, dead-lettered or trimmed), as
    far as one page of the pending list from the lowest of them can tell."""
    if not offsets:
        return []
    pending = await store.expired(scope.topic, scope.partition, scope.group, min_idle_ms=0,
                                  count=LOOKUP_PAGE,
                                  after=predecessor(min(offsets, key=offset_key)))
    still = {entry.offset for entry in pending}
    seen_to = offset_key(pending[-1].offset) if len(pending) == LOOKUP_PAGE else None
    return [offset for offset in offsets if offset not in still
            and (seen_to is None or offset_key(offset) <= seen_to)]


def held_elsewhere(entry: PendingEntry, scope: ReaderScope, ack_timeout_ms: int) -> bool:
    """Whether a pending entry may be in a member's hands on another gateway."""
    return entry.consumer != scope.consumer and entry.idle_ms < ack_timeout_ms


async def pending_keys(store: GroupStore, scope: ReaderScope) -> dict[str, bytes]:
    """offset -> key of the partition's pending entries, in offset order, whoever holds them
    (keyless ones left out: they may go to any member)."""
    pending = await store.expired(scope.topic, scope.partition, scope.group, min_idle_ms=0,
                                  count=HELD_PAGE)
    return await _keys_at(store, scope, [entry.offset for entry in pending])


async def _keys_at(store: GroupStore, scope: ReaderScope, offsets: list[str]) -> dict[str, bytes]:
    """The keys of the entries at ``offsets`` (in offset order), read in runs: a member's
    deliveries are mostly consecutive entries, so a run is usually one read."""
    wanted = set(offsets)
    keys: dict[str, bytes] = {}
    at = 0
    while at < len(offsets):
        entries = await store.read_after(scope.topic, scope.partition,
                                         after=predecessor(offsets[at]),
                                         count=min(len(offsets) - at, LOOKUP_PAGE), block_ms=0)
        if not entries:
            break
        keys.update((e.offset, e.key) for e in entries if e.offset in wanted and e.key is not None)
        last = offset_key(entries[-1].offset)
        while at < len(offsets) and offset_key(offsets[at]) <= last:
            at += 1
    return keys


class HandOverFence:
    """The keys a reader found held by members when it started, in flight in its ``KeyOrder`` to
    no session of its own; a poll frees each once its message is no longer pending."""

    def __init__(self, store: GroupStore, scope: ReaderScope,
                 settled: Callable[[list[str]], None]) -> None:
        self._store = store
        self._scope = scope
        self._settled = settled  # the reader's: the key goes on, its next message first
        self._held: dict[str, bytes] = {}
        self._task: asyncio.Task[None] | None = None

    async def raise_on(self, keys: KeyOrder) -> None:
        """Fence the keys of what is pending now, each at its first entry, and watch until each
        is settled or comes back here."""
        await self.aclose()  # a start tried again
        self._held = await pending_keys(self._store, self._scope)
        for offset, key in self._held.items():
            keys.held_elsewhere(key, offset)
        if self._held:
            scope = self._scope
            self._task = asyncio.create_task(
                self._watch(keys), name=f"key-fence-{scope.topic}/{scope.partition}/{scope.group}")

    async def aclose(self) -> None:
        """Stop watching."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _watch(self, keys: KeyOrder) -> None:
        while self._still_held(keys):
            await asyncio.sleep(FENCE_POLL_S)
            try:
                gone = await gone_from_pending(self._store, self._scope, list(self._held))
            except StorageError as exc:
                log.warning("key fence of %s/%s for group %s: %s", self._scope.topic,
                            self._scope.partition, self._scope.group, exc)
                continue
            if gone:
                self._settled(gone)

    def _still_held(self, keys: KeyOrder) -> bool:
        """Drop what is settled here or came back here (its ack timeout passed, or its member
        went: it is in flight to a session of this reader now); True while anything is left
        (also a key's later entry still waiting for its turn behind the first)."""
        self._held = {offset: key for offset, key in self._held.items()
                      if (keys.flight.get(offset) == key and key not in keys.owner)
                      or offset in keys.fence_of}
        return bool(self._held)
