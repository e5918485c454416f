"""Runs the duties of every partition this gateway owns, and stops them when ownership moves.

Two node-level duties cover every owned partition in rounds, each topic's partitions in one
pipelined round per Redis node on the lean connections: the promoter moves due delayed messages
every ``promote_interval_s`` (p99 promotion latency stays under a second), the lag exporter sets the
group lag and partition length gauges every ``lag_interval_s``. (A task per partition polling on a
short timer made an idle node's CPU grow with the partitions it owns.) Per owned partition, one task
sleeps until its next slower duty: apply retention every ``retention_interval_s`` (counting, never
hiding, entries dropped before a group acked them) and sweep the groups every ``sweep_interval_s``
(dead letters past max deliveries, a dead node's deliveries; ``duties.sweep``) and, with an
archive, move its oldest entries there every ``archive_interval_s`` (``duties.archive``). Duties
stop when the partition leaves ``ownership.owned`` (which empties on the node's own clock when its
lease cannot be renewed): the node-level duties read it every round, and the supervisor cancels
the partition's task and drops its gauges. A storage or coordination error is counted and
retried; a crash flips readiness.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable
from dataclasses import dataclass
from types import TracebackType

from gateway.duties.archive import ArchiveDuty
from gateway.duties.lag import LagExporter, VerdictJudge
from gateway.duties.ports import DelayedStore, Ownership, RetentionStore, StreamReader
from gateway.duties.sweep import GroupSweep
from gateway.observe.metrics import GatewayMetrics
from partitioner.cache import TopicCache
from partitioner.errors import PartitionerError
from partitioner.tasks import cancel_until_done
from partitioner.topics import TopicMetadata
from storage.errors import StorageError
from storage.groups_protocol import GroupStore

log = logging.getLogger(__name__)

PROMOTE_BATCH = 500
RECONCILE_EVERY_S = 1.0
CHANGE_DEBOUNCE_S = 0.02


@dataclass(frozen=True, slots=True)
class DutySettings:
    """How often each duty runs."""

    promote_interval_s: float = 0.1
    retention_interval_s: float = 30.0
    lag_interval_s: float = 5.0
    sweep_interval_s: float = 5.0
    archive_interval_s: float = 1.0


def _being_cancelled() -> bool:
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


class PartitionDuties:
    """The duties of one owned partition."""

    def __init__(self, runner: DutyRunner, topic: str, partition: int) -> None:
        self.runner, self.topic, self.partition = runner, topic, partition
        self._next_trim = 0.0
        self._next_sweep = 0.0
        self._next_archive = 0.0
        self._archive_epoch: int | None = None  # the epoch whose leftovers were cleared

    async def run(self) -> None:
        """Until ownership moves or the topic goes away."""
        while (metadata := self.runner.cache.get(self.topic)) is not None and self._owned():
            await self._turn(metadata)
            await asyncio.sleep(self._until_next_duty())

    def _owned(self) -> bool:
        return (self.topic, self.partition) in self.runner.ownership.owned

    def _until_next_duty(self) -> float:
        due = [self._next_trim] + ([self._next_sweep] if self.runner.sweep is not None else [])
        if self.runner.archive is not None:
            due.append(self._next_archive)
        return max(0.0, min(due) - time.monotonic())

    async def _turn(self, metadata: TopicMetadata) -> None:
        now = time.monotonic()
        if now >= self._next_trim:
            self._next_trim = now + self.runner.settings.retention_interval_s
            await self._guarded("retention", self._trim(metadata))
        if self.runner.sweep is not None and now >= self._next_sweep:
            self._next_sweep = now + self.runner.settings.sweep_interval_s
            await self._guarded("sweep", self.runner.sweep.sweep(self.topic, self.partition,
                                                                 self.runner.ownership.live_nodes))
        if self.runner.archive is not None and now >= self._next_archive:
            self._next_archive = now + self.runner.settings.archive_interval_s
            await self._guarded("archive", self._archive(metadata))

    async def _guarded(self, duty: str, work: Awaitable[None]) -> None:
        try:
            await work
        except (StorageError, PartitionerError) as exc:
            # a cancel that landed inside a gRPC call surfaces as an RPC error
            if _being_cancelled():
                raise asyncio.CancelledError from exc
            self.runner.metrics.duty_errors.labels(duty).inc()
            log.warning("%s duty of %s/%s failed, will retry: %s", duty, self.topic, self.partition,
                        exc)

    async def _archive(self, metadata: TopicMetadata) -> None:
        archive = self.runner.archive
        epoch = self.runner.ownership.epoch(self.topic, self.partition)
        if archive is None or epoch is None:
            return
        if self._archive_epoch != epoch:
            await archive.start(self.topic, self.partition, epoch)
            self._archive_epoch = epoch
        await archive.turn(metadata, self.partition, epoch)

    async def _trim(self, metadata: TopicMetadata) -> None:
        if metadata.compact:
            removed = await self.runner.retention.compact(self.topic, self.partition,
                                                          metadata.retention_ms)
            if removed:
                self.runner.metrics.compacted.labels(self.topic).inc(removed)
            return
        cutoff_ms = int(time.time() * 1000) - metadata.retention_ms
        report = await self.runner.retention.trim(self.topic, self.partition,
                                                  min_offset=f"{max(cutoff_ms, 0)}-0",
                                              max_length=metadata.max_length)
        metrics = self.runner.metrics
        # archived entries count too: retention covers the whole log, whichever tier held it
        if report.removed or report.archived_removed:
            metrics.retention_trimmed.labels(self.topic).inc(report.removed
                                                             + report.archived_removed)
        if report.segments_removed:
            log.info("retention dropped %d archived segments (%d entries) of %s/%s",
                     report.segments_removed, report.archived_removed, self.topic, self.partition)
        for group, dropped in report.unacked_removed.items():
            if dropped:
                metrics.retention_unacked_dropped.labels(self.topic, group).inc(dropped)
                log.warning("retention event: trimming %s/%s dropped %d entries group %r had not "
                            "acked", self.topic, self.partition, dropped, group)


class DutyRunner:
    """Keeps the node's promoter and lag exporter, and one duty task per owned partition (async
    context manager)."""

    def __init__(self, ownership: Ownership, cache: TopicCache, *, delayed: DelayedStore,
                 retention: RetentionStore, streams: StreamReader, groups: GroupStore,
                 metrics: GatewayMetrics, settings: DutySettings,
                 sweep: GroupSweep | None = None, archive: ArchiveDuty | None = None,
                 verdicts: VerdictJudge | None = None) -> None:
        self.ownership, self.cache, self.streams, self.groups = ownership, cache, streams, groups
        self.sweep = sweep
        self.archive = archive
        self.delayed, self.retention = delayed, retention
        self.metrics, self.settings = metrics, settings
        self._tasks: dict[tuple[str, int], asyncio.Task[None]] = {}
        self._supervisor: asyncio.Task[None] | None = None
        self._promoter: asyncio.Task[None] | None = None
        self._lag_exporter: asyncio.Task[None] | None = None
        self.lag = LagExporter(streams, groups, metrics, verdicts)
        self.crashed: BaseException | None = None

    async def __aenter__(self) -> DutyRunner:
        self._supervisor = asyncio.create_task(self._supervise(), name="duty-supervisor")
        self._promoter = asyncio.create_task(self._promote_forever(), name="duty-promoter")
        self._promoter.add_done_callback(self._node_duty_ended)
        self._lag_exporter = asyncio.create_task(self._export_lag_forever(), name="duty-lag")
        self._lag_exporter.add_done_callback(self._node_duty_ended)
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Stop every duty; idempotent."""
        tasks = [t for t in [self._supervisor, self._promoter, self._lag_exporter,
                             *self._tasks.values()]
                 if t is not None]
        self._supervisor, self._promoter, self._lag_exporter, self._tasks = None, None, None, {}
        await cancel_until_done(tasks)
        for task in tasks:
            if not task.cancelled():
                task.exception()  # retrieved: a crash was already reported by the supervisor's reap

    @property
    def healthy(self) -> bool:
        """False when a duty crashed (not a retried storage error) or ownership is unhealthy."""
        return self.crashed is None and self.ownership.healthy

    @property
    def running(self) -> frozenset[tuple[str, int]]:
        """Partitions whose duties run now."""
        return frozenset(key for key, task in self._tasks.items() if not task.done())

    async def _supervise(self) -> None:
        while True:
            self._reconcile()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.ownership.wait_changed(), RECONCILE_EVERY_S)
            # coalesce bursts; never spin if ownership keeps returning
            await asyncio.sleep(CHANGE_DEBOUNCE_S)

    def _reconcile(self) -> None:
        owned = self.ownership.owned
        for key in self._tasks.keys() - owned:
            # it may be asleep until its next duty; a finished one ignores this
            self._tasks[key].cancel()
        for key in set(self.lag.exported()) - owned:
            self.lag.forget(*key)  # at once, not at the next lag round
        for key in [k for k, task in self._tasks.items() if task.done()]:
            self._reap(key)
        for key in owned - self._tasks.keys():
            duties = PartitionDuties(self, *key)
            self._tasks[key] = asyncio.create_task(duties.run(), name=f"duties-{key[0]}/{key[1]}")
        self.metrics.set_ownership({topic.name: topic.partitions for topic in self.cache.all()},
                                   owned)

    async def _promote_forever(self) -> None:
        while True:
            await asyncio.gather(*(
                self._promote_topic(topic, partitions)
                for topic, partitions in _by_topic(self.ownership.owned).items()))
            await asyncio.sleep(self.settings.promote_interval_s)

    async def _promote_topic(self, topic: str, partitions: list[int]) -> None:
        """Promote what is due in the topic's owned partitions; partitions with a full batch go
        again at once."""
        while partitions and (metadata := self.cache.get(topic)) is not None:
            try:
                promoted = await self.delayed.promote_due_partitions(topic, partitions,
                                                                     limit=PROMOTE_BATCH,
                                                                     max_length=metadata.max_length)
            except (StorageError, PartitionerError) as exc:
                if _being_cancelled():
                    raise asyncio.CancelledError from exc
                self.metrics.duty_errors.labels("promote").inc()
                log.warning("promote duty of %s (%d partitions) failed, will retry: %s", topic,
                            len(partitions), exc)
                return
            count = sum(len(results) for results in promoted.values())
            if count:
                self.metrics.delayed_promoted.labels(topic).inc(count)
            owned = self.ownership.owned
            partitions = [p for p, results in promoted.items()
                          if len(results) >= PROMOTE_BATCH and (topic, p) in owned]

    async def _export_lag_forever(self) -> None:
        while True:
            owned = self.ownership.owned
            for key in set(self.lag.exported()) - owned:
                self.lag.forget(*key)
            await asyncio.gather(*(self._export_topic_lag(topic, partitions)
                                   for topic, partitions in _by_topic(owned).items()))
            await asyncio.sleep(self.settings.lag_interval_s)

    async def _export_topic_lag(self, topic: str, partitions: list[int]) -> None:
        try:
            await self.lag.export_topic(topic, partitions,
                                        lambda t, p: (t, p) in self.ownership.owned)
        except (StorageError, PartitionerError) as exc:
            if _being_cancelled():
                raise asyncio.CancelledError from exc
            self.metrics.duty_errors.labels("lag").inc()
            log.warning("lag duty of %s (%d partitions) failed, will retry: %s", topic,
                        len(partitions), exc)

    def _node_duty_ended(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            self.crashed = task.exception()
            log.error("node duty %s crashed", task.get_name(), exc_info=self.crashed)

    def _reap(self, key: tuple[str, int]) -> None:
        task = self._tasks.pop(key)
        if not task.cancelled() and task.exception() is not None:
            self.crashed = task.exception()
            log.error("duties of %s/%s crashed", *key, exc_info=self.crashed)


def _by_topic(owned: frozenset[tuple[str, int]]) -> dict[str, list[int]]:
    """Owned partitions grouped by topic, in partition order."""
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(owned):
        by_topic.setdefault(topic, []).append(partition)
    return by_topic
