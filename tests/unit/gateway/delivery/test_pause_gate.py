"""A gateway's view of paused groups: members told of each change once (and on joining a paused
group), held readers let go on a resume, a wake, or the pause's deadline."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from gateway.delivery.pause_gate import PauseGate
from gateway.delivery.session import Session
from partitioner.cache import TopicCache
from partitioner.group_pause import GroupPause, PauseListener, now_ms
from partitioner.topics import TopicMetadata


class Pauses:
    """Pauses kept in memory; a change is reported the way the etcd watch reports it."""

    def __init__(self) -> None:
        self.kept: dict[tuple[str, str], GroupPause] = {}
        self.listeners: list[PauseListener] = []

    def of(self, topic: str, group: str) -> GroupPause | None:
        return self.kept.get((topic, group))

    def listen(self, listener: PauseListener) -> None:
        self.listeners.append(listener)

    async def pause(self, topic: str, group: str, until_ms: int | None,
                    topic_created_at_ms: int = 0) -> GroupPause:
        pause = self.kept[(topic, group)] = GroupPause(now_ms(), until_ms, topic_created_at_ms)
        self._report((topic, group))
        return pause

    async def resume(self, topic: str, group: str) -> bool:
        found = self.kept.pop((topic, group), None) is not None
        self._report((topic, group))
        return found

    def _report(self, key: tuple[str, str] | None) -> None:
        for listener in self.listeners:
            listener(key)


class Member:
    def __init__(self, topic: str = "t") -> None:
        self.topic = topic
        self.frames: list[dict[str, Any]] = []

    def send_control(self, frame: dict[str, Any]) -> None:
        self.frames.append(frame)

    @property
    def said(self) -> list[str]:
        return [frame["type"] for frame in self.frames]


def joined(gate: PauseGate, member: Member, group: str = "g") -> Member:
    gate.join(cast(Session, member), group)
    return member


async def test_members_are_told_of_a_pause_and_a_resume_once_each() -> None:
    pauses = Pauses()
    gate = PauseGate(pauses)
    member, other_group = joined(gate, Member()), joined(gate, Member(), "h")
    await gate.pause("t", "g", None)
    pauses._report(None)  # a reloaded mirror reports everything again
    await gate.resume("t", "g")
    assert member.frames == [{"type": "paused", "topic": "t", "group": "g", "until_ms": None},
                             {"type": "resumed", "topic": "t", "group": "g"}]
    assert other_group.frames == []


async def test_member_joining_a_paused_group_is_told_at_once() -> None:
    gate = PauseGate(Pauses())
    await gate.pause("t", "g", now_ms() + 60_000)
    member = joined(gate, Member())
    assert member.said == ["paused"]
    assert member.frames[0]["until_ms"] is not None


async def test_member_that_left_is_told_nothing_more() -> None:
    gate = PauseGate(Pauses())
    member = joined(gate, Member())
    gate.leave(cast(Session, member), "g")
    await gate.pause("t", "g", None)
    assert member.frames == []


async def test_held_reader_goes_on_when_the_group_resumes() -> None:
    gate = PauseGate(Pauses())
    await gate.pause("t", "g", None)
    held = asyncio.ensure_future(gate.hold("t", "g", asyncio.Event()))
    await asyncio.sleep(0)
    assert not held.done()
    await gate.resume("t", "g")
    await asyncio.wait_for(held, 5)
    assert not gate.paused("t", "g")


async def test_held_reader_is_let_go_by_its_wake_while_still_paused() -> None:
    gate = PauseGate(Pauses())
    await gate.pause("t", "g", None)
    wake = asyncio.Event()
    held = asyncio.ensure_future(gate.hold("t", "g", wake))
    wake.set()
    await asyncio.wait_for(held, 5)
    assert gate.paused("t", "g")


async def test_pause_ends_by_itself_at_its_deadline_and_members_are_told() -> None:
    gate = PauseGate(Pauses())
    member = joined(gate, Member())
    await gate.pause("t", "g", now_ms() + 50)
    await asyncio.wait_for(gate.hold("t", "g", asyncio.Event()), 5)
    assert not gate.paused("t", "g")
    assert member.said == ["paused", "resumed"]


async def test_gate_without_a_place_to_keep_pauses_never_pauses() -> None:
    gate = PauseGate()
    assert not gate.writable
    assert gate.pause_of("t", "g") is None


async def test_pause_left_by_a_deleted_topic_does_not_hold_for_a_new_one() -> None:
    topics = TopicCache()
    topics.remember(TopicMetadata("t", 1, 60_000, None, 2000, "owner"))
    gate = PauseGate(Pauses(), topics)
    await gate.pause("t", "g", None, topic_created_at_ms=1000)
    assert not gate.paused("t", "g")
    await gate.pause("t", "g", None, topic_created_at_ms=2000)
    assert gate.paused("t", "g")
