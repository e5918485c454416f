"""The socket side of a subscription once the upgrade route returned: client frames in, the mode
served, one close and one cleanup."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import orjson

from gateway.delivery.hub import GroupConflict
from gateway.delivery.modes import serve, start_broadcast
from gateway.delivery.params import Mode
from gateway.delivery.ports import DeliveryPorts, OpenSubscription
from gateway.delivery.reauth import AUTH, SocketCredential
from gateway.delivery.session import CloseRequest, Session
from gateway.delivery.settle_frames import parse_settle
from gateway.delivery.settle_lanes import SettleLanes, SettlePart
from gateway.delivery.tail import BroadcastFollow
from gateway.delivery.websocket import CLOSE_TIMEOUT_S, LeanWebSocket, closed_within
from gateway.delivery.wire import error_frame
from gateway.errors import (
    WS_CLOSE_GOING_AWAY,
    WS_CLOSE_GROUP_CONFLICT,
    WS_CLOSE_SLOW_CONSUMER,
    WS_CLOSE_UNAVAILABLE,
    close_code_for,
)
from partitioner.errors import PartitionerError
from partitioner.topics import TopicMetadata
from storage.errors import StorageError

log = logging.getLogger(__name__)

TakePublish = Callable[[str, Any], None]  # a publish frame's text and parsed document

TASK_STOP_TIMEOUT_S = 5.0
# settle frames' partition parts waiting for the store; past this the socket stops reading (TCP
# pushes back)
INBOX_FRAMES = 64


class ServedSubscription:
    """One subscription's socket, session and mode (a broadcast follow or a runner task), until it
    closes.

    No task stays behind for an idle socket (idle sockets must cost little memory): client frames
    arrive as ``on_text``, settle frames of a group session go through bounded lanes, one per
    partition, each drained by a task that exists only while parts wait (``SettleLanes``), a close
    requested by the session (slow consumer, token expiry, shutdown, a failed runner) becomes the
    socket's close frame, and the socket closing starts the cleanup (runner and tails detached,
    writer stopped, counters released) exactly once.
    """

    __slots__ = ("_cleanup", "_credential", "_follow", "_publish", "_release", "_runner",
                 "_settles", "ports", "session", "socket")

    def __init__(self, socket: LeanWebSocket, session: Session, ports: DeliveryPorts,
                 release: Callable[[], None], credential: SocketCredential | None,
                 publish: TakePublish | None = None) -> None:
        """Takes over the principal's connection slot (already acquired): ``release`` gives it back
        once the cleanup ran. ``credential`` takes the socket's later ``auth`` frames and closes it
        when its token expires; ``publish`` takes its ``publish`` frames (text and parsed
        document)."""
        self._publish = publish
        self.socket = socket
        self.session = session
        self.ports = ports
        self._release = release
        self._follow: BroadcastFollow | None = None
        self._runner: asyncio.Task[None] | None = None
        self._settles: SettleLanes | None = None
        self._cleanup: asyncio.Task[None] | None = None
        self._credential = credential
        ports.subscriptions.add(self)
        ports.metrics.websocket_connections.labels(session.params.mode.value).inc()
        session.closing.add_done_callback(self._close_socket)

    async def start(self, topic: TopicMetadata) -> None:
        """Serve the session's mode; a failure to start closes the socket with the matching code."""
        ports, session = self.ports, self.session
        try:
            hub = ports.hub
            # no task of its own while idle
            if session.params.mode is Mode.BROADCAST and hub is not None:
                self._follow = await start_broadcast(session, ports, hub, topic, close_for)
            else:
                runner = asyncio.create_task(serve(session, ports, topic),
                                             name=f"subscription-{session.id}")
                runner.add_done_callback(self._runner_ended)
                self._runner = runner
        except Exception as exc:
            close_for(session, exc)
        finally:
            self.socket.serve(self)

    # --- SocketEvents -----------------------------------------------------------------------------
    def on_text(self, text: str) -> None:
        session = self.session
        try:
            doc = orjson.loads(text)
            if isinstance(doc, dict) and self._took_other(text, doc):
                return
            frame = parse_settle(doc)
        except (orjson.JSONDecodeError, ValueError) as exc:
            session.send_control(error_frame("bad-frame", str(exc)))
            return
        if self.ports.hub is None or session.params.mode is Mode.BROADCAST:
            session.send_control(error_frame(
                "bad-frame", f"{frame[0]} is only meaningful in a group subscription"))
            return
        if self._settles is None:
            self._settles = SettleLanes(self._settle, self._settle_failed,
                                        lambda exc: close_for(session, exc), INBOX_FRAMES,
                                        self.socket.pause_reading, self.socket.resume_reading)
        self._settles.add(frame)

    def _took_other(self, text: str, doc: dict[str, Any]) -> bool:
        """Whether ``doc`` was a publish or an auth frame, now handed on."""
        kind = doc.get("type")
        if kind == "publish" and self._publish is not None:
            self._publish(text, doc)
        elif kind == AUTH and self._credential is not None:
            self._credential.take(doc)
        else:
            return False
        return True

    def on_binary(self, data: bytes) -> None:
        self.session.send_control(error_frame("bad-frame", "frames must be JSON text"))

    def on_closed(self) -> None:
        if self._cleanup is None:
            self._cleanup = asyncio.create_task(self._clean_up(),
                                                name=f"subscription-end-{self.session.id}")

    # --- shutdown ---------------------------------------------------------------------------------
    def request_shutdown(self) -> None:
        """Close with 1001 so the client reconnects elsewhere and resumes."""
        self.session.request_close(WS_CLOSE_GOING_AWAY, "gateway shutting down")

    async def finished(self, timeout_s: float) -> None:
        """Until the socket closed and the cleanup ran; a socket still open after ``timeout_s`` is
        dropped."""
        await closed_within(self.socket, timeout_s)
        if self._cleanup is not None:
            await self._cleanup

    # --- internals --------------------------------------------------------------------------------
    async def _settle(self, partition: int, part: SettlePart) -> None:
        hub = self.ports.hub
        assert hub is not None
        action, refs, delay_ms, reason = part
        await hub.settle(self.session, partition, refs, action, delay_ms, reason)

    def _settle_failed(self, partition: int, action: str, exc: StorageError) -> None:
        # the deliveries stay held: the same frame sent again settles what is still to settle
        self.session.send_control(error_frame(
            "unavailable", f"{action} of partition {partition} failed, send it again: "
                           f"{exc.message}", partition=partition, action=action))

    def _close_socket(self, closing: asyncio.Future[CloseRequest]) -> None:
        request = closing.result()
        self.socket.close(request.code, request.reason)

    def _runner_ended(self, runner: asyncio.Task[None]) -> None:
        if runner.cancelled():
            return
        exc = runner.exception()
        if exc is not None:
            close_for(self.session, exc)
        else:
            self.session.request_close(WS_CLOSE_GOING_AWAY, "")

    async def _clean_up(self) -> None:
        session, ports = self.session, self.ports
        try:
            if self._credential is not None:
                self._credential.cancel()
            # Acks sent before the client's close frame are settled before the runner releases what
            # is held.
            if self._settles is not None:
                await self._settles.finished(TASK_STOP_TIMEOUT_S)
            if self._runner is not None:
                self._runner.cancel()
                # Bounded: a task stuck in a backend call must not keep the cleanup (and shutdown)
                # waiting.
                await asyncio.wait([self._runner], timeout=TASK_STOP_TIMEOUT_S)
            if self._follow is not None:
                await self._follow.aclose()
            await session.aclose()
        finally:
            self._release()
            mode = session.params.mode.value
            ports.metrics.websocket_connections.labels(mode).dec()
            if session.closing.done() and session.closing.result().code == WS_CLOSE_SLOW_CONSUMER:
                ports.metrics.websocket_slow_closes.labels(mode).inc()
            ports.subscriptions.discard(self)


async def close_subscriptions(subscriptions: set[OpenSubscription]) -> None:
    """Ask every open subscription to close with 1001 and wait (bounded) until each has closed and
    cleaned up."""
    open_now = list(subscriptions)
    for subscription in open_now:
        subscription.request_shutdown()
    if open_now:
        await asyncio.gather(*(subscription.finished(CLOSE_TIMEOUT_S) for subscription in open_now),
                             return_exceptions=True)


def close_for(session: Session, exc: BaseException | None) -> None:
    """Close the session with the code that tells the client what failed."""
    if exc is None:
        return
    if isinstance(exc, GroupConflict):
        session.request_close(WS_CLOSE_GROUP_CONFLICT, str(exc))
    elif isinstance(exc, StorageError | PartitionerError):
        session.request_close(close_code_for(exc), f"{type(exc).__name__}: {exc}")
    else:
        log.error("subscription %s failed", session.id, exc_info=exc)
        session.request_close(WS_CLOSE_UNAVAILABLE, "internal error")

