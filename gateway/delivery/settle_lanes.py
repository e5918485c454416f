"""A group subscription's settle frames split by partition: each partition's parts settle in
arrival order, partitions side by side, so a backend stalled for one partition holds up no other."""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Awaitable, Callable

from gateway.delivery.session import MessageRef
from gateway.delivery.settle_frames import SettleFrame
from storage.errors import StorageError

# what one partition's part of a frame asks: action, refs, delay_ms, reason
SettlePart = tuple[str, list[MessageRef], int, str]
Settle = Callable[[int, SettlePart], Awaitable[object]]


class SettleLanes:
    """Parts waiting per partition, each drained by a task that exists only while parts wait.

    ``settle`` applies one part; a StorageError goes to ``failed`` (the part's deliveries stay
    held, so the client may send it again) and the lane goes on; anything else goes to
    ``crashed`` and the lane stops. ``pause`` / ``resume`` are called as the number of waiting
    parts passes ``limit`` and falls back under half of it (TCP then pushes back on the client)."""

    __slots__ = ("_crashed", "_failed", "_lanes", "_limit", "_pause", "_resume", "_settle",
                 "_tasks", "_waiting")

    def __init__(self, settle: Settle, failed: Callable[[int, str, StorageError], None],
                 crashed: Callable[[BaseException], None], limit: int,
                 pause: Callable[[], None], resume: Callable[[], None]) -> None:
        self._settle, self._failed, self._crashed = settle, failed, crashed
        self._limit, self._pause, self._resume = limit, pause, resume
        self._lanes: dict[int, collections.deque[SettlePart]] = {}
        self._tasks: dict[int, asyncio.Task[None]] = {}
        self._waiting = 0

    def add(self, frame: SettleFrame) -> None:
        """Queue a frame's parts, one per partition it names (in the frame's order)."""
        action, refs, delay_ms, reason = frame
        by_partition: dict[int, list[MessageRef]] = {}
        for ref in refs:
            by_partition.setdefault(ref[0], []).append(ref)
        for partition, part in by_partition.items():
            self._lanes.setdefault(partition, collections.deque()).append(
                (action, part, delay_ms, reason))
            self._waiting += 1
            if partition not in self._tasks:
                self._tasks[partition] = asyncio.create_task(self._drain(partition),
                                                             name=f"settle-{partition}")
        if self._waiting >= self._limit:
            self._pause()

    async def finished(self, timeout_s: float) -> None:
        """Let the queued parts settle within ``timeout_s``, then cancel what is left."""
        tasks = list(self._tasks.values())
        if not tasks:
            return
        await asyncio.wait(tasks, timeout=timeout_s)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _drain(self, partition: int) -> None:
        lane = self._lanes[partition]
        try:
            while lane:
                part = lane.popleft()
                self._waiting -= 1
                if self._waiting == self._limit // 2:
                    self._resume()
                try:
                    await self._settle(partition, part)
                except StorageError as exc:
                    self._failed(partition, part[0], exc)
        except Exception as exc:
            self._crashed(exc)
        finally:
            del self._tasks[partition]
            if not lane:
                del self._lanes[partition]
