"""Handing freed heap back to the OS after a large release: glibc keeps freed pages mapped
otherwise, so the RSS a client that never read once pinned would stay with the process after it
left.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
from collections.abc import Callable

TRIM_DELAY_S = 1.0  # releases within this coalesce into one trim: a trim walks the whole heap


def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, or None on a libc without it (musl, macOS): nothing to do there."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None
    trim: Callable[[int], int] | None = getattr(libc, "malloc_trim", None)
    return trim


_TRIM = _malloc_trim()
# the loop a trim is scheduled on (a loop per process)
_pending_on: asyncio.AbstractEventLoop | None = None


def trim_soon() -> None:
    """Give the heap's free pages back to the OS in a moment (once for a burst of calls)."""
    global _pending_on
    loop = asyncio.get_running_loop()
    if _TRIM is None or _pending_on is loop:
        return
    _pending_on = loop
    loop.call_later(TRIM_DELAY_S, _trim)


def _trim() -> None:
    global _pending_on
    _pending_on = None
    if _TRIM is not None:
        _TRIM(0)
