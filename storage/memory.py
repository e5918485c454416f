"""What each Redis node holds against its ``maxmemory`` (polled with INFO memory) and the publish
watermark: an append is refused whole, before anything is written, while a node it would write to
is past the watermark."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from storage.cluster import ClusterRouter
from storage.errors import StorageFull
from storage.keys import slot_of
from storage.wire.connection import NodeAddress
from storage.wire.lanes import NodeLanes

log = logging.getLogger(__name__)

# Retry-After of a refused append: the archive or retention needs a moment to make room.
FULL_RETRY_AFTER_S = 5.0


@dataclass(slots=True)
class NodeMemory:
    """One node's memory at the last poll, plus what this process appended to it since."""

    role: str  # "primary" or "replica"
    used_bytes: int
    max_bytes: int  # the node's maxmemory; 0 when unset
    written_bytes: int = 0

    @property
    def estimated_bytes(self) -> int:
        """Used memory now, as far as this process can tell between two polls."""
        return self.used_bytes + self.written_bytes

    def fill(self) -> float | None:
        """Estimated used / max, or None when the node has no maxmemory."""
        return self.estimated_bytes / self.max_bytes if self.max_bytes else None


class MemoryWatch:
    """Polls every node's INFO memory every ``interval_s`` (0: never) and refuses appends to a node
    whose estimated fill reached ``watermark``; an async context manager owning the poll task.

    The nodes come from CLUSTER NODES (a replica in a full resync is missing from the slot map),
    named as the slot map names them (hostname where the cluster announces one)."""

    def __init__(self, router: ClusterRouter, lanes: NodeLanes, watermark: float,
                 interval_s: float) -> None:
        self._router = router
        self._lanes = lanes
        self.watermark = watermark
        self.interval_s = interval_s
        self._nodes: dict[NodeAddress, NodeMemory] = {}
        self._over: set[NodeAddress] = set()  # the nodes past the watermark: appends refused
        self._task: asyncio.Task[None] | None = None

    @property
    def over(self) -> bool:
        """True while some node is past the watermark (appends to it are refused)."""
        return bool(self._over)

    @property
    def nodes(self) -> Mapping[NodeAddress, NodeMemory]:
        """Every node's memory at the last poll (nodes that did not answer are left out)."""
        return self._nodes

    async def __aenter__(self) -> MemoryWatch:
        if self.interval_s > 0 and self._task is None:
            self._task = asyncio.ensure_future(self._poll_forever())
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Stop polling; idempotent."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _poll_forever(self) -> None:
        while True:
            try:
                await self.poll()
            except Exception:  # a node away is left out until it answers again
                log.debug("memory poll failed", exc_info=True)
            await asyncio.sleep(self.interval_s)

    async def poll(self) -> None:
        """One round: the nodes from CLUSTER NODES, then INFO memory of each."""
        nodes = await self._cluster_nodes()
        replies = await asyncio.gather(*(self._ask(addr, ("INFO", "memory")) for addr in nodes),
                                       return_exceptions=True)
        polled: dict[NodeAddress, NodeMemory] = {}
        for (addr, role), reply in zip(nodes.items(), replies, strict=True):
            if isinstance(reply, BaseException):
                log.debug("INFO memory of %s:%s failed: %r", *addr, reply)
                continue
            fields = info_fields(reply)
            polled[addr] = NodeMemory(role, int(fields.get("used_memory", 0)),
                                      int(fields.get("maxmemory", 0)))
        self._nodes = polled
        self._over = {addr for addr, memory in polled.items() if self._past(memory)}

    async def _cluster_nodes(self) -> dict[NodeAddress, str]:
        primaries = self._router.primaries()
        for addr in primaries:
            try:
                return cluster_nodes(await self._ask(addr, ("CLUSTER", "NODES")))
            except Exception:  # the next primary may answer
                log.debug("CLUSTER NODES of %s:%s failed", *addr, exc_info=True)
        return dict.fromkeys(primaries, "primary")

    async def _ask(self, addr: NodeAddress, command: tuple[str, ...]) -> Any:
        async with asyncio.timeout(max(self.interval_s, 1.0)):
            (reply,) = await self._lanes.execute(addr, [command], exclusive=False)
        if isinstance(reply, BaseException):
            raise reply
        return reply

    def _past(self, memory: NodeMemory) -> bool:
        fill = memory.fill()
        return fill is not None and fill >= self.watermark

    def note_written(self, addr: NodeAddress, nbytes: int) -> None:
        """``nbytes`` went to ``addr``: counted until the next poll, so that a burst between two
        polls meets the watermark before it meets Redis's own refusal."""
        memory = self._nodes.get(addr)
        if memory is not None:
            memory.written_bytes += nbytes
            if memory.max_bytes and self._past(memory):
                self._over.add(addr)

    def check_room(self, topic: str, partitions: Iterable[int],
                   node_for_slot: Callable[[int], NodeAddress]) -> None:
        """Raise StorageFull when a primary that one of ``partitions`` lives on is past the
        watermark (``node_for_slot``: the router's slot -> address). Callers test ``over``
        first: the common case costs one attribute test per append."""
        for partition in set(partitions):
            addr = node_for_slot(slot_of(topic, partition))
            if addr in self._over:
                memory = self._nodes[addr]
                raise StorageFull(
                    f"{topic}/{partition}: Redis node {addr[0]}:{addr[1]} holds "
                    f"{memory.estimated_bytes} of {memory.max_bytes} bytes, past the publish "
                    f"watermark ({self.watermark:.0%})",
                    retry_after_s=FULL_RETRY_AFTER_S, node=f"{addr[0]}:{addr[1]}",
                    reason="watermark")


def cluster_nodes(reply: bytes | str) -> dict[NodeAddress, str]:
    """The reachable nodes of a CLUSTER NODES reply and their roles (``primary``, ``replica``),
    each named by its announced hostname where it has one, else its address."""
    text = reply.decode() if isinstance(reply, bytes) else reply
    nodes: dict[NodeAddress, str] = {}
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 3 or {"fail", "noaddr", "handshake"} & set(fields[2].split(",")):
            continue
        address, _, bus = fields[1].partition("@")
        host, _, port = address.rpartition(":")
        hostname = bus.partition(",")[2]
        role = "primary" if "master" in fields[2].split(",") else "replica"
        nodes[(hostname or host, int(port))] = role
    return nodes


def info_fields(reply: bytes | str) -> dict[str, str]:
    """``name:value`` lines of an INFO reply."""
    text = reply.decode() if isinstance(reply, bytes) else reply
    return dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
