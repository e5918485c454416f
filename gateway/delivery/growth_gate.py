"""How far a consumer may read a partition of a grown topic: entries past a growth's fence wait
until every old partition whose keys may have moved there was consumed up to its own fence.

A group has consumed a partition up to an offset when it delivered everything up to there and
nothing up to there is still pending; a broadcast session when its own position passed it (or
nothing up to there is left after it). Once true, it stays true for that gate (positions only move
forward), so a grown topic costs consumers one check per source partition and growth, then nothing.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

from partitioner.topics import Epoch, TopicMetadata
from storage.codec import offset_key
from storage.groups_protocol import GroupStore
from storage.protocol import StreamStore

# how often a held partition looks again whether its sources caught up
GATE_POLL_S = 0.1

Consumed = Callable[[int, str], Awaitable[bool]]


def at_or_past(offset: str | None, cap: str) -> bool:
    """Whether a position (None: before the first entry) has reached ``cap``."""
    return offset is not None and offset_key(offset) >= offset_key(cap)


async def cap_of(epochs: Sequence[Epoch], partition: int, consumed: Consumed) -> str | None:
    """The offset after which ``partition``'s entries must wait, or None when none must.

    The earliest growth whose sources are not consumed up to their fences holds the partition at
    its own fence for that growth ("0-0" for a partition the growth added).
    """
    for epoch in epochs:
        for source in epoch.sources(partition):
            if not await consumed(source, epoch.fences[source]):
                return epoch.fence(partition)
    return None


class Topics(Protocol):
    """Where a gate looks up the topic's growths (partitioner.cache.TopicCache)."""

    def get(self, name: str) -> TopicMetadata | None: ...


class Gate:
    """The caps of one consumer's partitions (a group's, or a broadcast session's)."""

    __slots__ = ("_cache", "_consumed", "_passed", "topic")

    def __init__(self, cache: Topics, topic: str, consumed: Consumed) -> None:
        self._cache, self.topic, self._consumed = cache, topic, consumed
        self._passed: set[tuple[int, str]] = set()

    async def cap(self, partition: int) -> str | None:
        """Where ``partition`` is held now, or None (nothing held: the common case, no I/O)."""
        metadata = self._cache.get(self.topic)
        if metadata is None or not metadata.epochs:
            return None
        return await cap_of(metadata.epochs, partition, self._remembered)

    def may_hold(self, partition: int) -> bool:
        """Whether ``partition`` may be held (some growth's source not known to be consumed
        yet), without I/O: a shared tail hands such a partition back to its own reads."""
        metadata = self._cache.get(self.topic)
        if metadata is None or not metadata.epochs:
            return False
        return any((source, epoch.fences[source]) not in self._passed
                   for epoch in metadata.epochs for source in epoch.sources(partition))

    async def _remembered(self, source: int, fence: str) -> bool:
        if (source, fence) in self._passed:
            return True
        if await self._consumed(source, fence):
            self._passed.add((source, fence))
            return True
        return False


def group_gate(cache: Topics, topic: str, group: str, groups: GroupStore,
               store: StreamStore) -> Gate:
    """The gate of a consumer group: a source counts once the group delivered it up to the fence
    and acknowledged all of that."""

    async def consumed(source: int, fence: str) -> bool:
        state = await groups.state(topic, source, group)
        oldest = state.oldest_pending_offset
        if oldest is not None and offset_key(oldest) <= offset_key(fence):
            return False
        last = state.last_delivered_offset if state.exists else None
        return at_or_past(last, fence) or await _nothing_up_to(store, topic, source, last, fence)

    return Gate(cache, topic, consumed)


async def _nothing_up_to(store: StreamStore, topic: str, partition: int, after: str | None,
                         fence: str, from_time_ms: int | None = None) -> bool:
    """Whether no entry after ``after`` (or from ``from_time_ms``) is at or before ``fence``
    (retention or compaction took them, or there were none)."""
    first = await store.read(topic, partition, after=after, from_time_ms=from_time_ms, limit=1)
    return not first or not at_or_past(fence, first[0].offset)


async def session_consumed(store: StreamStore, topic: str, partition: int, after: str | None,
                           fence: str, from_time_ms: int | None) -> bool:
    """A broadcast session's position ``after`` (or its start time) counts as consumed up to
    ``fence``."""
    return at_or_past(after, fence) or await _nothing_up_to(store, topic, partition, after, fence,
                                                            from_time_ms)
