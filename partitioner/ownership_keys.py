"""How node registration and partition ownership are laid out in etcd, and the read-only view of
who owns each partition."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import orjson

from partitioner.etcd.connection import EtcdConnection
from partitioner.etcd.values import DEFAULT_PREFIX, StoredValue

__all__ = ["ClusterView", "NodeRecord", "OwnershipKeys", "Partition", "cluster_view",
           "partition_owners"]

Partition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class NodeRecord:
    """A registered gateway node as its leased key describes it (fields it did not write are
    None)."""

    node_id: str
    started_at_ms: int | None = None
    address: str | None = None

    def value(self) -> bytes:
        """The registry value announcing this node (a field it lacks is left out)."""
        fields = {"node_id": self.node_id, "started_at_ms": self.started_at_ms,
                  "address": self.address}
        return orjson.dumps({name: value for name, value in fields.items() if value is not None})


@dataclass(frozen=True, slots=True)
class ClusterView:
    """The live nodes, sorted by id, and the holder of each owner key."""

    nodes: tuple[NodeRecord, ...]
    owners: dict[Partition, str]


class OwnershipKeys:
    """The etcd keys of the node registry and the partition owners under one prefix.

    - ``nodes/<node_id>``: leased by the node; ``{node_id, started_at_ms, address}`` (the URL
      clients reach it at, when it announces one). The live node set.
    - ``owners/<topic>/<partition>``: leased by the owner; the owner's node id. Created only in a
      transaction guarded on ``create_revision == 0``, so at most one node holds it; its
      create_revision is the owner's ``epoch`` (a fencing token: it grows with every change of
      owner).
    """

    def __init__(self, prefix: str = DEFAULT_PREFIX) -> None:
        root = prefix.rstrip("/") + "/"
        self.nodes = f"{root}nodes/".encode()
        self.owners = f"{root}owners/".encode()

    def node(self, node_id: str) -> bytes:
        """The leased key announcing ``node_id``."""
        return self.nodes + node_id.encode()

    def owner(self, partition: Partition) -> bytes:
        """The leased key naming the owner of (topic, partition)."""
        return self.owners + f"{partition[0]}/{partition[1]}".encode()

    def parse_owner(self, key: bytes) -> Partition | None:
        """(topic, partition) of an owner key, or None when ``key`` is not one."""
        if not key.startswith(self.owners):
            return None
        topic, _, number = key[len(self.owners):].decode(errors="replace").rpartition("/")
        return (topic, int(number)) if topic and (number.isascii() and number.isdigit()) else None

    def parse_node(self, stored: StoredValue) -> NodeRecord:
        """The node a registry key announces; a value it cannot read still names the node."""
        node_id = stored.key[len(self.nodes):].decode(errors="replace")
        try:
            info = orjson.loads(stored.value)
        except orjson.JSONDecodeError:
            info = None
        if not isinstance(info, dict):
            return NodeRecord(node_id)
        started, address = info.get("started_at_ms"), info.get("address")
        return NodeRecord(node_id, started if isinstance(started, int) else None,
                          address if isinstance(address, str) else None)

    def view(self, nodes: Iterable[StoredValue], owners: Iterable[StoredValue]) -> ClusterView:
        """The cluster as the node registry and owner keys given describe it."""
        records = sorted((self.parse_node(stored) for stored in nodes), key=lambda n: n.node_id)
        held: dict[Partition, str] = {}
        for stored in owners:
            parsed = self.parse_owner(stored.key)
            if parsed is not None:
                held[parsed] = stored.value.decode(errors="replace")
        return ClusterView(tuple(records), held)


async def partition_owners(conn: EtcdConnection, *,
                           prefix: str = DEFAULT_PREFIX) -> dict[Partition, str]:
    """Who holds each partition's owner key right now (for admin and metrics); read-only."""
    keys = OwnershipKeys(prefix)
    return keys.view((), (await conn.get_prefix(keys.owners)).values).owners


async def cluster_view(conn: EtcdConnection, *, prefix: str = DEFAULT_PREFIX) -> ClusterView:
    """The live nodes and the partition owners read from etcd now (two prefix reads); read-only."""
    keys = OwnershipKeys(prefix)
    nodes = await conn.get_prefix(keys.nodes)
    return keys.view(nodes.values, (await conn.get_prefix(keys.owners)).values)
