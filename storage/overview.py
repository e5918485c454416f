"""Partition overviews for the lag duty (a partition's length, first offset and every group's
position on it) and newest offsets for subscriptions starting at ``latest``, many partitions per
round trip."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from storage.archive.catch_up import catch_up_states
from storage.archive.manifest import catching_up_key
from storage.archive.tier import ArchiveTier
from storage.cluster import ClusterRouter
from storage.codec import decode_offset
from storage.group_replies import info_row, state_from, text
from storage.keys import log_key, slot_of
from storage.models import GroupPartitionState
from storage.wire.connection import NodeAddress
from storage.wire.errors import ResponseError
from storage.wire.lanes import NodeLanes

# ``XLEN``, ``XINFO GROUPS``, the first entry (``XRANGE - + COUNT 1``: how old the hot tier is)
# and how many groups read the archive through catch-up streams (their states then come from one
# script: ``storage.archive.catch_up.STATES``) of every asked partition go out as one pipeline per
# owning node on the node connections
# (``storage.wire.lanes``), far less client CPU per command than through redis-py. A partition
# whose replies are not plain answers (a slot moved: MOVED/ASK, a node failing) is left out of
# the result; the caller reads it the slow, retrying way.
# ``oldest_pending_offset`` is not known from XINFO GROUPS: it is None in an overview, also for
# groups with pending entries (``RedisGroupStore.state`` has it).


@dataclass(frozen=True, slots=True)
class PartitionOverview:
    """A partition's length and its groups' positions by name (``oldest_pending_offset`` left
    None); ``first_offset`` is the oldest entry still in the stream (None: empty, or not read)."""

    partition: int
    length: int
    groups: Mapping[str, GroupPartitionState]
    first_offset: str | None = None


async def read_overviews(router: ClusterRouter, lanes: NodeLanes, topic: str,
                         partitions: Sequence[int],
                         tier: ArchiveTier | None) -> dict[int, PartitionOverview]:
    """Overviews of the partitions that answered plainly; the others are missing from the result.
    ``tier`` counts the lag of groups catching up exactly (``catch_up_states``)."""
    by_node = partitions_by_node(router, topic, partitions)
    found: dict[int, PartitionOverview] = {}
    for answered in await asyncio.gather(*(_read_on_node(lanes, addr, topic, group, tier)
                                           for addr, group in by_node.items())):
        found.update(answered)
    return found


def partitions_by_node(router: ClusterRouter, topic: str,
                       partitions: Sequence[int]) -> dict[NodeAddress, list[int]]:
    """The partitions (each once) grouped by the node owning their slot; empty while a slot has no
    owner."""
    by_node: dict[NodeAddress, list[int]] = {}
    try:
        for partition in dict.fromkeys(partitions):
            by_node.setdefault(router.node_for_slot(slot_of(topic, partition)),
                               []).append(partition)
    except Exception:  # the slot map lost a slot (failover in progress): every partition the slow
                       # way
        return {}
    return by_node


async def read_last_offsets(router: ClusterRouter, lanes: NodeLanes, topic: str,
                            partitions: Sequence[int]) -> dict[int, str | None]:
    """The newest offset (None: empty) of the partitions that answered plainly, one pipeline per
    node on the node connections; the others are missing from the result."""
    found: dict[int, str | None] = {}
    for answered in await asyncio.gather(
            *(_last_offsets_on_node(lanes, addr, topic, group)
              for addr, group in partitions_by_node(router, topic, partitions).items())):
        found.update(answered)
    return found


async def _last_offsets_on_node(lanes: NodeLanes, addr: NodeAddress, topic: str,
                                partitions: list[int]) -> dict[int, str | None]:
    commands = [("XREVRANGE", log_key(topic, partition), "+", "-", "COUNT", 1)
                for partition in partitions]
    try:
        replies = await lanes.execute(addr, commands, exclusive=False)
    except Exception:  # connection lost or timed out: these partitions go the slow way
        return {}
    return {partition: decode_offset(reply[0][0]) if reply else None
            for partition, reply in zip(partitions, replies, strict=True)
            if isinstance(reply, list)}


async def _read_on_node(lanes: NodeLanes, addr: NodeAddress, topic: str, partitions: list[int],
                        tier: ArchiveTier | None) -> dict[int, PartitionOverview]:
    commands: list[tuple[Any, ...] | bytes] = []
    for partition in partitions:
        key = log_key(topic, partition)
        commands += [("XLEN", key), ("XINFO", "GROUPS", key), ("XRANGE", key, "-", "+", "COUNT", 1),
                     ("SCARD", catching_up_key(topic, partition))]
    try:
        replies = await lanes.execute(addr, commands, exclusive=False)
    except Exception:  # connection lost or timed out: these partitions go the slow way
        return {}
    found: dict[int, PartitionOverview] = {}
    for index, partition in enumerate(partitions):
        length, groups, first, behind = replies[4 * index:4 * index + 4]
        overview = _overview(partition, length, groups, first)
        if overview is not None and behind != 0:  # groups reading the archive: their states
            overview = await _with_catch_ups(lanes, addr, topic, overview, tier)
        if overview is not None:
            found[partition] = overview
    return found


async def _with_catch_ups(lanes: NodeLanes, addr: NodeAddress, topic: str,
                          overview: PartitionOverview,
                          tier: ArchiveTier | None) -> PartitionOverview | None:
    try:
        states = await catch_up_states(lanes, addr, topic, overview.partition, tier)
    except Exception:  # a failing node or a moved slot: the slow way
        return None
    return dataclasses.replace(overview, groups={**overview.groups, **states})


def _overview(partition: int, length: Any, groups: Any, first: Any) -> PartitionOverview | None:
    if isinstance(length, BaseException) or not isinstance(first, list):
        return None
    if isinstance(groups, ResponseError) and "no such key" in str(groups).lower():
        groups = []  # the stream does not exist (yet)
    elif isinstance(groups, BaseException) or not isinstance(groups, list):
        return None
    rows = [info_row(flat) for flat in groups]
    return PartitionOverview(partition, int(length),
                             {text(row["name"]): state_from(partition, row, None)
                              for row in rows},
                             decode_offset(first[0][0]) if first else None)
