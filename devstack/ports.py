"""Free loopback ports for local servers, picked below the kernel's ephemeral range.

Each pytest-xdist worker picks from its own slice, so neither another worker nor an outgoing
connection can take a port between the moment it is handed out and the moment its server binds it.
"""

from __future__ import annotations

import os
import random
import socket
import threading

LOOPBACK = "127.0.0.1"
# Below Linux's default ephemeral range (32768-60999), above the ports system services listen on.
PICK_FIRST = 10000
PICK_END = 32768

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


def worker_slice() -> range:
    """This process's slice of the pick range: all of it, or one xdist worker's share."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    index = int(worker) if worker.isdigit() else 0
    width = (PICK_END - PICK_FIRST) // max(workers, 1)
    first = PICK_FIRST + (index % max(workers, 1)) * width
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
