"""Garbage-collector settings for a serving process (issue 8: publish CPU and tail latency).

A publish batch keeps hundreds of container objects alive at once (the parsed body, validated messages,
records, results), so with Python's default young-generation threshold (700) the cyclic collector ran about once
per request and traversed all of them, costing ~10% of the gateway's CPU at batch 100 and the worst p99 spikes
(bench/profile_publish.py: 11.7-14.0 -> 10.3-10.6 us per message, p99 55-74 -> 34-38 ms). Almost everything is
freed by reference counting anyway; the cyclic collector only matters for cycles.

After startup the long-lived objects (modules, the app, its services) are frozen out of the collector's view
(``gc.freeze``), so the rarer full collections do not scan them either.
"""

from __future__ import annotations

import gc
from collections.abc import Awaitable, Callable

from aiohttp import web

PYTHON_DEFAULT_YOUNG_THRESHOLD = 700


def tune_collector(young_threshold: int) -> None:
    """Collect, freeze what survived (startup state) and raise the young-generation threshold.

    ``young_threshold`` 0 leaves Python's defaults alone (and freezes nothing).
    """
    if young_threshold <= 0:
        return
    _, middle, old = gc.get_threshold()
    gc.collect()
    gc.freeze()
    gc.set_threshold(young_threshold, middle, old)


def tune_collector_on_startup(young_threshold: int) -> Callable[[web.Application], Awaitable[None]]:
    """An ``on_startup`` hook: tune once the backends are open (append it after the app's own startup)."""

    async def tune(_app: web.Application) -> None:
        tune_collector(young_threshold)

    return tune
