"""The archive duty of an owned partition: when its oldest entries pass ``hot_retention_ms``, move
them into segments up to what every consumer group has delivered and settled; when its Redis node
passes the archive watermark, move them whatever the groups read (those behind read the archive)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from gateway.observe.metrics import GatewayMetrics
from partitioner.topics import TopicMetadata
from storage.archive.tier import ArchiveTier
from storage.codec import offset_key
from storage.keys import slot_of
from storage.memory import MemoryWatch
from storage.wire.connection import NodeAddress

# segments one partition moves per turn at most: a turn's work stays bounded; under memory pressure
# one, so that the node settles just under the watermark instead of emptying in bursts
SEGMENTS_PER_TURN, SEGMENTS_PER_PRESSED_TURN = 4, 1


@dataclass(frozen=True, slots=True)
class ArchivePolicy:
    """When a partition's oldest entries leave Redis: its node's memory past ``memory_watermark``
    of maxmemory, or entries older than ``hot_retention_ms`` (0: by memory only)."""

    memory_watermark: float = 0.6
    hot_retention_ms: int = 3_600_000


def archive_end(consumed: str | None, pressed: bool, age_cut_ms: int | None) -> str | None:
    """The XRANGE end of what may move now (``(`` exclusive), or None for nothing: everything when
    memory is pressed (groups behind it move to catch-up streams), else what the groups consumed
    and is older than ``age_cut_ms``."""
    if pressed:
        return "+"
    if age_cut_ms is None:
        return None
    return tighter(consumed or "+", f"({age_cut_ms}-0")


def tighter(a: str, b: str) -> str:
    """The nearer of two XRANGE ends (``+``, ``<offset>`` or ``(<offset>``)."""
    if a == "+" or b == "+":
        return b if a == "+" else a
    a_key, b_key = offset_key(a.lstrip("(")), offset_key(b.lstrip("("))
    if a_key != b_key:
        return a if a_key < b_key else b
    return a if a.startswith("(") else b


class ArchiveDuty:
    """Moves owned partitions' oldest entries into the archive tier, turn by turn."""

    def __init__(self, tier: ArchiveTier, memory: MemoryWatch,
                 node_for_slot: Callable[[int], NodeAddress], policy: ArchivePolicy,
                 metrics: GatewayMetrics) -> None:
        self._tier, self._memory, self._node_for_slot = tier, memory, node_for_slot
        self._policy, self._metrics = policy, metrics

    async def start(self, topic: str, partition: int, epoch: int) -> None:
        """On taking a partition: remove the files a move cut short left behind."""
        await self._tier.remove_orphans(topic, partition, epoch=epoch)

    async def turn(self, metadata: TopicMetadata, partition: int, epoch: int) -> int:
        """Move up to SEGMENTS_PER_TURN segments of what may leave Redis now (its node pressed:
        SEGMENTS_PER_PRESSED_TURN); how many moved.
        Compacted topics stay hot whole (compaction and snapshots work on the stream); a key's
        index keeps the offsets of its archived entries."""
        if metadata.compact:
            return 0
        topic = metadata.name
        pressed = self._pressed(topic, partition)
        end = archive_end(None if pressed else await self._tier.consumed(topic, partition),
                          pressed, self._age_cut_ms())
        moved, most = 0, SEGMENTS_PER_PRESSED_TURN if pressed else SEGMENTS_PER_TURN
        while end is not None and moved < most:
            info = await self._tier.move_oldest(topic, partition, epoch=epoch, until=end,
                                                pass_behind=pressed)
            if info is None:
                break
            moved += 1
            self._metrics.archive_segments.labels(topic).inc()
            self._metrics.archive_entries.labels(topic).inc(info.count)
            self._metrics.archive_bytes.labels(topic).inc(info.bytes)
        return moved

    def _pressed(self, topic: str, partition: int) -> bool:
        node = self._memory.nodes.get(self._node_for_slot(slot_of(topic, partition)))
        fill = None if node is None else node.fill()
        return fill is not None and fill >= self._policy.memory_watermark

    def _age_cut_ms(self) -> int | None:
        retention = self._policy.hot_retention_ms
        return int(time.time() * 1000) - retention if retention > 0 else None
