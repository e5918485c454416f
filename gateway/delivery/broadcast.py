"""Broadcast subscriptions: no group, every subscriber reads every partition from its own cursor.

Each partition is followed by reading pages after the session's cursor (XRANGE), as fast as the
session's credit allows, and polling briefly when caught up. Entries the session's header filter
rejects, and expired ones, are skipped. Delivery is at-most-once per connection and resumable: the
cursor (the last offset handed to the socket, per partition) is the ``from`` of the next
subscription.
"""

from __future__ import annotations

import asyncio

from gateway.delivery.expiry import BroadcastCounts, is_expired, now_ms, report_expired
from gateway.delivery.session import Session
from gateway.observe.metrics import GatewayMetrics
from gateway.observe.tracing import delivery_span
from storage.models import Delivery, StoredEntry
from storage.protocol import StreamStore

PAGE_MAX = 500
IDLE_POLL_S = 0.05


async def resolve_start(store: StreamStore, session: Session,
                        partitions: int) -> dict[int, str | None]:
    """The offset each partition is read after: None reads from the first retained entry."""
    params = session.params
    if params.start == "cursor":
        return {partition: params.cursor.get(partition) for partition in range(partitions)}
    if params.start == "latest" and params.from_time_ms is None:
        return await store.last_offsets(session.topic, range(partitions))
    return dict.fromkeys(range(partitions))


async def follow_partition(store: StreamStore, session: Session, partition: int, after: str | None,
                           metrics: GatewayMetrics | None = None) -> None:
    """Deliver a partition's entries to the session, forever (cancelled when the session ends)."""
    counts = BroadcastCounts.of(metrics or GatewayMetrics.create(), session.topic)
    credit = asyncio.Event()
    session.watch_credit(credit)
    from_time_ms = session.params.from_time_ms if after is None else None
    header_filter = session.params.filter  # includes the principal's forced filter
    try:
        while True:
            while not session.has_credit:
                if session.closing.done():
                    return
                credit.clear()
                await credit.wait()  # also set when the session starts closing
            entries = await store.read(session.topic, partition, after=after,
                                       from_time_ms=from_time_ms,
                                       limit=min(session.credit, PAGE_MAX))
            if not entries:
                await asyncio.sleep(IDLE_POLL_S)
                continue
            at_ms = now_ms()
            expired: list[StoredEntry] = []
            for entry in entries:
                # Other partitions share the credit, so it may run out mid-page: re-read from here
                # later.
                if entry.headers and is_expired(entry.headers, at_ms):
                    expired.append(entry)
                elif header_filter.matches(entry.headers):
                    if not session.offer(Delivery(entry, 1)):
                        break
                    counts.delivered.inc()
                    delivery_span(session.topic, "", "broadcast", (entry,))
                after, from_time_ms = entry.offset, None
            report_expired(counts.expired, session.topic, "", expired)
    finally:
        session.unwatch_credit(credit)
