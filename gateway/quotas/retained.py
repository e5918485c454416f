"""The retained-bytes quota: publishes charged to a subject's minute buckets in a ledger shared by
every gateway, admitted while what the subject's buckets still retain stays under its cap."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from gateway.auth.errors import QuotaExceeded
from gateway.auth.quotas import QuotaSubject
from gateway.observe.metrics import GatewayMetrics
from gateway.quotas.buckets import (
    Tally,
    TopicSpan,
    bucket_end_ms,
    field_of,
    log_start_ms,
    tally,
    topics_of,
)
from partitioner.topics import TopicMetadata
from storage.models import PartitionInfo

log = logging.getLogger(__name__)

KIND = "retained_bytes"
ACTIVE_FOR_MS = 5 * 60_000  # a subject not seen for this long is no longer read each round
MAX_ACTIVE_SUBJECTS = 10_000
MAX_SPANS = 10_000
SPAN_FRESH_MS = 5_000  # a topic's log start is read again after this
RETRY_AFTER_MAX_S = 60

TopicLookup = Callable[[str], Awaitable[TopicMetadata | None]]
PartitionInfos = Callable[[str, int], Awaitable[list[PartitionInfo]]]


class QuotaLedger(Protocol):
    """Where every gateway's charges meet (``storage.quota_ledger.RedisQuotaLedger``)."""

    async def charge(self, charges: Mapping[str, Mapping[str, int]]) -> None: ...

    async def buckets(self, subjects: Iterable[str]) -> dict[str, dict[str, int]]: ...

    async def forget(self, counted: Mapping[str, Mapping[str, int]]) -> None: ...


@dataclass(frozen=True, slots=True)
class Usage:
    """A subject's retained bytes as last read, and when its oldest counted bucket leaves."""

    used: int
    leaves_at_ms: int | None


class RetainedQuota:
    """Admits and charges publishes against their subjects' retained-bytes caps; a background
    loop flushes this gateway's charges and reads every active subject's usage each
    ``interval_s`` (so gateways agree within about one interval)."""

    def __init__(self, ledger: QuotaLedger, topics: TopicLookup, infos: PartitionInfos,
                 metrics: GatewayMetrics, interval_s: float,
                 clock: Callable[[], float] = time.time) -> None:
        self._ledger, self._topics, self._infos = ledger, topics, infos
        self._metrics, self._interval_s, self._clock = metrics, interval_s, clock
        self._pending: dict[str, dict[str, int]] = {}
        self._in_transit: dict[str, int] = {}  # flushed, not read back yet
        self._usage: dict[str, Usage] = {}
        self._active: OrderedDict[str, tuple[QuotaSubject, int]] = OrderedDict()
        self._spans: OrderedDict[str, tuple[TopicSpan | None, int]] = OrderedDict()
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> RetainedQuota:
        self._task = asyncio.create_task(self._run(), name="retained-quota")
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Stop the loop and flush what is pending, once (idempotent)."""
        task, self._task = self._task, None
        if task is None:
            return
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        with contextlib.suppress(Exception):
            await self._flush()

    async def admit(self, subject: QuotaSubject, topic: TopicMetadata, nbytes: int) -> None:
        """Raise QuotaExceeded when ``nbytes`` more would take ``subject`` past its cap."""
        cap = subject.retained_bytes
        if cap is None:
            return
        self._touch(subject)
        usage = self._usage.get(subject.name) or await self._read_first(subject.name)
        used = usage.used + self._unread(subject.name)
        if used + nbytes <= cap:
            return
        self._metrics.quota_refused.labels(subject.name, KIND).inc()
        raise QuotaExceeded(
            f"{subject.name} holds {used} bytes in the log of its {cap}; {nbytes} more do not "
            f"fit on topic {topic.name!r} until older messages leave retention", KIND,
            subject.name, cap, used, self._retry_after_s(usage))

    async def used(self, subject: QuotaSubject) -> int | None:
        """The bytes ``subject`` holds in the log as this gateway knows them, read first if it was
        never read here (None: no retained cap, so nothing is counted)."""
        if subject.retained_bytes is None:
            return None
        self._touch(subject)
        usage = self._usage.get(subject.name) or await self._read_first(subject.name)
        return usage.used + self._unread(subject.name)

    def charge(self, subject: QuotaSubject, topic: TopicMetadata, nbytes: int) -> None:
        """Count ``nbytes`` written (or queued) to ``topic`` for ``subject``."""
        if nbytes <= 0 or subject.retained_bytes is None:
            return
        self._touch(subject)
        name = field_of(topic.name, topic.created_at_ms, bucket_end_ms(self._now_ms()))
        fields = self._pending.setdefault(subject.name, {})
        fields[name] = fields.get(name, 0) + nbytes

    async def sync(self) -> None:
        """One round: flush the pending charges, read the active subjects back, drop the buckets
        that count no more, refresh the metrics."""
        await self._flush()
        self._expire_inactive()
        names = list(self._active)
        buckets = await self._ledger.buckets(names)
        dead: dict[str, dict[str, int]] = {}
        for name in names:
            counted = await self._tally(buckets.get(name, {}))
            self._usage[name] = Usage(counted.used, counted.leaves_at_ms)
            self._in_transit.pop(name, None)
            if counted.dead:
                dead[name] = counted.dead
        if dead:
            await self._ledger.forget(dead)
        self._show()

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._interval_s)
            try:
                await self.sync()
            except Exception:  # the next round tries again; pending charges are kept
                log.warning("retained quota sync failed", exc_info=True)

    async def _flush(self) -> None:
        pending, self._pending = self._pending, {}
        if not pending:
            return
        try:
            await self._ledger.charge(pending)
        except BaseException:
            self._merge_back(pending)
            raise
        for name, fields in pending.items():
            self._in_transit[name] = self._in_transit.get(name, 0) + sum(fields.values())

    def _merge_back(self, pending: dict[str, dict[str, int]]) -> None:
        for name, fields in pending.items():
            mine = self._pending.setdefault(name, {})
            for field_name, nbytes in fields.items():
                mine[field_name] = mine.get(field_name, 0) + nbytes

    async def _read_first(self, name: str) -> Usage:
        """A subject this process has not read yet, read before answering (a restarted gateway
        must not admit blindly)."""
        counted = await self._tally((await self._ledger.buckets([name])).get(name, {}))
        usage = self._usage[name] = Usage(counted.used, counted.leaves_at_ms)
        return usage

    async def _tally(self, buckets: Mapping[str, int]) -> Tally:
        now_ms = self._now_ms()
        spans = {topic: await self._span(topic, now_ms) for topic in topics_of(buckets)}
        return tally(buckets, spans, now_ms)

    async def _span(self, topic: str, now_ms: int) -> TopicSpan | None:
        known = self._spans.get(topic)
        if known is not None and now_ms - known[1] < SPAN_FRESH_MS:
            return known[0]
        metadata = await self._topics(topic)
        span = None if metadata is None else TopicSpan(
            metadata.created_at_ms, metadata.retention_ms,
            log_start_ms(await self._infos(topic, metadata.partitions)))
        # an empty topic is read again next time: a write may land in it any moment
        if span is not None and span.log_start_ms is not None:
            self._spans[topic] = (span, now_ms)
            self._spans.move_to_end(topic)
            while len(self._spans) > MAX_SPANS:
                self._spans.popitem(last=False)
        return span

    def _unread(self, name: str) -> int:
        pending = self._pending.get(name)
        return self._in_transit.get(name, 0) + (sum(pending.values()) if pending else 0)

    def _retry_after_s(self, usage: Usage) -> float:
        if usage.leaves_at_ms is None:
            return RETRY_AFTER_MAX_S
        return float(min(RETRY_AFTER_MAX_S,
                         max(1, -(-(usage.leaves_at_ms - self._now_ms()) // 1000))))

    def _touch(self, subject: QuotaSubject) -> None:
        self._active[subject.name] = (subject, self._now_ms())
        self._active.move_to_end(subject.name)
        while len(self._active) > MAX_ACTIVE_SUBJECTS:
            self._forget_subject(self._active.popitem(last=False)[0])

    def _expire_inactive(self) -> None:
        oldest_ms = self._now_ms() - ACTIVE_FOR_MS
        while self._active and next(iter(self._active.values()))[1] < oldest_ms:
            self._forget_subject(self._active.popitem(last=False)[0])

    def _forget_subject(self, name: str) -> None:
        """No longer read each round (its pending charges still go out)."""
        self._usage.pop(name, None)
        self._in_transit.pop(name, None)
        for gauge in (self._metrics.quota_used, self._metrics.quota_limit):
            with contextlib.suppress(KeyError):
                gauge.remove(name, KIND)

    def _show(self) -> None:
        for name, (subject, _) in self._active.items():
            usage = self._usage.get(name)
            if subject.retained_bytes is None or usage is None:
                continue
            self._metrics.quota_used.labels(name, KIND).set(usage.used)
            self._metrics.quota_limit.labels(name, KIND).set(subject.retained_bytes)

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)
