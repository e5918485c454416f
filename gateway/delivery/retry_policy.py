"""When a group's failed delivery comes again: after the ack timeout, or a nack's delay, plus the
group's retry backoff (``RetryBackoff``: grows with the delivery count, jittered); or never, when
the consumer rejects it (``dead_letter_now``).

An entry is due once idle for the ack timeout plus its backoff; a nack sets its idle time so that
it falls due when asked: without a delay after the backoff, with one exactly after the delay.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from gateway.offsets import predecessor
from partitioner.group_policy import RetryBackoff
from storage.codec import offset_key
from storage.groups_protocol import GroupStore
from storage.models import Delivery, PendingEntry

DeadLetterSink = Callable[[str, str, Delivery, str], Awaitable[None]]
DeadLetter = tuple[Delivery, str]  # a delivery bound for the dead letters, with why
EXHAUSTED = "max_deliveries exceeded"  # the reason of a delivery that failed too often

# "idle forever": reclaimable by the next reclaim pass
RELEASE_IDLE_MS = 10 * 365 * 24 * 3600 * 1000
# pending entries looked at per reclaim while a retry backoff holds some of them back
LOOKUP_PAGE = 1000


async def due_again(store: GroupStore, topic: str, partition: int, group: str,
                    ack_timeout_ms: int, backoff: RetryBackoff, count: int) -> list[PendingEntry]:
    """Up to ``count`` pending entries due for redelivery, in offset order."""
    expired = await store.expired(topic, partition, group, min_idle_ms=ack_timeout_ms,
                                  count=max(count, LOOKUP_PAGE) if backoff.initial_ms else count)
    if not backoff.initial_ms:
        return expired
    return [entry for entry in expired
            if entry.idle_ms >= ack_timeout_ms + backoff.delay_ms(entry.delivery_count,
                                                                 entry.offset)][:count]


async def nack_idles(store: GroupStore, topic: str, partition: int, group: str,
                     offsets: Sequence[str], delay_ms: int, ack_timeout_ms: int,
                     backoff: RetryBackoff) -> dict[int, list[str]]:
    """The idle time to give each nacked entry, as groups of offsets."""
    if not backoff.initial_ms:
        return {max(0, ack_timeout_ms - delay_ms) if delay_ms else RELEASE_IDLE_MS: list(offsets)}
    if not delay_ms:
        return {ack_timeout_ms: list(offsets)}
    counts = await _delivery_counts(store, topic, partition, group, offsets)
    idles: dict[int, list[str]] = {}
    for offset in offsets:
        waited = backoff.delay_ms(counts.get(offset, 1), offset)
        idles.setdefault(max(0, ack_timeout_ms + waited - delay_ms), []).append(offset)
    return idles


async def dead_letter_now(store: GroupStore, dead_letters: DeadLetterSink, topic: str,
                          partition: int, group: str, consumer: str, offsets: Sequence[str],
                          reason: str) -> int:
    """Move pending entries to the dead-letter topic with ``reason`` and ack them; how many went
    (entries no longer pending, acked or trimmed meanwhile, are skipped)."""
    wanted = set(offsets)
    pending = [entry for entry in await store.expired(
        topic, partition, group, min_idle_ms=0, count=LOOKUP_PAGE,
        after=predecessor(min(offsets, key=offset_key))) if entry.offset in wanted]
    claimed = await store.claim(topic, partition, group, consumer, pending, min_idle_ms=0)
    for delivery in claimed:
        await dead_letters(topic, group, delivery, reason)
    if claimed:
        await store.ack(topic, partition, group, [d.entry.offset for d in claimed])
    return len(claimed)


async def dead_letter_delivered(store: GroupStore, dead_letters: DeadLetterSink, topic: str,
                                group: str, dead: Sequence[DeadLetter]) -> None:
    """Move deliveries the caller holds (claimed or just read) to the dead letters, each with its
    reason, in order, then ack them for the group."""
    by_partition: dict[int, list[str]] = {}
    for delivery, reason in dead:
        await dead_letters(topic, group, delivery, reason)
        by_partition.setdefault(delivery.entry.partition, []).append(delivery.entry.offset)
    for partition, offsets in by_partition.items():
        await store.ack(topic, partition, group, offsets)


async def _delivery_counts(store: GroupStore, topic: str, partition: int, group: str,
                           offsets: Sequence[str]) -> dict[str, int]:
    before = predecessor(min(offsets, key=offset_key))
    pending = await store.expired(topic, partition, group, min_idle_ms=0, count=LOOKUP_PAGE,
                                  after=before)
    return {entry.offset: entry.delivery_count for entry in pending}
