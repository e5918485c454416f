"""Garbage-collector settings for a serving process (they cut publish CPU and tail latency).

A publish batch keeps hundreds of container objects alive at once (the parsed body, validated
messages, records, results), so with Python's default young-generation threshold (700) the cyclic
collector ran about once per request and traversed all of them, costing a noticeable share of the
gateway's CPU on large batches and the worst p99 spikes (bench/profile_publish.py shows the
difference). Almost everything is freed by reference counting anyway; the cyclic collector only
matters for cycles.

So: after startup the long-lived objects (modules, the app, its services) are frozen out of the
collector's view (``gc.freeze``), the young-generation threshold is raised, and the young
generations are collected once a second as well, so the cycles an idle process made (a connection's
setup leaves some) do not linger until thousands more allocations happen.
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncIterator, Callable

from aiohttp import web

from partitioner.tasks import cancel_until_done

YOUNG_COLLECT_EVERY_S = 1.0


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


async def collect_young_forever(every_s: float = YOUNG_COLLECT_EVERY_S) -> None:
    """Collect the two young generations every ``every_s`` (cheap: the startup heap is frozen)."""
    while True:
        await asyncio.sleep(every_s)
        gc.collect(1)


def tuned_collector(
    young_threshold: int, every_s: float = YOUNG_COLLECT_EVERY_S
) -> Callable[[web.Application], AsyncIterator[None]]:
    """A ``cleanup_ctx`` entry: tune once the backends are open (append it after the app's own),
    collect the young generations every ``every_s`` while serving. ``young_threshold`` 0 changes
    nothing."""

    async def tuned(_app: web.Application) -> AsyncIterator[None]:
        if young_threshold <= 0:
            yield
            return
        tune_collector(young_threshold)
        collector = asyncio.create_task(collect_young_forever(every_s), name="young-gc")
        try:
            yield
        finally:
            await cancel_until_done([collector])

    return tuned
