"""Publishes under way per topic, so a gateway can tell when none placed by an old partition count
is left (a growth waits for that before it cuts the partitions)."""

from __future__ import annotations

import asyncio


class InFlight:
    """A count per topic of publishes that were placed and are not written yet."""

    __slots__ = ("_counts", "_drained")

    def __init__(self) -> None:
        self._counts: dict[str, int] = {}
        self._drained: dict[str, asyncio.Event] = {}

    def begin(self, topic: str) -> None:
        """A publish to ``topic`` starts (before it reads the topic's partition count)."""
        self._counts[topic] = self._counts.get(topic, 0) + 1

    def end(self, topic: str, count: int = 1) -> None:
        """``count`` publishes to ``topic`` were written, failed or refused."""
        left = self._counts.get(topic, 0) - count
        if left > 0:
            self._counts[topic] = left
            return
        self._counts.pop(topic, None)
        drained = self._drained.pop(topic, None)
        if drained is not None:
            drained.set()

    def count(self, topic: str) -> int:
        """Publishes to ``topic`` under way now."""
        return self._counts.get(topic, 0)

    async def drained(self, topic: str) -> None:
        """Return once no publish to ``topic`` is under way."""
        while self._counts.get(topic):
            await self._drained.setdefault(topic, asyncio.Event()).wait()
