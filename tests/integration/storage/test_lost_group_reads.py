"""A group read whose reply is lost (a primary failing between running it and answering) hands its
entries to the consumer anyway: the next read returns them first, in offset order."""

from __future__ import annotations

from typing import Any

import pytest

from storage.groups import RedisGroupStore
from storage.keys import log_key
from storage.models import AppendOptions, Record
from storage.redis_store import RedisStreamStore
from storage.wire.errors import ConnectionLost

P = 0
G = "g"
pytestmark = pytest.mark.integration


async def _group_over(store: RedisStreamStore, topic: str, n: int) -> list[str]:
    """``n`` entries appended and the group created before them; their offsets."""
    results = await store.append(topic, [Record(P, f"m{i}".encode()) for i in range(n)],
                                 AppendOptions())
    await store.groups.ensure_group(topic, P, G, "earliest")
    return [r.offset for r in results]


async def _offsets(groups: RedisGroupStore, topic: str, count: int, **kw: Any) -> list[str]:
    return [e.offset for e in await groups.read_new(topic, P, G, "c", count=count, block_ms=0,
                                                      **kw)]


async def test_a_read_after_a_lost_one_returns_what_the_lost_one_took_first(
        store: RedisStreamStore, topic: str) -> None:
    offsets = await _group_over(store, topic, 6)
    groups = store.groups
    await _offsets(groups, topic, 3)  # the reply "lost": the caller never saw these
    assert await _offsets(groups, topic, 2, last_read="0-0", lost=True) == offsets[:2]
    assert await _offsets(groups, topic, 10, last_read=offsets[1], lost=True) == [offsets[2]]
    assert await _offsets(groups, topic, 10, last_read=offsets[2], lost=True) == offsets[3:]
    assert await _offsets(groups, topic, 10, last_read=offsets[5]) == []


async def test_a_retried_attempt_recovers_the_entries_its_failed_attempt_took(
        store: RedisStreamStore, topic: str, monkeypatch: pytest.MonkeyPatch) -> None:
    offsets = await _group_over(store, topic, 5)
    groups = store.groups
    reads = groups._reads
    real = reads.read_on_node
    failures = []

    async def runs_then_fails_once(slot: int, command: bytes, block_ms: int) -> Any:
        reply = await real(slot, command, block_ms)
        if not failures and b">" in command:
            failures.append(command)
            raise ConnectionLost("connection lost before the reply")
        return reply

    monkeypatch.setattr(reads, "read_on_node", runs_then_fails_once)
    assert await _offsets(groups, topic, 3, last_read="0-0") == offsets[:3]
    assert failures
    assert await _offsets(groups, topic, 10, last_read=offsets[2]) == offsets[3:]


async def test_without_last_read_a_lost_reply_stays_pending_for_redelivery(
        store: RedisStreamStore, topic: str) -> None:
    offsets = await _group_over(store, topic, 3)
    groups = store.groups
    await _offsets(groups, topic, 2)
    assert await _offsets(groups, topic, 10, lost=True) == offsets[2:]
    pending = await groups.expired(topic, P, G, min_idle_ms=0, count=10)
    assert [p.offset for p in pending] == offsets


async def test_recovery_skips_entries_trimmed_while_pending(
        store: RedisStreamStore, topic: str) -> None:
    offsets = await _group_over(store, topic, 4)
    groups = store.groups
    await _offsets(groups, topic, 2)
    await store.router.cluster.xdel(log_key(topic, P), offsets[0])
    assert await _offsets(groups, topic, 10, last_read="0-0", lost=True) == [offsets[1]]
