"""Dry runs of the destructive admin calls (``?dry_run=true``): what a purge, seek, retention
change, growth or redrive would do, per group, found by reads alone."""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from typing import Any

from aiohttp import web

from gateway.delivery.redrive import REDRIVE_GROUP
from gateway.errors import invalid_field, unavailable
from gateway.offsets import predecessor
from gateway.services import Services
from partitioner.errors import ConcurrentModification, PartitionerError
from partitioner.topics import Epoch, TopicMetadata
from storage.codec import offset_key
from storage.groups_protocol import GroupStore
from storage.models import GroupPartitionState, TrimReport
from storage.redis_store import RedisStreamStore

# a seek's skipped or redelivered entries are counted up to this many ("exact": false beyond)
COUNT_LIMIT = 100_000


def dry_run(request: web.Request) -> bool:
    """The ``dry_run`` query parameter: true or false (absent: false); 422 otherwise."""
    raw = request.query.get("dry_run", "false")
    if raw not in ("true", "false"):
        raise invalid_field("/dry_run", "'dry_run' must be true or false")
    return raw == "true"


def _redis(services: Services) -> RedisStreamStore:
    # the counts read Redis directly (XLEN, XPENDING, bounded XRANGE): only its store has them
    if not isinstance(services.store, RedisStreamStore):
        raise unavailable("dry runs need the Redis store", services.settings.retry_after_s)
    return services.store


def _group_store(services: Services) -> GroupStore | None:
    return None if services.puller is None else services.puller.store


async def _group_names(groups: GroupStore, topic: str, partitions: Sequence[int]) -> list[str]:
    return sorted({name for p in partitions for name in await groups.groups(topic, p)})


async def purge_impact(services: Services, name: str, partitions: Sequence[int]) -> dict[str, Any]:
    """The purge's answer had it run now, with what each group would lose on each partition."""
    redis, groups = _redis(services), _group_store(services)
    docs = [await _purge_partition(redis, groups, name, p) for p in partitions]
    return {"topic": name, "dry_run": True, "purged": sum(d["purged"] for d in docs),
            "scheduled": sum(d["scheduled"] for d in docs), "partitions": docs,
            "groups": _summed(doc["groups"] for doc in docs)}


async def _purge_partition(redis: RedisStreamStore, groups: GroupStore | None, name: str,
                           partition: int) -> dict[str, Any]:
    return {"partition": partition, "purged": await redis.length(name, partition),
            "scheduled": await redis.delayed.scheduled_count(name, partition),
            "cut": await redis.last_offset(name, partition),
            "groups": [] if groups is None else await _purge_losses(groups, name, partition)}


async def _purge_losses(groups: GroupStore, name: str, partition: int) -> list[dict[str, Any]]:
    losses = []
    for group in await _group_names(groups, name, (partition,)):
        state = await groups.state(name, partition, group)
        parked = await groups.parked(name, partition, group)
        losses.append({"group": group, "pending_dropped": state.pending,
                       "unread_dropped": state.lag, "parked_keys": len(parked)})
    return losses


def _summed(per_partition: Any) -> list[dict[str, Any]]:
    """Per-partition group figures added up per group (a figure unknown anywhere is null)."""
    totals: dict[str, dict[str, Any]] = {}
    for rows in per_partition:
        for row in rows:
            total = totals.setdefault(row["group"], {"group": row["group"]})
            for field, value in row.items():
                if field != "group":
                    known = field not in total or total[field] is not None
                    total[field] = (total.get(field, 0) + value
                                    if known and value is not None else None)
    return [totals[group] for group in sorted(totals)]


async def seek_impact(services: Services, topic: TopicMetadata, group: str,
                      positions: Mapping[int, str]) -> dict[str, Any]:
    """The seek's answer had it run now, with each partition's entries skipped or delivered
    again (pending entries stay pending either way)."""
    redis, groups = _redis(services), _group_store(services)
    assert groups is not None  # the seek route asked for the puller already
    moves = [await _seek_partition(redis, groups, topic.name, group, p, start)
             for p, start in sorted(positions.items())]
    return {"topic": topic.name, "group": group, "dry_run": True,
            "positions": {str(p): s for p, s in sorted(positions.items())}, "partitions": moves}


async def _seek_partition(redis: RedisStreamStore, groups: GroupStore, topic: str, group: str,
                          partition: int, start: str) -> dict[str, Any]:
    state = await groups.state(topic, partition, group)
    target = await _resolved(redis, topic, partition, start)
    current = state.last_delivered_offset if state.exists else None
    low, high = sorted((current or "0-0", target), key=offset_key)
    between = await redis.retention.count_between(topic, partition, low, high, COUNT_LIMIT)
    forward = offset_key(target) > offset_key(current or "0-0")
    return {"partition": partition, "from": current, "to": target, "created": not state.exists,
            "skipped": between if forward else 0, "redelivered": 0 if forward else between,
            "pending_kept": state.pending, "exact": between < COUNT_LIMIT}


async def _resolved(redis: RedisStreamStore, topic: str, partition: int, start: str) -> str:
    """The offset a seek's ``start`` places the group at (earliest: before every entry)."""
    if start == "earliest":
        return "0-0"
    if start == "latest":
        return await redis.last_offset(topic, partition) or "0-0"
    return start


async def retention_impact(services: Services, changed: TopicMetadata) -> dict[str, Any]:
    """What the changed retention would trim now, per partition and per group (entries it had
    not acked: pending, or never delivered)."""
    if changed.compact:
        return {"compacted": True, "trimmed": None, "partitions": [], "groups": []}
    redis = _redis(services)
    cutoff_ms = max(int(time.time() * 1000) - changed.retention_ms, 0)
    reports = [await redis.retention.preview(changed.name, p, min_offset=f"{cutoff_ms}-0",
                                             max_length=changed.max_length)
               for p in range(changed.partitions)]
    docs = [_trim_document(report) for report in reports]
    return {"compacted": False, "trimmed": sum(r.removed for r in reports),
            "archived_trimmed": sum(r.archived_removed for r in reports),
            "estimate": redis.archive is not None, "partitions": docs,
            "groups": _summed(doc["groups"] for doc in docs)}


def _trim_document(report: TrimReport) -> dict[str, Any]:
    return {"partition": report.partition, "trimmed": report.removed,
            "archived_trimmed": report.archived_removed, "segments": report.segments_removed,
            "groups": [{"group": group, "unacked_dropped": count}
                       for group, count in sorted(report.unacked_removed.items())]}


async def patch_impact(services: Services, current: TopicMetadata, changed: TopicMetadata,
                       partitions: int | None, retention: bool) -> dict[str, Any]:
    """A topic change's impact: the growth (checked as ``Growth.grow`` checks it; null when the
    count stays) and, when ``retention`` or the length changed, what would be trimmed now."""
    growth = None
    if partitions is not None:
        if services.growth is None:
            raise PartitionerError("growing partitions needs etcd")
        if _grows(current, partitions):
            growth = await growth_impact(services, current, partitions)
    return {"growth": growth,
            "retention": await retention_impact(services, changed) if retention else None}


def _grows(current: TopicMetadata, partitions: int) -> bool:
    """Whether a PATCH to ``partitions`` grows the topic; 422 or 409 as the growth would be."""
    if current.growing_to is None:
        if partitions == current.partitions:
            return False
        current.growing(partitions, 0)  # refuses a shrink or too many partitions
    elif current.growing_to != partitions:
        raise ConcurrentModification(current.name)
    return True


async def growth_impact(services: Services, topic: TopicMetadata,
                        partitions: int) -> dict[str, Any]:
    """What growing ``topic`` to ``partitions`` would do: publishes pause at one cut, a share of
    the keys move, and each group finishes its backlog on the old partitions before it gets the
    moved keys' new messages."""
    before = topic.partitions
    epoch = Epoch(before, partitions, ())
    groups = _group_store(services)
    backlog = [] if groups is None else await _backlogs(groups, topic.name, before)
    return {"from": before, "to": partitions, "added": list(range(before, partitions)),
            "keys_staying": before / math.lcm(before, partitions),
            "sources": {str(q): epoch.sources(q) for q in range(partitions)},
            "publishes_pause": True, "groups": backlog}


async def _backlogs(groups: GroupStore, topic: str, partitions: int) -> list[dict[str, Any]]:
    """Each group's backlog on the old partitions: what it consumes before the moved keys."""
    backlog = []
    for group in await _group_names(groups, topic, range(partitions)):
        states = [await groups.state(topic, p, group) for p in range(partitions)]
        backlog.append({"group": group, "partitions": [_backlog(s) for s in states]})
    return backlog


def _backlog(state: GroupPartitionState) -> dict[str, Any]:
    return {"partition": state.partition, "unread": state.lag, "pending": state.pending}


async def redrive_impact(services: Services, dlq: TopicMetadata,
                         max_messages: int) -> dict[str, Any]:
    """The redrive's answer had it run now: which dead letters would go back, per DLQ
    partition (the oldest first, up to ``max_messages``)."""
    redis, groups = _redis(services), _group_store(services)
    left, docs = max_messages, []
    for partition in range(dlq.partitions):
        waiting = await _waiting_letters(redis, groups, dlq.name, partition)
        docs.append({"partition": partition, "waiting": waiting,
                     "redriven": min(left, waiting)})
        left -= docs[-1]["redriven"]
    return {"redriven": max_messages - left, "dry_run": True, "partitions": docs}


async def _waiting_letters(redis: RedisStreamStore, groups: GroupStore | None, dlq: str,
                           partition: int) -> int:
    """Letters a redrive has not taken yet: those after its group's position (all without one;
    a letter that went back is deleted, so only those taken but not yet put back stay behind)."""
    length = await redis.length(dlq, partition)
    state = None if groups is None else await groups.state(dlq, partition, REDRIVE_GROUP)
    if state is None or not state.exists:
        return length
    return state.lag if state.lag is not None else max(0, length - state.pending)


async def letter_waiting(services: Services, dlq: TopicMetadata, partition: int, offset: str,
                         required: Mapping[str, str]) -> bool:
    """Whether a redrive of the one letter at ``offset`` would find it (one the caller's filter
    lets through)."""
    after = predecessor(offset)
    if partition >= dlq.partitions or after is None:
        return False
    found = await services.store.read(dlq.name, partition, after=after, limit=1)
    return bool(found) and found[0].offset == offset and all(
        found[0].headers.get(name) == value for name, value in required.items())
