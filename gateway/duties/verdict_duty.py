"""The owner's verdict round: with each lag round, a sample of every group on an owned partition,
judged against what came before (``duties.verdicts``), set as ``streamgate_group_verdict`` and
posted to the partition's verdict board (``storage.verdicts``).

A stall is a matter of time (no progress for a window), so it takes a history, and only the
partition's owner samples every group of it at a steady pace. It posts its verdicts beside the
stream each round with an expiry; any gateway answering ``GET /v1/groups/{group}`` reads them with
one HGET per partition, and a gone owner's verdicts lapse (reported as unknown) rather than stay.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import orjson

from gateway.duties.lag import GroupLag
from gateway.duties.scale import Flow, observe
from gateway.duties.sweep import SWEEP_CONSUMER, ConsumerStore, PolicySource
from gateway.duties.verdicts import (
    GroupSample,
    History,
    Verdict,
    VerdictConfig,
    advance,
    needs_presence,
)
from gateway.observe.metrics import GatewayMetrics
from partitioner.errors import PartitionerError
from partitioner.etcd.connection import EtcdConnection
from partitioner.group_policy import GroupPolicy
from partitioner.group_state import group_view
from partitioner.topics import TopicMetadata
from storage.groups_protocol import GroupStore

# the ack timeout a group is judged by when it has no stored policy (made by hand, or by Spark)
DEFAULT_WINDOW_MS = 30_000
LOOP_DELIVERIES = 3
PENDING_LOOK = 100  # the oldest pending entries whose delivery counts are read

Holders = Callable[[str, str], Awaitable[Mapping[str, Sequence[int]]]]


class VerdictBoard(Protocol):
    """Where verdicts are posted for every gateway to read."""

    async def post(self, topic: str, partition: int, verdicts: Mapping[str, bytes],
                   ttl_ms: int) -> None:
        """Replace the partition's verdicts, kept ``ttl_ms`` unless posted again."""
        ...


class VerdictReader(Protocol):
    """Where any gateway reads a posted verdict."""

    async def read(self, topic: str, partition: int, group: str) -> bytes | None:
        """The group's verdict on the partition (None: none posted lately)."""
        ...


@dataclass(frozen=True, slots=True)
class VerdictSources:
    """What a verdict round reads and writes: ``holders`` gives a group's members and their
    partitions (None: no coordination), ``topics`` the cached metadata, ``hot_retention_ms`` the
    archive's target (0: no archive), ``ttl_ms`` how long a posted verdict lasts unrenewed,
    ``paused`` whether a group is paused (judged ``paused``, never stalled), ``push_health`` how a
    push subscription's endpoint fares from a partition pushed from here."""

    groups: GroupStore
    consumers: ConsumerStore
    policies: PolicySource
    board: VerdictBoard
    topics: Callable[[str], TopicMetadata | None]
    holders: Holders | None
    hot_retention_ms: int
    ttl_ms: int
    paused: Callable[[str, str], bool] = lambda topic, group: False  # (topic, group) paused now
    # how a push subscription's endpoint fares from (topic, partition, group) on this node
    push_health: Callable[[str, int, str], dict[str, Any] | None] = lambda t, p, g: None


def etcd_holders(etcd: EtcdConnection, prefix: str) -> Holders:
    """A group's current members and the partitions each holds, read from etcd (an assignment
    left to a member that is gone does not count)."""
    async def holders(topic: str, group: str) -> Mapping[str, Sequence[int]]:
        view = await group_view(etcd, topic=topic, group=group, prefix=prefix)
        members = {member.member_id for member in view.members}
        return {m: held for m, held in view.owners.items() if m in members}

    return holders


async def read_verdict(board: VerdictReader | None, topic: str, partition: int,
                       group: str) -> dict[str, Any] | None:
    """The verdict the partition's owner posted for the group, None when it posted none lately."""
    raw = None if board is None else await board.read(topic, partition, group)
    return None if raw is None else Verdict.from_dict(orjson.loads(raw)).to_dict()


async def read_flow(board: VerdictReader | None, topic: str, partition: int,
                    group: str) -> Flow | None:
    """The group's flow on the partition as its owner last posted it (None: none lately)."""
    raw = None if board is None else await board.read(topic, partition, group)
    flow = None if raw is None else orjson.loads(raw).get("flow")
    return None if flow is None else Flow.from_dict(flow)


def ttl_ms_for(lag_interval_s: float) -> int:
    """How long a posted verdict lasts unrenewed: a few lag rounds, a late round forgiven."""
    return max(10_000, int(lag_interval_s * 3000))


def config_of(metadata: TopicMetadata | None, policy: GroupPolicy | None,
              hot_retention_ms: int) -> VerdictConfig:
    """What a group on a topic is judged against."""
    window = DEFAULT_WINDOW_MS if policy is None else policy.ack_timeout_ms
    loops = LOOP_DELIVERIES if policy is None else min(LOOP_DELIVERIES,
                                                       max(2, policy.max_deliveries))
    if metadata is None:
        return VerdictConfig(window, loops)
    compact = metadata.compact
    return VerdictConfig(window, loops, retention_ms=None if compact else metadata.retention_ms,
                         max_length=metadata.max_length,
                         hot_retention_ms=0 if compact else hot_retention_ms)


class VerdictKeeper:
    """The histories, gauges and posted verdicts of the groups on this node's partitions."""

    def __init__(self, sources: VerdictSources, metrics: GatewayMetrics,
                 clock_ms: Callable[[], int] = lambda: int(time.time() * 1000)) -> None:
        self.sources, self.metrics, self._clock_ms = sources, metrics, clock_ms
        self._history: dict[tuple[str, int, str], History] = {}
        self._labels: dict[tuple[str, int, str], tuple[str, str]] = {}  # (state, reason) set
        self._posted: set[tuple[str, int]] = set()  # partitions whose board holds verdicts
        self._flows: dict[tuple[str, int, str], Flow] = {}  # the scale hint's inputs

    async def judge(self, topic: str, partition: int, lags: Sequence[GroupLag]) -> None:
        """Judge every group of a partition from its lag, set the gauges, post the verdicts."""
        policies = await self._policies(topic)
        metadata = self.sources.topics(topic)
        posted: dict[str, bytes] = {}
        for lag in lags:
            config = config_of(metadata, policies.get(lag.group), self.sources.hot_retention_ms)
            verdict = await self._judge_group(topic, partition, lag, config)
            push = self.sources.push_health(topic, partition, lag.group)
            posted[lag.group] = orjson.dumps({**verdict.to_dict(),
                                              "flow": self._flow(topic, partition, lag),
                                              **({} if push is None else {"push": push})})
        self._drop(topic, partition, keep=set(posted))
        if posted or (topic, partition) in self._posted:  # a partition without groups costs none
            await self.sources.board.post(topic, partition, posted, self.sources.ttl_ms)
        self._posted.discard((topic, partition))
        if posted:
            self._posted.add((topic, partition))

    def forget(self, topic: str, partition: int) -> None:
        """Drop a partition's histories and gauges (another node owns it now; its board lapses
        or the new owner replaces it)."""
        self._drop(topic, partition, keep=set())
        self._posted.discard((topic, partition))

    def _flow(self, topic: str, partition: int, lag: GroupLag) -> dict[str, Any] | None:
        key = (topic, partition, lag.group)
        flow = observe(self._flows.get(key), self._clock_ms(), lag.entries_read,
                       lag.lag_entries, lag.pending)
        if flow is None:
            self._flows.pop(key, None)
            return None
        self._flows[key] = flow
        return flow.to_dict()

    async def _policies(self, topic: str) -> Mapping[str, GroupPolicy]:
        try:
            return await self.sources.policies.for_topic(topic)
        except PartitionerError:  # judged by the default window until etcd answers
            return {}

    async def _judge_group(self, topic: str, partition: int, lag: GroupLag,
                           config: VerdictConfig) -> Verdict:
        key = (topic, partition, lag.group)
        history = self._history.get(key)
        sample = await self._sample(topic, partition, lag)
        if needs_presence(history, sample, config):
            present = await self._present(topic, partition, lag.group, config.window_ms)
            sample = dataclasses.replace(sample, present=present)
        self._history[key], verdict = advance(history, sample, config)
        self._export(key, verdict)
        return verdict

    async def _sample(self, topic: str, partition: int, lag: GroupLag) -> GroupSample:
        deliveries, parked = 0, 0
        if lag.pending:
            pending = await self.sources.groups.expired(topic, partition, lag.group,
                                                        min_idle_ms=0, count=PENDING_LOOK)
            deliveries = max((p.delivery_count for p in pending), default=0)
            parked = len(await self.sources.groups.parked(topic, partition, lag.group))
        return GroupSample(self._clock_ms(), lag.lag_entries, lag.pending,
                           lag.last_delivered_offset, lag.oldest_unacked_age_ms,
                           lag.oldest_unread_age_ms, deliveries, parked,
                           paused=self.sources.paused(topic, lag.group),
                           endpoint_error=self._endpoint_error(topic, partition, lag.group))

    def _endpoint_error(self, topic: str, partition: int, group: str) -> str | None:
        """The last error of a push endpoint failing from the partition (None: it does not)."""
        health = self.sources.push_health(topic, partition, group)
        if health is None or not health["consecutive_failures"]:
            return None
        return str(health["last_error"])

    async def _present(self, topic: str, partition: int, group: str, window_ms: int) -> bool | None:
        """Someone read the partition for the group within the window, or a member holds it (None:
        no reader lately and the members could not be read)."""
        consumers = await self.sources.consumers.consumers(topic, partition, group)
        if any(c.name != SWEEP_CONSUMER and c.idle_ms < window_ms for c in consumers):
            return True
        if self.sources.holders is None:
            return False
        try:
            owners = await self.sources.holders(topic, group)
        except PartitionerError:
            return None
        return any(partition in held for held in owners.values())

    def _export(self, key: tuple[str, int, str], verdict: Verdict) -> None:
        labels = (verdict.state, verdict.reason or "")
        if self._labels.get(key) != labels:
            self._remove_gauge(key)
            self._labels[key] = labels
        topic, partition, group = key
        self.metrics.group_verdict.labels(topic, group, str(partition), *labels).set(1)

    def _drop(self, topic: str, partition: int, keep: set[str]) -> None:
        for key in [k for k in self._history if k[:2] == (topic, partition) and k[2] not in keep]:
            del self._history[key]
            self._remove_gauge(key)
        for key in [k for k in self._flows if k[:2] == (topic, partition) and k[2] not in keep]:
            del self._flows[key]

    def _remove_gauge(self, key: tuple[str, int, str]) -> None:
        labels = self._labels.pop(key, None)
        if labels is not None:
            topic, partition, group = key
            with contextlib.suppress(KeyError):
                self.metrics.group_verdict.remove(topic, group, str(partition), *labels)
