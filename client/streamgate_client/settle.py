"""A subscription's settles (ack, nack, extend, reject) for one connection, batched into few
frames."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import aiohttp
import orjson

if TYPE_CHECKING:
    from streamgate_client.received import Message

log = logging.getLogger(__name__)

MAX_REFS_PER_FRAME = 10_000


class Settler:
    """Collects ack/nack/extend for one connection and sends them as few frames a few milliseconds
    later, or at once when they settle half the credit (``flush_at``): the gateway sends more only
    as acks come back."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse, linger_s: float,
                 flush_at: int) -> None:
        self._ws = ws
        self._linger_s = linger_s
        self._flush_at = max(1, flush_at)
        self._pending: dict[tuple[str, int], list[dict[str, Any]]] = {}
        self._count = 0
        self._flusher: asyncio.Task[None] | None = None  # while it waits out the linger
        self._sending: set[asyncio.Future[None]] = set()  # flushes that half the credit started

    def add(self, action: str, partition: int, offset: str, delay_ms: int = 0) -> None:
        if self._ws.closed:
            # the gateway redelivers what this connection held; a late ack would be ignored anyway
            return
        self._pending.setdefault((action, delay_ms), []).append({"partition": partition,
                                                                 "offset": offset})
        self._count += 1
        self._schedule()

    def add_many(self, action: str, messages: Sequence[Message]) -> None:
        """``add`` for each of ``messages`` delivered on this connection."""
        if self._ws.closed:
            return
        refs = [{"partition": m.partition, "offset": m.offset} for m in messages
                if m._settler is self]
        self._pending.setdefault((action, 0), []).extend(refs)
        self._count += len(refs)
        self._schedule()

    def _schedule(self) -> None:
        if self._count >= self._flush_at:
            if self._flusher is not None:
                self._flusher.cancel()
            self._flusher = None
            sending = asyncio.ensure_future(self.flush())
            self._sending.add(sending)
            sending.add_done_callback(self._sending.discard)
        elif self._flusher is None:
            self._flusher = asyncio.ensure_future(self._flush_later())

    async def _flush_later(self) -> None:
        await asyncio.sleep(self._linger_s)
        self._flusher = None
        await self.flush()

    async def flush(self) -> None:
        """Send every pending settle now."""
        pending, self._pending = self._pending, {}
        self._count = 0
        for (action, delay_ms), refs in pending.items():
            for start in range(0, len(refs), MAX_REFS_PER_FRAME):
                frame: dict[str, Any] = {"type": action,
                                         "messages": refs[start:start + MAX_REFS_PER_FRAME]}
                if action == "nack":
                    frame["delay_ms"] = delay_ms
                try:
                    await self._ws.send_str(orjson.dumps(frame).decode())
                except (ConnectionError, RuntimeError, aiohttp.ClientError) as exc:
                    log.info("could not send %s for %d messages (they will be redelivered): %s",
                             action, len(refs), exc)
                    return

    async def send_now(self, action: str, partition: int, offset: str,
                       extra: dict[str, Any]) -> None:
        """One settle frame of its own, at once (rare ones, such as a reject with its reason)."""
        if self._ws.closed:
            return
        frame = {"type": action, "messages": [{"partition": partition, "offset": offset}],
                 **extra}
        await self._ws.send_str(orjson.dumps(frame).decode())

    async def aclose(self) -> None:
        """Send what is pending and stop the timer; idempotent."""
        flusher, self._flusher = self._flusher, None
        if flusher is not None:
            flusher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await flusher
        if self._sending:
            await asyncio.gather(*self._sending)
        await self.flush()
