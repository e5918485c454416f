"""The scale hint: how many members a group wants so its backlog drains within a target time,
from the owners' per-partition flows (arrival and ack rates, smoothed over the lag rounds) summed
across partitions; pure but for ``ScaleMemo``, which keeps what a gateway saw between reads."""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

SMOOTHING = 0.5  # weight of the newest round in a rate's moving average
CAPACITY_TTL_MS = 600_000  # how long a per-member ack rate seen under backlog stays believed
MAX_MEMOS = 10_000
PULLER_WINDOW_MS = 60_000  # a puller busy with its last batch still counts for this long
MAX_PULLERS = 10_000  # callers remembered per group


@dataclass(frozen=True, slots=True)
class Flow:
    """A group's flow on one partition as of ``at_ms``: entries ever appended (``added``) and
    settled (``acked``: delivered and no longer pending), its backlog (unread and pending) and
    the moving averages of the arrival and ack rates in entries/s (None: not two rounds yet)."""

    at_ms: int
    added: int
    acked: int
    backlog: int
    arrival_rate: float | None = None
    ack_rate: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """The JSON form posted beside the partition's verdict."""
        return {"at_ms": self.at_ms, "added": self.added, "acked": self.acked,
                "backlog": self.backlog, "arrival_rate": self.arrival_rate,
                "ack_rate": self.ack_rate}

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> Flow:
        """A flow from its JSON form."""
        return cls(int(doc["at_ms"]), int(doc["added"]), int(doc["acked"]), int(doc["backlog"]),
                   _float_or_none(doc.get("arrival_rate")), _float_or_none(doc.get("ack_rate")))


def _float_or_none(value: Any) -> float | None:
    return None if value is None else float(value)


def observe(previous: Flow | None, at_ms: int, entries_read: int | None, lag: int | None,
            pending: int) -> Flow | None:
    """The flow as of a lag round from Redis's counters of the group (``entries_read`` and
    ``lag`` of XINFO GROUPS; None where Redis cannot tell). Counters that went back (a seek, a
    group made again) start the rates over."""
    if entries_read is None or lag is None:
        return None
    flow = Flow(at_ms, entries_read + lag, entries_read - pending, lag + pending)
    if previous is None or at_ms <= previous.at_ms or flow.added < previous.added \
            or flow.acked < previous.acked:
        return flow
    elapsed_s = (at_ms - previous.at_ms) / 1000
    arrival = _smooth(previous.arrival_rate, (flow.added - previous.added) / elapsed_s)
    acks = _smooth(previous.ack_rate, (flow.acked - previous.acked) / elapsed_s)
    return Flow(flow.at_ms, flow.added, flow.acked, flow.backlog, arrival, acks)


def _smooth(average: float | None, rate: float) -> float:
    return rate if average is None else SMOOTHING * rate + (1 - SMOOTHING) * average


@dataclass(frozen=True, slots=True)
class GroupFlow:
    """A group's flow summed over the partitions that have one: rates add, backlogs add."""

    arrival_rate: float
    ack_rate: float
    backlog: int
    partitions: int


def total(flows: Iterable[Flow | None]) -> GroupFlow | None:
    """The group's flow across partitions; None until some partition has rates."""
    rated = [f for f in flows if f is not None and f.arrival_rate is not None
             and f.ack_rate is not None]
    if not rated:
        return None
    return GroupFlow(sum(f.arrival_rate or 0.0 for f in rated),
                     sum(f.ack_rate or 0.0 for f in rated),
                     sum(f.backlog for f in rated), len(rated))


@dataclass(frozen=True, slots=True)
class Bounds:
    """The range a hint stays in (``most`` None: unbounded)."""

    least: int = 0
    most: int | None = None

    def clamp(self, count: int) -> int:
        """``count`` brought into the range."""
        high = count if self.most is None else min(count, self.most)
        return max(self.least, high)


def per_member(flow: GroupFlow, members: int) -> float | None:
    """The ack rate each member manages (None without members)."""
    return flow.ack_rate / members if members > 0 else None


def desired(flow: GroupFlow, members: int, capacity: float | None, target_drain_s: float,
            bounds: Bounds) -> int:
    """The members needed to take the arrivals and drain the backlog within ``target_drain_s``,
    each acking ``capacity`` entries/s: ceil((backlog / target + arrival) / capacity). Without a
    capacity: one member when work waits and none is there, else the members there are."""
    need = flow.backlog / target_drain_s + flow.arrival_rate
    if capacity is None or capacity <= 0:
        fallback = members if members > 0 else (1 if need > 0 else 0)
        return bounds.clamp(fallback)
    return bounds.clamp(math.ceil(need / capacity - 1e-9))


@dataclass(frozen=True, slots=True)
class Hint:
    """The scale hint of a group on a topic (the body of ``GET /v1/groups/{group}/scale``)."""

    desired_members: int
    current_members: int
    arrival_rate: float | None
    ack_rate_per_member: float | None
    lag: int | None
    target_drain_s: float

    def to_dict(self) -> dict[str, Any]:
        """The JSON form."""
        return {"desired_members": self.desired_members,
                "current_members": self.current_members,
                "arrival_rate": self.arrival_rate,
                "ack_rate_per_member": self.ack_rate_per_member,
                "lag": self.lag, "target_drain_s": self.target_drain_s}


@dataclass
class _Memo:
    capacity: float | None = None
    capacity_at_ms: int = 0
    hints: list[tuple[int, int]] | None = None  # (at_ms, raw hint) within the window


class ScaleMemo:
    """What a gateway remembers of a group between reads: the per-member ack rate last seen
    while a backlog kept the members busy (the rate an idle group cannot show), and the recent
    hints, so a lower hint is given only once every hint of the window was lower (up at once,
    down after a quiet window)."""

    def __init__(self, capacity_ttl_ms: int = CAPACITY_TTL_MS) -> None:
        self.capacity_ttl_ms = capacity_ttl_ms
        self._memos: OrderedDict[tuple[str, str], _Memo] = OrderedDict()

    def capacity(self, key: tuple[str, str], flow: GroupFlow, members: int,
                 now_ms: int) -> float | None:
        """Each member's ack rate: the one measured now while a backlog waits (members are busy),
        else the last such measurement within the TTL, else what members manage now."""
        memo, rate = self._memo(key), per_member(flow, members)
        if flow.backlog > 0 and rate is not None and rate > 0:
            memo.capacity, memo.capacity_at_ms = rate, now_ms
            return rate
        if memo.capacity is not None and now_ms - memo.capacity_at_ms <= self.capacity_ttl_ms:
            return max(memo.capacity, rate or 0.0)
        return rate

    def settle(self, key: tuple[str, str], hint: int, now_ms: int, window_ms: int) -> int:
        """The hint to give: the highest of the hints of the last ``window_ms``, ``hint``
        included."""
        memo = self._memo(key)
        recent = [(at, h) for at, h in memo.hints or [] if now_ms - at < window_ms]
        memo.hints = [*recent, (now_ms, hint)]
        return max(h for _, h in memo.hints)

    def _memo(self, key: tuple[str, str]) -> _Memo:
        memo = self._memos.pop(key, None) or _Memo()
        self._memos[key] = memo
        while len(self._memos) > MAX_MEMOS:
            self._memos.popitem(last=False)
        return memo


class PullerRoster:
    """The distinct HTTP pull callers of each group this gateway saw lately. A puller holds one
    call at a time, so the callers seen within a window are the group's pull members; the oldest
    groups and callers are forgotten past the bounds."""

    def __init__(self, window_ms: int = PULLER_WINDOW_MS, max_callers: int = MAX_PULLERS) -> None:
        self.window_ms = window_ms
        self.max_callers = max_callers
        self._groups: OrderedDict[tuple[str, str], OrderedDict[str, int]] = OrderedDict()

    def saw(self, key: tuple[str, str], caller: str, now_ms: int) -> None:
        """Record a pull by ``caller`` for the group ``key`` (topic, group)."""
        callers = self._groups.pop(key, None) or OrderedDict()
        callers.pop(caller, None)
        callers[caller] = now_ms
        while len(callers) > self.max_callers:
            callers.popitem(last=False)
        self._groups[key] = callers
        while len(self._groups) > MAX_MEMOS:
            self._groups.popitem(last=False)

    def count(self, key: tuple[str, str], now_ms: int) -> int:
        """The callers that pulled for ``key`` within the window."""
        callers = self._groups.get(key)
        if callers is None:
            return 0
        while callers and now_ms - next(iter(callers.values())) >= self.window_ms:
            callers.popitem(last=False)
        return len(callers)
