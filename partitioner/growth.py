"""The gateways' word that they paused publishing to a growing topic, in etcd.

Key ``<prefix>growth/<topic>/<node_id>`` holds the version of the growing topic's metadata the node
paused for; the node set is the ownership registry's leased ``nodes/`` keys, so a node that is gone
(its lease expired) is not waited for.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from partitioner.etcd.connection import EtcdConnection
from partitioner.etcd.values import DEFAULT_PREFIX
from partitioner.ownership_keys import OwnershipKeys


class GrowthAcks:
    """Pause acknowledgements: written by every gateway, read and cleared by the one growing a
    topic."""

    def __init__(self, conn: EtcdConnection, prefix: str = DEFAULT_PREFIX) -> None:
        self._conn = conn
        self._root = prefix.rstrip("/") + "/growth/"
        self._nodes = OwnershipKeys(prefix).nodes

    def _topic_prefix(self, topic: str) -> bytes:
        return f"{self._root}{topic}/".encode()

    async def acknowledge(self, topic: str, node_id: str, version: int) -> None:
        """Say that ``node_id`` publishes nothing to ``topic`` while version ``version`` of its
        metadata (a growth) holds."""
        await self._conn.put(self._topic_prefix(topic) + node_id.encode(), str(version).encode())

    async def waiting_for(self, topic: str, version: int) -> list[str]:
        """The live nodes that have not acknowledged ``version`` yet, sorted."""
        nodes = await self._conn.get_prefix(self._nodes)
        acks = await self._conn.get_prefix(self._topic_prefix(topic))
        acked = {kv.key.rsplit(b"/", 1)[-1] for kv in acks.values
                 if kv.value == str(version).encode()}
        return sorted(kv.key[len(self._nodes):].decode() for kv in nodes.values
                      if kv.key[len(self._nodes):] not in acked)

    async def clear(self, topic: str) -> None:
        """Forget a growth's acknowledgements (it finished or was abandoned)."""
        await self._conn.delete_prefix(self._topic_prefix(topic))

    async def is_live(self, node_id: str) -> bool:
        """Whether ``node_id``'s leased node key exists (gone: it died, or lost its lease)."""
        return await self._conn.get(self._nodes + node_id.encode()) is not None


class PauseAcks(Protocol):
    """Where pause acknowledgements live (etcd in production)."""

    async def acknowledge(self, topic: str, node_id: str, version: int) -> None: ...

    async def waiting_for(self, topic: str, version: int) -> list[str]: ...

    async def clear(self, topic: str) -> None: ...

    async def is_live(self, node_id: str) -> bool: ...


class InMemoryGrowthAcks:
    """``PauseAcks`` in a dict for unit tests and single-process tools: ``nodes`` are the live
    nodes."""

    def __init__(self, nodes: Iterable[str] = ()) -> None:
        self.nodes = set(nodes)
        self._acks: dict[tuple[str, str], int] = {}

    async def acknowledge(self, topic: str, node_id: str, version: int) -> None:
        """Record that ``node_id`` paused for ``version`` of ``topic``."""
        self._acks[(topic, node_id)] = version

    async def waiting_for(self, topic: str, version: int) -> list[str]:
        """Live nodes not yet paused for ``version``."""
        return sorted(n for n in self.nodes if self._acks.get((topic, n)) != version)

    async def clear(self, topic: str) -> None:
        """Forget ``topic``'s acknowledgements."""
        self._acks = {k: v for k, v in self._acks.items() if k[0] != topic}

    async def is_live(self, node_id: str) -> bool:
        """Whether ``node_id`` is among the live nodes."""
        return node_id in self.nodes
