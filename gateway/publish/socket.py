"""A publish-only WebSocket once upgraded and authenticated: client frames to its publish channel
(or, an ``auth`` frame, to its credential), its token's expiry and the gateway's shutdown as close
frames, one cleanup."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import orjson
from prometheus_client import Gauge

from gateway.delivery.reauth import AUTH, SocketCredential
from gateway.delivery.websocket import CLOSE_TIMEOUT_S, LeanWebSocket, closed_within
from gateway.delivery.wire import error_frame
from gateway.errors import WS_CLOSE_GOING_AWAY
from gateway.publish.channel import PublishChannel
from gateway.publish.frames import PUBLISH, BadFrame, publish_frame_of


def publish_frame_or_error(channel: PublishChannel, text: str, doc: Any) -> None:
    """Hand a parsed client frame of type ``publish`` to ``channel``, or answer why it cannot be
    answered by id."""
    try:
        frame = publish_frame_of(doc, len(text))
    except BadFrame as exc:
        channel.send_soon(orjson.dumps(error_frame("bad-frame", str(exc))))
        return
    channel.take(frame)


class PublishSocket:
    """The socket's events: every text frame must be a ``publish`` frame, or an ``auth`` frame
    with a fresh token."""

    __slots__ = ("_cleanup", "_connections", "_credential", "_release", "_subscriptions", "channel",
                 "socket")

    def __init__(self, socket: LeanWebSocket, channel: PublishChannel,
                 release: Callable[[], None], credential: SocketCredential,
                 subscriptions: set[Any], connections: Gauge) -> None:
        """Takes over the principal's connection slot: ``release`` gives it back at the end;
        counted in ``connections`` (the WebSocket gauge) as mode ``publish``; ``credential``
        closes the socket when its token expires."""
        self.socket, self.channel, self._release = socket, channel, release
        self._subscriptions = subscriptions
        self._connections = connections.labels(PUBLISH)
        self._connections.inc()
        self._cleanup: asyncio.Task[None] | None = None
        self._credential = credential
        subscriptions.add(self)

    def on_text(self, text: str) -> None:
        try:
            doc = orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            self.channel.send_soon(orjson.dumps(error_frame("bad-frame", f"not JSON: {exc}")))
            return
        if isinstance(doc, dict) and doc.get("type") == AUTH:
            self._credential.take(doc)
            return
        if not isinstance(doc, dict) or doc.get("type") != PUBLISH:
            self.channel.send_soon(orjson.dumps(error_frame(
                "bad-frame", "this socket takes {\"type\": \"publish\", \"id\": ..., "
                "\"topic\": ..., \"messages\": [...]} frames")))
            return
        publish_frame_or_error(self.channel, text, doc)

    def on_binary(self, data: bytes) -> None:
        self.channel.send_soon(orjson.dumps(error_frame("bad-frame", "frames must be JSON text")))

    def on_closed(self) -> None:
        if self._cleanup is None:
            self._cleanup = asyncio.create_task(self._clean_up(), name="publish-socket-end")

    def request_shutdown(self) -> None:
        """Close with 1001 once the frames in flight are answered (the client resends the rest
        elsewhere)."""
        self.channel.send_soon(self._close_when_drained())

    async def finished(self, timeout_s: float) -> None:
        """Until the socket closed and the cleanup ran; a socket still open after ``timeout_s``
        is dropped."""
        await closed_within(self.socket, timeout_s)
        if self._cleanup is not None:
            await self._cleanup

    async def _close_when_drained(self) -> None:
        await self.channel.drain(CLOSE_TIMEOUT_S)
        self.socket.close(WS_CLOSE_GOING_AWAY, "gateway shutting down")

    async def _clean_up(self) -> None:
        self._credential.cancel()
        try:
            await self.channel.drain(CLOSE_TIMEOUT_S)
        finally:
            self._subscriptions.discard(self)
            self._connections.dec()
            self._release()
