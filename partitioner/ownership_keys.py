"""How node registration and partition ownership are laid out in etcd, and the read-only view of
who owns each partition."""

from __future__ import annotations

from partitioner.etcd.connection import EtcdConnection
from partitioner.etcd.values import DEFAULT_PREFIX

__all__ = ["OwnershipKeys", "Partition", "partition_owners"]

Partition = tuple[str, int]


class OwnershipKeys:
    """The etcd keys of the node registry and the partition owners under one prefix.

    - ``nodes/<node_id>``: leased by the node; ``{node_id, started_at_ms}``. The live node set.
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


async def partition_owners(conn: EtcdConnection, *,
                           prefix: str = DEFAULT_PREFIX) -> dict[Partition, str]:
    """Who holds each partition's owner key right now (for admin and metrics); read-only."""
    keys = OwnershipKeys(prefix)
    snapshot = await conn.get_prefix(keys.owners)
    owners: dict[Partition, str] = {}
    for stored in snapshot.values:
        parsed = keys.parse_owner(stored.key)
        if parsed is not None:
            owners[parsed] = stored.value.decode(errors="replace")
    return owners
