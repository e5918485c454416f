"""A key_shared partition's hand-over fence: keys whose message a member still holds (delivered by
the partition's previous reader on another gateway, not acked, within its ack timeout) wait until
that message leaves the group's pending list, its ack timeout passes or its member goes.

The pending list is the record: XPENDING names each un-acked offset, its consumer (the gateway) and
how long it has been idle, so the new reader needs nothing from the old one. A member that left had
its deliveries released (a huge idle), a dead gateway's are released by the owner's sweep: neither
is fenced. Nor is what this gateway's consumer holds: a reader starts here only once no session of
this gateway holds anything of the partition (``key_shared.Seat``), so that is nobody's.
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


async def held_by_members(store: GroupStore, scope: ReaderScope,
                          ack_timeout_ms: int) -> dict[str, bytes]:
    """offset -> key of the partition's pending entries held on other gateways (keyless ones left
    out: they may go to any member)."""
    pending = await store.expired(scope.topic, scope.partition, scope.group, min_idle_ms=0,
                                  count=HELD_PAGE)
    held = [entry.offset for entry in pending if held_elsewhere(entry, scope, ack_timeout_ms)]
    return await _keys_at(store, scope, held)


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

    async def raise_on(self, keys: KeyOrder, ack_timeout_ms: int) -> None:
        """Fence the keys of what members hold now, and watch until each is settled."""
        await self.aclose()  # a start tried again
        self._held = await held_by_members(self._store, self._scope, ack_timeout_ms)
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
        went: it is in flight to a session of this reader now); True while anything is left."""
        self._held = {offset: key for offset, key in self._held.items()
                      if keys.flight.get(offset) == key and key not in keys.owner}
        return bool(self._held)
