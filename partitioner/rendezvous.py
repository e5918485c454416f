"""Which live node owns a partition's duties: rendezvous (highest-random-weight) hashing.

Every node scores every (topic, partition) with a stable hash of
``node + "\\0" + topic + "\\0" + partition`` (BLAKE2b, 8-byte digest, big-endian); the highest score
wins (ties, practically impossible, go to the larger node id). Every gateway that sees the same node
set computes the same owner without talking to the others, partitions spread evenly, and adding or
removing one of N nodes moves only the ~1/N of partitions that the node wins or held. Python's
``hash()`` is salted per process and must never be used here.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence

__all__ = ["desired_partitions", "rendezvous_owner", "rendezvous_weight"]


def rendezvous_weight(node: str, topic: str, partition: int) -> int:
    """The score of ``node`` for (topic, partition): a stable 64-bit integer."""
    material = f"{node}\0{topic}\0{partition}".encode()
    return int.from_bytes(hashlib.blake2b(material, digest_size=8).digest(), "big")


def rendezvous_owner(nodes: Sequence[str], topic: str, partition: int) -> str | None:
    """The node with the highest weight for (topic, partition), or None when there are no nodes."""
    if not nodes:
        return None
    return max(nodes, key=lambda node: (rendezvous_weight(node, topic, partition), node))


def desired_partitions(nodes: Iterable[str], partitions: Mapping[str, int],
                       node: str) -> frozenset[tuple[str, int]]:
    """Every (topic, partition) of ``partitions`` ({topic: count}) that ``node`` wins among
    ``nodes``.

    ``node`` always takes part, whether or not ``nodes`` lists it.
    """
    candidates = sorted(set(nodes) | {node})
    return frozenset((topic, p) for topic, count in partitions.items() for p in range(count)
                     if rendezvous_owner(candidates, topic, p) == node)
