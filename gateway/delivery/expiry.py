"""Per-message time to live: a message whose ``sg-expires-at`` header (epoch ms, set on publish from
``ttl_ms``) has passed is not delivered; it is counted and logged (a group acks it), never dropped
silently."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from itertools import repeat
from operator import attrgetter, contains
from typing import Any, NamedTuple

from storage.models import Delivery, StoredEntry

log = logging.getLogger(__name__)

EXPIRES_AT = "sg-expires-at"
_HEADERS = attrgetter("headers")
_DELIVERED_HEADERS = attrgetter("entry.headers")


def now_ms() -> int:
    """The gateway's clock in epoch ms, as expiry times are written."""
    return int(time.time() * 1000)


def is_expired(headers: Mapping[str, str], at_ms: int) -> bool:
    """Whether a message with these headers has expired at ``at_ms``."""
    expires = headers.get(EXPIRES_AT)
    return expires is not None and expires.isdigit() and int(expires) <= at_ms


def may_expire(entries: Sequence[StoredEntry]) -> bool:
    """Whether any entry carries an expiry: the common page has none (headers of other kinds, such
    as a schema version, included), and skips the per-entry check."""
    return any(map(contains, map(_HEADERS, entries), repeat(EXPIRES_AT)))


def deliveries_may_expire(deliveries: Sequence[Delivery]) -> bool:
    """``may_expire`` of the deliveries' entries."""
    return any(map(contains, map(_DELIVERED_HEADERS, deliveries), repeat(EXPIRES_AT)))


def split_expired(entries: Sequence[StoredEntry],
                  at_ms: int) -> tuple[list[StoredEntry], list[StoredEntry]]:
    """The entries still live, and those expired at ``at_ms``."""
    live: list[StoredEntry] = []
    expired: list[StoredEntry] = []
    for entry in entries:
        (expired if entry.headers and is_expired(entry.headers, at_ms) else live).append(entry)
    return live, expired


def report_expired(counter: Any, topic: str, group: str, expired: Sequence[StoredEntry]) -> None:
    """Count expired entries on ``counter`` (a labelled child) and log them, one line a page."""
    if not expired:
        return
    counter.inc(len(expired))
    log.info("%d expired messages not delivered in %s/%s for %s (offsets %s..%s)", len(expired),
             topic, expired[0].partition, group or "a broadcast subscriber", expired[0].offset,
             expired[-1].offset)


class BroadcastCounts(NamedTuple):
    """The labelled counters a broadcast subscription of one topic reports on."""

    delivered: Any
    expired: Any

    @classmethod
    def of(cls, metrics: Any, topic: str) -> BroadcastCounts:
        """The broadcast children (group label empty) of ``metrics`` for ``topic``."""
        return cls(metrics.deliveries.labels(topic, "", "broadcast"),
                   metrics.expired.labels(topic, "", "broadcast"))
