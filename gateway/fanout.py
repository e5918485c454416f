"""Bounded fan-out: many per-partition calls of one request, only a few in flight at a time, so that
one listing of a huge topic cannot take every Redis connection from the other requests."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from typing import TypeVar

T = TypeVar("T")
U = TypeVar("U")

PER_REQUEST_CONCURRENCY = 8


async def gather_bounded(call: Callable[[T], Awaitable[U]], items: Iterable[T],
                         limit: int = PER_REQUEST_CONCURRENCY) -> list[U]:
    """``call(item)`` for every item, at most ``limit`` awaiting at once; results in the order of
    ``items``."""
    if limit < 1:
        raise ValueError("limit must be at least 1")
    slots = asyncio.Semaphore(limit)

    async def one(item: T) -> U:
        async with slots:
            return await call(item)

    return list(await asyncio.gather(*(one(item) for item in items)))
