"""Whether a group is paused on this gateway: its readers hold before each turn, its pulls answer
nothing new, and its members are told (a ``paused`` frame, a ``resumed`` frame) as the watch on
the pauses (``partitioner.group_pause``) reports a change or a pause's deadline passes."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Protocol

from gateway.delivery.growth_gate import Topics
from gateway.delivery.session import Session
from partitioner.group_pause import GroupPause, PauseListener, now_ms

GroupKey = tuple[str, str]  # (topic, group)
# a little after a deadline: the resume is never seen a moment early
DEADLINE_SLACK_S = 0.01


class PauseSource(Protocol):
    """Where pauses are kept (partitioner.group_pause.GroupPauses)."""

    def of(self, topic: str, group: str) -> GroupPause | None: ...

    def listen(self, listener: PauseListener) -> None: ...

    async def pause(self, topic: str, group: str, until_ms: int | None,
                    topic_created_at_ms: int = 0) -> GroupPause: ...

    async def resume(self, topic: str, group: str) -> bool: ...


def paused_frame(topic: str, group: str, pause: GroupPause) -> dict[str, Any]:
    """The ``paused`` frame: no delivery of the group until resumed or ``until_ms`` (null: until
    resumed); what a member holds it may still settle."""
    return {"type": "paused", "topic": topic, "group": group, "until_ms": pause.until_ms}


def resumed_frame(topic: str, group: str) -> dict[str, Any]:
    """The ``resumed`` frame: deliveries go on from where they stopped."""
    return {"type": "resumed", "topic": topic, "group": group}


def pause_fields(pause: GroupPause | None) -> dict[str, Any]:
    """How a pause shows in a group's description and a pull's answer."""
    return {"paused": pause is not None, "until_ms": None if pause is None else pause.until_ms}


class PauseGate:
    """This gateway's view of paused groups and the local members to tell."""

    def __init__(self, source: PauseSource | None = None, topics: Topics | None = None,
                 clock_ms: Callable[[], int] = now_ms) -> None:
        self._source, self._topics, self._clock_ms = source, topics, clock_ms
        self._members: dict[GroupKey, set[Session]] = {}
        self._told: dict[GroupKey, GroupPause] = {}  # the pause the members were told of
        self._changes: dict[GroupKey, asyncio.Future[None]] = {}
        self._timers: dict[GroupKey, asyncio.TimerHandle] = {}
        if source is not None:
            source.listen(self._changed)

    @property
    def writable(self) -> bool:
        """Pauses can be set and cleared here (there is a place to keep them)."""
        return self._source is not None

    async def pause(self, topic: str, group: str, until_ms: int | None,
                    topic_created_at_ms: int = 0) -> GroupPause:
        """Pause the group on every gateway (each sees it through its watch)."""
        assert self._source is not None
        return await self._source.pause(topic, group, until_ms, topic_created_at_ms)

    async def resume(self, topic: str, group: str) -> None:
        """Resume the group on every gateway."""
        assert self._source is not None
        await self._source.resume(topic, group)

    def pause_of(self, topic: str, group: str) -> GroupPause | None:
        """The group's pause if it holds now; None: deliver."""
        pause = None if self._source is None else self._source.of(topic, group)
        if pause is None or not pause.active(self._clock_ms()):
            return None
        metadata = None if self._topics is None else self._topics.get(topic)
        if metadata is not None and pause.topic_created_at_ms not in (0, metadata.created_at_ms):
            return None  # left by a deleted topic of the same name
        return pause

    def paused(self, topic: str, group: str) -> bool:
        """Whether the group is paused now."""
        return self.pause_of(topic, group) is not None

    async def hold(self, topic: str, group: str, wake: asyncio.Event) -> None:
        """Return once the group is not paused, or when ``wake`` is set (the caller looks again:
        it may be stopping)."""
        if self.pause_of(topic, group) is None:
            return
        key = (topic, group)
        change = self._changes.get(key)
        if change is None or change.done():
            change = self._changes[key] = asyncio.get_running_loop().create_future()
        self._arm_deadline(key)
        woken: asyncio.Future[Any] = asyncio.ensure_future(wake.wait())
        try:
            await asyncio.wait([change, woken], return_when=asyncio.FIRST_COMPLETED)
        finally:
            woken.cancel()

    # --- members ----------------------------------------------------------------------------------
    def join(self, session: Session, group: str) -> None:
        """Tell ``session`` of changes to its group's pause from now on (of a pause at once)."""
        key = (session.topic, group)
        self._members.setdefault(key, set()).add(session)
        pause = self.pause_of(*key)
        if pause is not None:
            self._told[key] = pause
            self._arm_deadline(key)
            session.send_control(paused_frame(session.topic, group, pause))

    def leave(self, session: Session, group: str) -> None:
        """Stop telling ``session``."""
        key = (session.topic, group)
        members = self._members.get(key)
        if members is not None:
            members.discard(session)
            if not members:
                del self._members[key]
                self._told.pop(key, None)

    # --- changes ----------------------------------------------------------------------------------
    def _changed(self, key: GroupKey | None) -> None:
        keys = set(self._members) | set(self._changes) if key is None else {key}
        for each in keys:
            self._settle(each)

    def _settle(self, key: GroupKey) -> None:
        """Wake the group's held readers and tell its members what changed."""
        change = self._changes.pop(key, None)
        if change is not None and not change.done():
            change.set_result(None)
        pause = self.pause_of(*key)
        self._arm_deadline(key)
        told = self._told.get(key)
        if pause == told or key not in self._members:
            return
        if pause is None:
            del self._told[key]
            frame = resumed_frame(*key)
        else:
            self._told[key] = pause
            frame = paused_frame(*key, pause)
        for session in self._members[key]:
            session.send_control(frame)

    def _arm_deadline(self, key: GroupKey) -> None:
        """Look again when the group's pause ends by itself."""
        timer = self._timers.pop(key, None)
        if timer is not None:
            timer.cancel()
        pause = self.pause_of(*key)
        if pause is None or pause.until_ms is None:
            return
        delay_s = max(0.0, (pause.until_ms - self._clock_ms()) / 1000) + DEADLINE_SLACK_S
        self._timers[key] = asyncio.get_running_loop().call_later(delay_s, self._settle, key)
