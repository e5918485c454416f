"""How much memory each Redis node of the local stack may use: sizes as Redis writes them
(``512mb``, ``2gb``) and the default share of the machine's memory."""

from __future__ import annotations

import os
import re

_UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1024, "m": 1000**2, "mb": 1024**2, "g": 1000**3,
          "gb": 1024**3}
# one node's cap may not be so small that the cluster's own bookkeeping fills it
MIN_NODE_MAXMEMORY = 8 * 1024**2
# the share of the machine's memory the whole local cluster may hold (the rest: the gateway, the
# AOF rewrite's copy-on-write, the replicas' buffers, everything else)
MACHINE_SHARE = 0.5


def parse_size(text: str) -> int:
    """Bytes from a size the way redis.conf writes it (``1gb`` = 1024**3, ``1g`` = 1000**3)."""
    match = re.fullmatch(r"\s*(\d+)\s*([a-zA-Z]*)\s*", text)
    unit = match.group(2).lower() if match else ""
    if match is None or unit not in _UNITS:
        raise ValueError(f"{text!r} is not a size (e.g. 512mb, 2gb)")
    size = int(match.group(1)) * _UNITS[unit]
    if size < MIN_NODE_MAXMEMORY:
        raise ValueError(f"{text!r} is below the smallest cap a node can work with (8mb)")
    return size


def default_node_maxmemory(nodes: int) -> int:
    """Each node's share of half the machine's physical memory."""
    physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return max(MIN_NODE_MAXMEMORY, int(physical * MACHINE_SHARE) // max(1, nodes))


def format_size(size: int) -> str:
    """A size in the largest binary unit that keeps one decimal meaningful (``1.5 GiB``)."""
    for unit, scale in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} B"
