"""A group reader's settle writes: the acks of one event-loop tick go out as one XACK, idle times
(nack, extend, release) are set, and bookkeeping writes nothing waits for are kept alive."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Coroutine, Sequence
from operator import itemgetter
from typing import Any

from gateway.delivery.group_config import ReaderScope
from gateway.delivery.session import MessageRef
from storage.errors import StorageError
from storage.groups_protocol import GroupStore

log = logging.getLogger(__name__)

_OFFSET_OF_REF = itemgetter(1)


class Settler:
    """Acks from every session of a reader that arrive in the same tick go out as one XACK of all
    their offsets; each caller still waits for (and sees the failure of) the XACK that carried
    them."""

    __slots__ = ("_acks_done", "_acks_due", "_scope", "_store", "_writes")

    def __init__(self, store: GroupStore, scope: ReaderScope) -> None:
        self._store = store
        self._scope = scope
        self._acks_due: list[str] = []
        self._acks_done: asyncio.Future[None] | None = None
        self._writes: set[asyncio.Future[int]] = set()  # strong references while a write runs

    async def ack(self, refs: Sequence[MessageRef]) -> None:
        """Acknowledge deliveries, batched with this tick's other acks."""
        self._acks_due.extend(map(_OFFSET_OF_REF, refs))
        done = self._acks_done
        if done is None:
            done = self._acks_done = asyncio.get_running_loop().create_future()
            asyncio.get_running_loop().call_soon(self._flush_acks)
        await asyncio.shield(done)

    def _flush_acks(self) -> None:
        offsets, self._acks_due = self._acks_due, []
        done, self._acks_done = self._acks_done, None
        if done is not None:
            scope = self._scope
            task = asyncio.ensure_future(self._store.ack(scope.topic, scope.partition,
                                                         scope.group, offsets))
            self.keep(task)
            task.add_done_callback(lambda t: _settle_future(done, t))

    def ack_now(self, offsets: Sequence[str]) -> Awaitable[int]:
        """Acknowledge entries the reader settles itself (filtered out, expired, auto-acked,
        dead-lettered), in one XACK of their own."""
        scope = self._scope
        return self._store.ack(scope.topic, scope.partition, scope.group, offsets)

    async def set_idle(self, offsets: Sequence[str], idle_ms: int) -> None:
        """Set the idle time of pending entries (0 restarts their ack timeout)."""
        if offsets:
            scope = self._scope
            await self._store.set_idle(scope.topic, scope.partition, scope.group, scope.consumer,
                                       offsets, idle_ms)

    def keep(self, task: asyncio.Future[int]) -> None:
        """Hold a strong reference to a write running beside the loop until it is done."""
        self._writes.add(task)
        task.add_done_callback(self._writes.discard)

    def beside_the_loop(self, write: Coroutine[Any, Any, None]) -> None:
        """A best-effort bookkeeping write that nothing waits for (parked keys' visibility)."""
        self.keep(asyncio.ensure_future(_logged(write, self._scope)))


async def _logged(write: Coroutine[Any, Any, None], scope: ReaderScope) -> int:
    try:
        await write
    except StorageError as exc:
        log.warning("parked keys of %s/%s for group %s not recorded: %s", scope.topic,
                    scope.partition, scope.group, exc)
    return 0


def _settle_future(done: asyncio.Future[None], task: asyncio.Future[int]) -> None:
    """Hand the outcome of a batched XACK to everyone waiting for it."""
    if done.done():
        return
    if task.cancelled():
        done.set_exception(StorageError("ack cancelled"))
    elif task.exception() is not None:
        done.set_exception(task.exception() or StorageError("ack failed"))
        # retrieved here: a waiter that was cancelled meanwhile must not leave a warning
        done.exception()
    else:
        done.set_result(None)
