"""Stopping background tasks that talk to etcd."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable


async def cancel_until_done(tasks: Iterable[asyncio.Task[None]]) -> None:
    """Cancel and await every task but the caller's own.

    Cancelling is repeated: a cancel that lands inside a gRPC call can surface as an RPC error,
    which a retry loop would otherwise survive.
    """
    current = asyncio.current_task()
    pending = {task for task in tasks if task is not current and not task.done()}
    while pending:
        for task in pending:
            task.cancel()
        _, pending = await asyncio.wait(pending, timeout=0.1)
