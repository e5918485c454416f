"""The cap on consumer groups per principal: a principal asking for a group that does not exist yet
is charged one group in the etcd ledger (``partitioner.group_ledger``), shared by every replica;
joining an existing group is free. Each (principal, topic, group) is checked once per process."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from gateway.auth.errors import GroupsLimitReached
from partitioner.group_ledger import GroupLedger

MAX_REMEMBERED = 100_000


class GroupNames(Protocol):
    """What the quota reads of the group store: the groups that exist on a partition."""

    async def groups(self, topic: str, partition: int) -> list[str]: ...


class GroupQuota:
    """Admits or refuses a principal's use of a group; refusals raise GroupsLimitReached."""

    def __init__(self, ledger: GroupLedger, cap: int, groups: GroupNames,
                 topic_exists: Callable[[str], bool]) -> None:
        self._ledger, self.cap, self._groups = ledger, cap, groups
        self._topic_exists = topic_exists
        self._admitted: set[tuple[str, str, str]] = set()

    async def admit(self, principal: str, topic: str, group: str) -> None:
        """Return when ``principal`` may use ``group`` on ``topic``; GroupsLimitReached when it
        would create one past the cap."""
        seen = (principal, topic, group)
        if self.cap == 0 or seen in self._admitted:
            return
        # Groups are created on every partition together: partition 0 tells whether this one exists.
        if group not in await self._groups.groups(topic, 0) and not await self._ledger.claim(
                principal, topic, group, self.cap, lambda pair: self._topic_exists(pair[0])):
            raise GroupsLimitReached(f"{principal!r} already created {self.cap} consumer groups "
                                     "(max_groups_per_principal); reuse one of them", self.cap)
        if len(self._admitted) >= MAX_REMEMBERED:
            self._admitted.clear()
        self._admitted.add(seen)
