"""Which keys may hold a consumer group (its partition's log, or a catch-up stream while it reads
the archive), and where this store last found each group."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

from storage.archive.catch_up import CatchUp
from storage.archive.manifest import catch_up_key
from storage.errors import StorageError
from storage.keys import log_key

T = TypeVar("T")


class MissingGroup(StorageError):
    """Internal to storage: a key holds no such group (or no stream); the group is looked for on
    its other key, and read_new re-creates it and retries once."""


class GroupKeys:
    """The keys of the groups of one store. Without an archive a group lives on its log alone;
    with one, a group placed inside the archive reads through its catch-up stream, and this store
    remembers where it last found (or moved) each group so that key is tried first."""

    def __init__(self, catch_up: CatchUp | None) -> None:
        self.catch_up = catch_up
        self._catching_up: set[tuple[str, int, str]] = set()

    async def place(self, topic: str, partition: int, group: str, position: str, *,
                    seek: bool) -> bool:
        """With an archive, the group placed at ``position`` (``CatchUp.place``: on its catch-up
        stream or on the log) and where noted; False without an archive."""
        if self.catch_up is None:
            return False
        placed = await self.catch_up.place(topic, partition, group, _full_id(position),
                                           seek=seek)
        self._note_place(topic, partition, group, placed)
        return True

    def _note_place(self, topic: str, partition: int, group: str, placed: int) -> None:
        if placed == 1:
            self._catching_up.add((topic, partition, group))
        elif placed == 0:
            self.forget(topic, partition, group)

    def forget(self, topic: str, partition: int, group: str) -> None:
        """The group is on its log (or gone): the log is tried first."""
        self._catching_up.discard((topic, partition, group))

    def keys(self, topic: str, partition: int, group: str) -> tuple[str, ...]:
        """The keys that may hold the group, the likelier first: the log, and with an archive the
        group's catch-up stream."""
        log = log_key(topic, partition)
        if self.catch_up is None:
            return (log,)
        behind = catch_up_key(topic, partition, group)
        return (behind, log) if (topic, partition, group) in self._catching_up else (log, behind)

    async def on_group(self, topic: str, partition: int, group: str,
                       run: Callable[[str], Awaitable[T]], missing: T) -> T:
        """``run`` on the key that holds the group (``run`` raises ``MissingGroup`` on a key
        without it); ``missing`` when none does. Each key is noted as the group's before ``run``
        goes on it, so a run that moves the group (a read ending its catch-up) has the last
        word."""
        for key in self.keys(topic, partition, group):
            if key == log_key(topic, partition):
                self.forget(topic, partition, group)
            else:
                self._catching_up.add((topic, partition, group))
            try:
                return await run(key)
            except MissingGroup:
                continue
        return missing


def _full_id(position: str) -> str:
    """A group position as the scripts compare it: ``0`` is ``0-0``; ``$`` stays."""
    return "0-0" if position == "0" else position
