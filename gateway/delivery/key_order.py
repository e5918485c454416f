"""Key-ordered sharing: a partition's sessions share its keys, one message of a key in flight at a
time, so no key is ever processed concurrently or out of order.

A key goes to the session its rendezvous hash picks among the attached ones, and stays with the
session holding its in-flight message until that message is acked (so sessions joining or leaving
move only keys with nothing in flight). The key's later messages wait, in order, until then. A key
whose in-flight message failed (a nack, an ack timeout) is *parked*: it waits for that message's
redelivery, and nothing else of the partition waits for it. Keyless messages go to any session.
"""

from __future__ import annotations

import hashlib
import time
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from gateway.delivery.session import Session
from storage.codec import offset_key
from storage.models import Delivery

MAX_PICKS = 100_000  # keys whose hash choice is remembered


@dataclass
class KeyOrder:
    """The per-key state of one reader of a key-ordered group."""

    flight: dict[str, bytes] = field(default_factory=dict)  # in-flight offset -> its key
    in_flight: dict[bytes, str] = field(default_factory=dict)  # key -> its in-flight offset
    owner: dict[bytes, Session] = field(default_factory=dict)  # key -> the session holding it
    held: dict[bytes, deque[Delivery]] = field(default_factory=dict)  # waiting, in order
    parked: dict[bytes, float] = field(default_factory=dict)  # key -> since when (monotonic)
    # a key's later entries held elsewhere when the reader started, in order, behind its in-flight
    # one: each goes out in its turn, before anything the reader read itself
    fenced: dict[bytes, deque[str]] = field(default_factory=dict)
    fence_of: dict[str, bytes] = field(default_factory=dict)  # fenced offset -> its key
    held_total: int = 0  # messages in ``held``
    _picked: dict[bytes, Session | None] = field(default_factory=dict)  # the hash's choices

    def sessions_changed(self) -> None:
        """Sessions came or went: the hash chooses again (keys in flight stay where they are)."""
        self._picked.clear()

    def route(self, deliveries: Iterable[Delivery], sessions: Sequence[Session],
              credit: dict[Session, int]) -> tuple[dict[Session, list[Delivery]], list[Delivery]]:
        """Pages per session for ``deliveries`` in order, within ``credit`` (spent here), and the
        deliveries that must wait for credit, in order; a message of a key already in flight is
        held until that one is acked."""
        pages: dict[Session, list[Delivery]] = {}
        waiting: list[Delivery] = []
        keyless = [s for s in sessions if credit.get(s, 0) > 0]
        for delivery in deliveries:
            key, offset = delivery.entry.key, delivery.entry.offset
            if key is None:
                target = max(keyless, key=credit.__getitem__) if keyless else None
            else:
                flying = self.in_flight.get(key)
                if flying is not None and flying != offset:
                    self._hold(key, delivery)
                    continue
                target = self.owner.get(key)
                if target is None or target not in credit:
                    target = self._picked.get(key)
                    if target is None:
                        if len(self._picked) >= MAX_PICKS:
                            self._picked.clear()
                        target = self._picked[key] = pick(key, sessions)
            if target is None or credit.get(target, 0) <= 0:
                waiting.append(delivery)
                continue
            credit[target] -= 1
            pages.setdefault(target, []).append(delivery)
            if key is not None:
                self.in_flight[key], self.flight[offset], self.owner[key] = offset, key, target
        return pages, waiting

    def held_elsewhere(self, key: bytes, offset: str) -> None:
        """``offset`` of ``key`` is in the hands of a member this reader does not serve: the key's
        messages wait for it as for one in flight here (``key_fence``). Given in offset order: a
        key's later ones queue behind its first, each in its turn."""
        if key in self.in_flight:
            self.fenced.setdefault(key, deque()).append(offset)
            self.fence_of[offset] = key
            return
        self.in_flight[key], self.flight[offset] = offset, key

    def _hold(self, key: bytes, delivery: Delivery) -> None:
        """Keep a key's message until its turn, in offset order (a reclaim may bring an earlier one
        after a later read); one copy of each."""
        waiting = self.held.setdefault(key, deque())
        at = offset_key(delivery.entry.offset)
        if not waiting or offset_key(waiting[-1].entry.offset) < at:
            waiting.append(delivery)
            self.held_total += 1
            return
        for index, queued in enumerate(waiting):
            queued_at = offset_key(queued.entry.offset)
            if queued_at == at:
                waiting[index] = delivery  # claimed again: the latest delivery count
                return
            if queued_at > at:
                waiting.insert(index, delivery)
                self.held_total += 1
                return

    def untaken(self, deliveries: Iterable[Delivery]) -> None:
        """Deliveries routed but not taken by their session: no longer in flight."""
        for delivery in deliveries:
            key = self.flight.pop(delivery.entry.offset, None)
            if key is not None:
                del self.in_flight[key]
                self.owner.pop(key, None)

    def settled(self, offsets: Iterable[str]) -> tuple[list[Delivery], list[bytes]]:
        """In-flight messages acked (or dead-lettered, expired): their keys are free again. The
        next held message of each, to be delivered first, and the keys that were parked."""
        released: list[Delivery] = []
        unparked: list[bytes] = []
        for offset in offsets:
            key = self.flight.pop(offset, None)
            if key is None:
                self._unfence(offset)
                continue
            del self.in_flight[key]
            if self.parked.pop(key, None) is not None:
                unparked.append(key)
            # nothing of the key is in flight now: its next message may go to any session the
            # hash picks (a session that joined gets its share at once)
            self.owner.pop(key, None)
            turn = self._next_fenced(key)
            if turn is not None:  # held elsewhere, next in line: it goes when it comes back
                self.in_flight[key], self.flight[turn] = turn, key
                here = self._take_held(key, turn)
                if here is not None:
                    released.append(here)
                continue
            waiting = self.held.get(key)
            if waiting:
                released.append(waiting.popleft())
                self.held_total -= 1
                if not waiting:
                    del self.held[key]
        return released, unparked

    def _next_fenced(self, key: bytes) -> str | None:
        queue = self.fenced.get(key)
        if not queue:
            return None
        turn = queue.popleft()
        del self.fence_of[turn]
        if not queue:
            del self.fenced[key]
        return turn

    def _unfence(self, offset: str) -> None:
        """A fenced entry not in flight yet was settled elsewhere: it no longer comes."""
        key = self.fence_of.pop(offset, None)
        if key is not None:
            queue = self.fenced[key]
            queue.remove(offset)
            if not queue:
                del self.fenced[key]

    def _take_held(self, key: bytes, offset: str) -> Delivery | None:
        """The held message at ``offset`` (come back here before its turn), out of the queue."""
        waiting = self.held.get(key)
        for index, delivery in enumerate(waiting or ()):
            if delivery.entry.offset == offset:
                assert waiting is not None
                del waiting[index]
                self.held_total -= 1
                if not waiting:
                    del self.held[key]
                return delivery
        return None

    def failed(self, offsets: Iterable[str]) -> list[tuple[bytes, str]]:
        """In-flight messages nacked or timed out: their keys park until they are acked. The keys
        parked just now, with their message's offset."""
        now = time.monotonic()
        newly: list[tuple[bytes, str]] = []
        for offset in offsets:
            key = self.flight.get(offset)
            if key is not None and key not in self.parked:
                self.parked[key] = now
                newly.append((key, offset))
        return newly

    def forget_session(self, session: Session) -> None:
        """A session left: its keys go to whoever gets their redelivered message."""
        for key in [k for k, s in self.owner.items() if s is session]:
            del self.owner[key]
        self.sessions_changed()

    def held_offsets(self) -> list[str]:
        """Every held message's offset (read for the group, not yet handed out)."""
        return [d.entry.offset for waiting in self.held.values() for d in waiting]



def pick(key: bytes, sessions: Sequence[Session]) -> Session | None:
    """The session with the highest rendezvous weight for ``key`` (stable as others come and
    go)."""
    if len(sessions) == 1:  # the only choice: no hash to compute (a push member, one seat)
        return sessions[0]
    best, best_weight = None, b""
    for session in sessions:
        weight = hashlib.blake2b(key, key=session.id.encode()[:64], digest_size=8).digest()
        if weight > best_weight:
            best, best_weight = session, weight
    return best
