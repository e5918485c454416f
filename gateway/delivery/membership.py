"""How this gateway joins a group's etcd membership, for exclusive sessions and key_shared seats
alike, and how it waits for an assignment unless the membership is lost first."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any

from partitioner.cache import TopicCache
from partitioner.errors import MembershipLost
from partitioner.etcd.connection import EtcdConnection
from partitioner.membership import GroupMember
from partitioner.topics import TopicMetadata


@dataclass(frozen=True, slots=True)
class Membership:
    """The etcd connection and the settings every group member of this gateway is made with."""

    etcd: EtcdConnection
    cache: TopicCache  # the partition counts of grown topics
    node_id: str
    prefix: str
    lease_ttl_s: float
    initial_assignment_delay_s: float

    def member(self, topic: TopicMetadata, group: str, member_id: str) -> GroupMember:
        """A member of ``group`` on ``topic`` (an async context manager: it joins on entry)."""
        cache = self.cache

        def partition_count() -> int:
            current = cache.get(topic.name)
            return current.partitions if current is not None else topic.partitions

        return GroupMember(self.etcd, topic=topic.name, group=group, member_id=member_id,
                           node=self.node_id, partition_count=partition_count,
                           prefix=self.prefix, lease_ttl_s=self.lease_ttl_s,
                           initial_assignment_delay_s=self.initial_assignment_delay_s)


async def first_unless_lost(awaitable: Awaitable[Any], lost: asyncio.Future[Any],
                            member: GroupMember) -> Any:
    """The result of ``awaitable`` unless the membership is lost first."""
    task = asyncio.ensure_future(awaitable)
    try:
        await asyncio.wait([task, lost], return_when=asyncio.FIRST_COMPLETED)
    finally:
        if not task.done():
            task.cancel()
    if task.cancelled():
        raise MembershipLost(member.topic, member.group, member.member_id)
    return task.result()
