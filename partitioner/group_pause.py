"""Paused consumer groups in etcd (``<prefix>grouppauses/<topic>/<group>``, beside the groups'
policies), mirrored by a watch so every gateway sees a pause or a resume within a moment and a
pause outlives the gateway that set it."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import orjson

from partitioner.etcd.connection import EtcdConnection
from partitioner.etcd.values import DEFAULT_PREFIX, WatchEvent
from partitioner.prefix_mirror import PrefixMirror
from partitioner.tasks import cancel_until_done

__all__ = ["GroupPause", "GroupPauses", "PauseListener"]

log = logging.getLogger(__name__)

# (topic, group) whose pause changed; None: any may have (the mirror was reloaded)
PauseListener = Callable[[tuple[str, str] | None], None]


def now_ms() -> int:
    """Wall-clock epoch milliseconds (a pause's deadline is a wall-clock time)."""
    return int(time.time() * 1000)


@dataclass(frozen=True, slots=True)
class GroupPause:
    """A group's pause: since when, until when (None: until resumed), and of which topic (its
    creation time: a pause left by a deleted topic does not hold for a new one of that name)."""

    paused_at_ms: int
    until_ms: int | None = None
    topic_created_at_ms: int = 0

    def active(self, at_ms: int) -> bool:
        """Whether the pause still holds at ``at_ms``."""
        return self.until_ms is None or at_ms < self.until_ms

    def encode(self) -> bytes:
        """The stored JSON document."""
        return orjson.dumps({"paused_at_ms": self.paused_at_ms, "until_ms": self.until_ms,
                             "topic_created_at_ms": self.topic_created_at_ms})

    @classmethod
    def decode(cls, raw: bytes) -> GroupPause | None:
        """The pause in a stored document; None when it is not one (logged, never fatal)."""
        try:
            doc = orjson.loads(raw)
            until = doc.get("until_ms")
            return cls(int(doc["paused_at_ms"]), None if until is None else int(until),
                       int(doc.get("topic_created_at_ms", 0)))
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError):
            log.warning("ignoring a malformed group pause: %r", raw[:200])
            return None


class GroupPauses:
    """Sets, clears and mirrors group pauses (async context manager: loads, then follows)."""

    def __init__(self, conn: EtcdConnection, prefix: str = DEFAULT_PREFIX) -> None:
        self._conn = conn
        self._root = f"{prefix.rstrip('/')}/grouppauses/".encode()
        self._mirror = PrefixMirror(conn, self._root, self._changed)
        self._listeners: list[PauseListener] = []
        self._pauses: dict[tuple[str, str], GroupPause] = {}  # decoded once, as they change
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> GroupPauses:
        await self._mirror.load()
        self._task = asyncio.create_task(self._mirror.follow(), name="group-pause-watch")
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        task, self._task = self._task, None
        if task is not None:
            await cancel_until_done([task])

    def key(self, topic: str, group: str) -> bytes:
        """The key of one group's pause."""
        return self._root + f"{topic}/{group}".encode()

    def listen(self, listener: PauseListener) -> None:
        """Call ``listener`` on every change seen through the watch."""
        self._listeners.append(listener)

    def of(self, topic: str, group: str) -> GroupPause | None:
        """The group's pause as last seen (also one whose deadline passed); None: not paused."""
        return self._pauses.get((topic, group)) if self._pauses else None

    async def pause(self, topic: str, group: str, until_ms: int | None,
                    topic_created_at_ms: int = 0) -> GroupPause:
        """Pause the group (again: the deadline is replaced); CoordinationUnavailable when etcd
        does not answer."""
        pause = GroupPause(now_ms(), until_ms, topic_created_at_ms)
        await self._conn.put(self.key(topic, group), pause.encode())
        return pause

    async def resume(self, topic: str, group: str) -> bool:
        """Clear the group's pause; whether there was one."""
        return await self._conn.delete(self.key(topic, group)) is not None

    async def forget_topic(self, topic: str) -> None:
        """Clear every pause of a deleted topic."""
        await self._conn.delete_prefix(self._root + f"{topic}/".encode())

    def _changed(self, event: WatchEvent | None) -> None:
        changed = None if event is None else self._group_of(event.key)
        if changed is None:
            self._pauses = {key: pause for stored in self._mirror.values.values()
                            if (pause := GroupPause.decode(stored.value)) is not None
                            and (key := self._group_of(stored.key)) is not None}
        elif event is not None and event.kind != "delete" \
                and (pause := GroupPause.decode(event.value)) is not None:
            self._pauses[changed] = pause
        else:
            self._pauses.pop(changed, None)
        for listener in self._listeners:
            listener(changed)

    def _group_of(self, key: bytes) -> tuple[str, str] | None:
        topic, _, group = key[len(self._root):].decode(errors="replace").partition("/")
        return (topic, group) if group else None
