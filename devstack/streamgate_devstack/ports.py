"""Free loopback ports for local servers, picked outside the kernel's ephemeral range.

Each pytest-xdist worker picks from its own slice, so neither another worker nor an outgoing
connection can take a port between the moment it is handed out and the moment its server binds it.
"""

from __future__ import annotations

import os
import random
import socket
import threading
from pathlib import Path

LOOPBACK = "127.0.0.1"
# Above the ports system services listen on; below the kernel's ephemeral range (or above it when
# that leaves more room).
PICK_FIRST = 10000
PICK_LAST = 65535
EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
MIN_PICK_RANGE = 1000

# Well-known ports of system services and of `streamgate dev`; picking never returns them.
RESERVED_PORTS = frozenset({2379, 2380, 6379, 8080, *range(7000, 7011), *range(17000, 17011)})

_lock = threading.Lock()
_handed_out: set[int] = set()
_cursor: list[int] = []


def free_ports(count: int) -> list[int]:
    """`count` distinct ports free right now, none handed out before by this process."""
    return [_take(1) for _ in range(count)]


def free_port() -> int:
    """One port free right now, never handed out before by this process."""
    return _take(1)


def free_port_block(count: int) -> int:
    """The first of `count` consecutive ports that are all free right now."""
    return _take(count)


def pick_range() -> range:
    """The ports outside the kernel's ephemeral range to pick from: the larger side of it."""
    try:
        low, high = map(int, EPHEMERAL_RANGE.read_text().split())
    except (OSError, ValueError):
        low, high = 32768, 60999  # Linux's default
    below = range(PICK_FIRST, max(PICK_FIRST, low))
    above = range(max(PICK_FIRST, high + 1), PICK_LAST + 1)
    wider = max(below, above, key=len)
    # an ephemeral range that leaves no room: pick anywhere, the bind test still applies
    return wider if len(wider) >= MIN_PICK_RANGE else range(PICK_FIRST, PICK_LAST + 1)


def worker_slice() -> range:
    """This process's slice of the pick range: all of it, or one xdist worker's share."""
    workers = max(int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1), 1)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    index = int(worker) if worker.isdigit() else 0
    ports = pick_range()
    width = len(ports) // workers
    first = ports.start + (index % workers) * width
    return range(first, first + width)


def _take(count: int) -> int:
    ports = worker_slice()
    with _lock:
        if not _cursor:
            # A random start keeps child processes in the same slice off the parent's recent picks.
            _cursor.append(random.randrange(len(ports)))
        for _ in range(len(ports)):
            first = ports[_cursor[0] % len(ports)]
            _cursor[0] += 1
            block = range(first, first + count)
            if block[-1] in ports and all(_pickable(port) for port in block):
                _handed_out.update(block)
                return first
    raise OSError(f"no {count} free consecutive loopback ports in {ports.start}-{ports.stop - 1}")


def _pickable(port: int) -> bool:
    if port in RESERVED_PORTS or port in _handed_out:
        return False
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((LOOPBACK, port))
        except OSError:
            return False
    return True
