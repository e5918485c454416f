"""One pipelined connection to one node: requests of one event-loop turn leave in one write, the
replies are matched to them in order (``storage.wire.protocol``), one watchdog times them out."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from storage.settings import RedisStoreSettings
from storage.wire.errors import ConnectionLost, ReplyTimeout, with_redis_errors
from storage.wire.protocol import ReplyShape, Request, RespProtocol
from storage.wire.resp import encode_command

NodeAddress = tuple[str, int]
MAX_IN_FLIGHT = 512  # requests awaiting replies on one shared connection
TIMER_SLACK_S = 0.01  # the loop may run a timer this much before its time


class RespConnection:
    """One pipelined connection to one node; ``execute`` sends commands and returns their replies.

    It writes raw RESP (``storage.wire.resp``) and matches replies to requests in order. Requests
    made in the same event-loop turn leave in one socket write (flushed as soon as the loop is
    idle), so concurrent single-message publishes to one node are coalesced into one pipeline write
    without a timer. While replies are outstanding, new requests are held and leave together when
    the last reply arrives (one write per round trip under load, without a timer). In-flight
    requests are bounded (a request counts from when it is queued until its last reply is in): a
    producer waits for room instead of queueing without limit. ``submit`` queues a request without
    awaiting anything (None when there is no room), so a caller can put requests on several
    connections in one turn and await their replies without a task each. Failures keep the
    appender's contract (``storage.append.appender``): a broken or timed-out connection fails every
    request in flight on it with ``ConnectionLost``/``ReplyTimeout`` (the write is in doubt and the
    appender retries it; the reply timeout is one watchdog timer per connection, for its oldest
    request); an error reply is a value in the reply list.
    """

    def __init__(self, protocol: RespProtocol, reply_timeout_s: float, max_in_flight: int,
                 stall: Stall | None = None) -> None:
        self._protocol = protocol
        self._reply_timeout_s = reply_timeout_s
        self._max_in_flight = max_in_flight
        self._stall = stall
        # the oldest request already reported as stalled
        self._stall_reported: Request | None = None
        self._out: list[bytes] = []
        self._out_requests = 0
        self._flush_scheduled = False
        self._watchdog: asyncio.TimerHandle | None = None
        protocol.on_idle = self._flush_held

    @classmethod
    async def open(cls, address: NodeAddress, settings: RedisStoreSettings,
                   max_in_flight: int = MAX_IN_FLIGHT, stall: Stall | None = None,
                   handshaking: set[RespConnection] | None = None) -> RespConnection:
        """Connect, authenticate and name the connection (redis ``ConnectionError`` when it cannot).
        While it waits for the handshake's replies the connection is in ``handshaking``, where its
        owner can close it."""
        loop = asyncio.get_running_loop()
        host, port = address
        context = tls_context(settings)
        try:
            async with asyncio.timeout(settings.socket_connect_timeout_s):
                _, protocol = await loop.create_connection(
                    RespProtocol, host, port, ssl=context,
                    server_hostname=host if context else None)
        except (OSError, TimeoutError) as exc:
            raise ConnectionLost(f"cannot connect to redis {host}:{port}: {exc!r}") from exc
        connection = cls(protocol, settings.node_socket_timeout_s, max_in_flight, stall)
        if handshaking is not None:
            handshaking.add(connection)
        try:
            await connection._handshake(settings)
        except BaseException:
            connection.close()
            raise
        finally:
            if handshaking is not None:
                handshaking.discard(connection)
        return connection

    async def _handshake(self, settings: RedisStoreSettings) -> None:
        commands: list[tuple[Any, ...]] = []
        if settings.password is not None:
            commands.append(("AUTH", settings.username, settings.password) if settings.username
                            else ("AUTH", settings.password))
        if settings.client_name:
            commands.append(("CLIENT", "SETNAME", settings.client_name))
        if commands:
            for reply in await self.execute(b"".join(encode_command(c) for c in commands),
                                            len(commands)):
                if isinstance(reply, BaseException):
                    raise reply

    @property
    def closed(self) -> bool:
        """True once the connection failed or was closed; a closed connection is never reused."""
        return self._protocol.lost is not None

    async def execute(self, payload: bytes, replies: int,
                      shapes: list[ReplyShape] | None = None, grace_s: float = 0.0) -> list[Any]:
        """Send ``payload`` (``replies`` encoded commands) and return the replies, error replies as
        exceptions (with ``shapes``, one answer per shape and then the rest, as ``submit``).

        Raises redis ``ConnectionError`` when the connection breaks and ``TimeoutError`` when no
        reply came within the reply timeout (the connection is then closed: its later replies could
        not be trusted). The timeout is one watchdog timer per connection, armed for the oldest
        request waiting (requests are answered in order), not a timer per request, whose arming and
        cancelling is event-loop work on every request.
        """
        future = self.submit(payload, replies, shapes, grace_s)
        while future is None:
            await self._room()
            future = self.submit(payload, replies, shapes, grace_s)
        answer = await future
        return answer if shapes is not None else with_redis_errors(answer)

    def submit(self, payload: bytes, replies: int, shapes: list[ReplyShape] | None = None,
               grace_s: float = 0.0) -> asyncio.Future[list[Any]] | None:
        """Queue ``payload`` (``replies`` encoded commands) in this turn's write: the future of its
        raw replies (error replies as ``ReplyError`` values; ``with_redis_errors`` converts them),
        or None when the connection has ``max_in_flight`` requests already. Raises the failure of a
        lost connection.

        ``shapes``: the callers' shapes (``ReplyShape``) covering the replies in order, but at most
        one integer reply after them (a group commit's WAIT): the future gets one answer per shape,
        then that reply (error replies as exceptions).
        """
        protocol = self._protocol
        if protocol.lost is not None:
            raise protocol.lost
        if len(protocol.waiting) >= self._max_in_flight:
            return None
        loop = asyncio.get_running_loop()
        future: asyncio.Future[list[Any]] = loop.create_future()
        now = loop.time()
        # no await between the two
        protocol.waiting.append(Request(future, replies, [], now, shapes, grace_s=grace_s))
        self._out.append(payload)
        self._out_requests += 1
        if protocol.sent == 0 and not self._flush_scheduled:  # idle: send in this loop turn's batch
            self._flush_scheduled = True
            loop.call_soon(self._flush)
        # Otherwise the request waits for the replies in flight (at most one round trip) and leaves
        # with everything queued meanwhile: one write per round trip under load, like Nagle without
        # a timer.
        if self._watchdog is None:
            self._watchdog = loop.call_at(now + self._first_check_s(), self._check_replies)
        return future

    @property
    def stalled(self) -> bool:
        """Whether the oldest request waits longer than the stall threshold."""
        waiting, stall = self._protocol.waiting, self._stall
        return (stall is not None and bool(waiting) and self._protocol.lost is None
                and asyncio.get_running_loop().time() - waiting[0].queued_at
                >= stall.after_s - TIMER_SLACK_S)

    def _first_check_s(self) -> float:
        return (self._reply_timeout_s if self._stall is None
                else min(self._stall.after_s, self._reply_timeout_s))

    async def _room(self) -> None:
        """Wait until a request in flight has all its replies (or the connection is lost)."""
        protocol = self._protocol
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        protocol.room_waiters.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                # woken, then cancelled: the room goes to the next
                protocol.wake_one()
            raise

    def _check_replies(self) -> None:
        """The watchdog: close the connection if its oldest request waited the reply timeout, else
        re-arm; tell the stall listener once per oldest request that waits past the stall
        threshold."""
        self._watchdog = None
        protocol = self._protocol
        if not protocol.waiting or protocol.lost is not None:
            return  # re-armed by the next request
        loop = asyncio.get_running_loop()
        oldest = protocol.waiting[0]
        due = oldest.queued_at + self._reply_timeout_s + oldest.grace_s
        if self._stall is not None and self._stall_reported is not oldest:
            stall_due = oldest.queued_at + self._stall.after_s
            if loop.time() < stall_due:
                self._watchdog = loop.call_at(min(stall_due, due), self._check_replies)
                return
            self._stall_reported = oldest
            self._stall.report()
        if loop.time() < due:
            self._watchdog = loop.call_at(due, self._check_replies)
            return
        if self._stall is not None:
            self._stall.timed_out()
        protocol.fail(ReplyTimeout(f"no reply from redis within {self._reply_timeout_s} s"))
        # for later callers
        protocol.lost = ConnectionLost("connection closed after a reply timeout")
        if protocol.transport is not None:
            protocol.transport.abort()

    def _flush(self) -> None:
        self._flush_scheduled = False
        out, self._out = self._out, []
        protocol = self._protocol
        protocol.sent += self._out_requests
        self._out_requests = 0
        if protocol.transport is not None and protocol.lost is None and out:
            # writelines, not write(b"".join(out)): uvloop hands the buffers to one writev, so the
            # turn's requests (tens of KiB under load) are not copied once more into a joined bytes
            # first
            protocol.transport.writelines(out)

    def _flush_held(self) -> None:
        if self._out and not self._flush_scheduled:
            self._flush()

    def close(self) -> None:
        """Abort the connection; requests in flight fail with ConnectionError."""
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        self._protocol.fail(ConnectionLost("connection closed by the client"))
        if self._protocol.transport is not None:
            self._protocol.transport.abort()


def tls_context(settings: RedisStoreSettings) -> ssl.SSLContext | None:
    """The client TLS context the settings ask for (None without TLS): TLS 1.2+, certificates
    verified."""
    if not settings.tls:
        return None
    context = ssl.create_default_context(cafile=settings.tls_ca_path)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.check_hostname = settings.tls_check_hostname
    context.verify_mode = ssl.CERT_REQUIRED
    if settings.tls_cert_path and settings.tls_key_path:
        context.load_cert_chain(settings.tls_cert_path, settings.tls_key_path)
    return context


@dataclass(frozen=True, slots=True)
class Stall:
    """Who to tell when a connection's oldest request waits longer than ``after_s`` (a frozen
    node?)."""

    after_s: float
    report: Callable[[], None]
    timed_out: Callable[[], None]  # the reply timeout closed the connection

