"""Lean pipelined connections per primary: every command of the store but the topology's (which
redis-py's cluster client keeps: the slot map and CLUSTER INFO).

``RespConnection`` writes raw RESP (``storage.resp``) and matches replies to requests in order.
Requests made in the same event-loop turn leave in one socket write (flushed as soon as the loop is
idle), so concurrent single-message publishes to one node are coalesced into one pipeline write
without a timer. While replies are outstanding, new requests are held and leave together when the
last reply arrives (one write per round trip under load, without a timer). In-flight requests per
connection are bounded (a request counts from when it is queued until its last reply is in): a
producer waits for room instead of queueing without limit. ``submit`` queues a request without
awaiting anything (None when there is no room), so a caller can put requests on several connections
in one turn and await their replies without a task each. Failures keep the contract of
``storage.appender``: a broken or timed-out connection fails every request in flight on it with a
redis ``ConnectionError``/``TimeoutError`` (the write is in doubt and the appender retries it; the
reply timeout is one watchdog timer per connection, for its oldest request); an error reply is a
value in the reply list, exactly as a redis-py pipeline gives it.

``NodeLanes`` holds, per node address, one shared connection for writes without WAIT, and a small
pool of connections taken exclusively by acks=all writes: WAIT blocks its connection until the
replicas answer, and it must follow the caller's own writes on the same connection (WAIT counts only
what its connection sent; docs/architecture.md, acks). acks=all writes to
one node made in the same event-loop turn share one such connection and one WAIT
(``execute_replicated``, a group commit). Blocking reads take connections of a third pool, one
read each at a time (``execute_blocking``).
"""

from __future__ import annotations

import asyncio
import collections
import ssl
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, cast

from storage.resp import (
    NOT_READY,
    ConnectionLost,
    ReplyReader,
    ReplyTimeout,
    encode_command,
    new_reply_reader,
    with_redis_errors,
)
from storage.settings import RedisStoreSettings

NodeAddress = tuple[str, int]
MAX_IN_FLIGHT = 512  # requests awaiting replies on one shared connection
TIMER_SLACK_S = 0.01  # the loop may run a timer this much before its time


class ReplyShape(Protocol):
    """How a caller wants its ``replies`` replies back: as one answer, folded by the caller.

    ``read`` may take them whole from the received bytes at ``offset``: (answer, where they end),
    False when they are clean so far but cut by the read (kept for the next read), None to decline
    (hiredis then reads them one by one and ``fold`` gets them, error replies as exceptions). The
    connection knows nothing of what the answer means."""

    @property
    def replies(self) -> int: ...

    def read(self, data: bytes, offset: int, /) -> tuple[Any, int] | Literal[False] | None: ...

    def fold(self, replies: list[Any], /) -> Any: ...


@dataclass(slots=True)
class _Request:
    """One caller's commands in flight: how many replies it still expects and those received."""

    future: asyncio.Future[list[Any]]
    remaining: int
    replies: list[Any] = field(default_factory=list)
    # event-loop time the request was queued (the reply timeout counts from it)
    queued_at: float = 0.0
    # the callers' shapes, in order, covering all replies but at most one integer (a group
    # commit's WAIT): answered one answer per shape, then that reply
    shapes: list[ReplyShape] | None = None
    # the shapes' answers, taken from the bytes while that WAIT reply is awaited
    answers: list[Any] | None = None
    # how much longer than the reply timeout its reply may take (a blocking read's BLOCK)
    grace_s: float = 0.0


class _RespProtocol(asyncio.Protocol):
    """Feeds received bytes to the reply reader and hands complete replies to the waiting
    requests."""

    def __init__(self) -> None:
        self.reader: ReplyReader = new_reply_reader()
        self.waiting: collections.deque[_Request] = collections.deque()
        self.transport: asyncio.Transport | None = None
        self.lost: BaseException | None = None
        self.sent = 0  # requests written to the socket whose replies are not all in
        # called when every sent request has its replies
        self.on_idle: Callable[[], None] | None = None
        # callers of a full one
        self.room_waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        # Redis answers a long pipeline in pieces (one per 16 KiB of commands it reads), so a read
        # often ends inside a shaped request's replies: the clean start is kept here rather than
        # handed to hiredis, which would then read that request and every one after it reply by
        # reply, a Python object each.
        self.held = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports do not subclass asyncio's
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        try:
            if self.held:
                # the start of a shaped request's replies, clean so far, kept from the last read
                data, self.held = self.held + data, b""
            waiting = self.waiting
            if waiting and waiting[0].shapes is not None and not self.reader.has_data():
                taken = self._take_shaped(data)
                if taken:
                    data = data[taken:]
            if data:
                self._read_replies(data)
            if self.sent == 0 and self.on_idle is not None:
                self.on_idle()
        except Exception as exc:
            # unparseable bytes or a reply nobody asked for: the stream is unusable
            self.fail(ConnectionLost(f"protocol error from redis: {exc!r}"))
            if self.transport is not None:
                self.transport.abort()

    def _take_shaped(self, data: bytes) -> int:
        """The first requests' replies, while their shapes read them whole from ``data`` (the reader
        holds nothing, so ``data`` starts at a reply): answered without a Python object per reply.
        How many bytes were taken; the rest (an error, a partial reply, another request's) goes to
        the reader."""
        waiting, offset = self.waiting, 0
        while waiting:
            request = waiting[0]
            shapes = request.shapes
            if shapes is None or request.replies:
                break
            answers = request.answers
            if answers is None:
                tail = request.remaining - sum([shape.replies for shape in shapes])
                if tail not in (0, 1):  # the shapes' replies, or WAIT's too
                    break
                read = _read_shapes(shapes, data, offset)
                if read is False:
                    # clean so far, cut by the read: kept for the next one, not given to hiredis
                    self.held = data[offset:]
                    return len(data)
                if read is None:
                    break
                answers, offset = read
                if tail == 0:
                    waiting.popleft()
                    self._answer(request, answers)
                    continue
                # A group commit's WAIT answers once the replicas did, usually in a later read: only
                # it is left.
                request.answers, request.remaining = answers, 1
            number = _integer_reply(data, offset)
            if number is None:  # not here yet, or not an integer: the reader reads it
                break
            answers.append(number[0])
            offset = number[1]
            waiting.popleft()
            self._answer(request, answers)
        return offset

    def _read_replies(self, data: bytes) -> None:
        reader, waiting = self.reader, self.waiting
        gets, not_ready = reader.gets, NOT_READY
        reader.feed(data)
        while (reply := gets()) is not not_ready:
            request = waiting[0]
            replies = request.replies
            replies.append(reply)
            remaining = request.remaining - 1
            # The rest of this request's replies (a transaction's QUEUED...) without the per-reply
            # lookups.
            append = replies.append
            while remaining and (reply := gets()) is not not_ready:
                append(reply)
                remaining -= 1
            request.remaining = remaining
            if remaining == 0:
                waiting.popleft()
                self._answer(request, _answer_of(request))

    def _answer(self, request: _Request, replies: list[Any]) -> None:
        """A request whose replies are all in (already taken off ``waiting``)."""
        self.sent -= 1
        if not request.future.done():  # a cancelled caller's replies are consumed and dropped
            request.future.set_result(replies)
        if self.room_waiters:
            self.wake_one()

    def connection_lost(self, exc: Exception | None) -> None:
        self.fail(ConnectionLost(f"connection to redis lost: {exc or 'closed by server'}"))

    def fail(self, error: BaseException) -> None:
        if self.lost is None:
            self.lost = error
        while self.waiting:
            request = self.waiting.popleft()
            if not request.future.done():
                request.future.set_exception(self.lost)
        while self.room_waiters:  # they find the connection lost
            self.wake_one()

    def wake_one(self) -> None:
        """Tell the first caller still waiting for room that a request left."""
        while self.room_waiters:
            waiter = self.room_waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return


class RespConnection:
    """One pipelined connection to one node; ``execute`` sends commands and returns their
    replies."""

    def __init__(self, protocol: _RespProtocol, reply_timeout_s: float, max_in_flight: int,
                 stall: Stall | None = None) -> None:
        self._protocol = protocol
        self._reply_timeout_s = reply_timeout_s
        self._max_in_flight = max_in_flight
        self._stall = stall
        # the oldest request already reported as stalled
        self._stall_reported: _Request | None = None
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
                    _RespProtocol, host, port, ssl=context,
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
        protocol.waiting.append(_Request(future, replies, [], now, shapes, grace_s=grace_s))
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


@dataclass(slots=True)
class _Replicated:
    """One caller's writes waiting to leave with the next WAIT to their node."""

    payload: bytes
    replies: int
    future: asyncio.Future[list[Any]]
    shape: ReplyShape | None = None


class _Lane:
    """The connections of one node: one shared (no WAIT), idle exclusive ones (WAIT), bounded in
    number."""

    def __init__(self, max_exclusive: int) -> None:
        self.shared: RespConnection | None = None
        self.opening: asyncio.Future[RespConnection] | None = None
        self.idle: list[RespConnection] = []
        # exclusive connections in use (closed too when the node goes)
        self.busy: set[RespConnection] = set()
        # connections still waiting for their handshake
        self.handshaking: set[RespConnection] = set()
        # the node left or failed over: connections opened for it are closed at once
        self.closed = False
        self.exclusive_slots = asyncio.Semaphore(max_exclusive)
        # (replicas, timeout) -> this turn's callers
        self.forming: dict[tuple[int, int], list[_Replicated]] = {}
        # idle connections for blocking reads, one read each at a time, bounded in number
        self.blocking: list[RespConnection] = []
        self.blocking_slots = asyncio.Semaphore(max_exclusive)


class NodeLanes:
    """Lean connections per node address; an async context manager that closes them all."""

    def __init__(self, settings: RedisStoreSettings) -> None:
        self._settings = settings
        self._lanes: dict[NodeAddress, _Lane] = {}
        self._closed = False
        self._commits: set[asyncio.Task[None]] = set()
        # a node's request waits past node_stall_s
        self.on_stall: Callable[[NodeAddress], None] | None = None
        # when a reply timeout last closed a connection
        self._timed_out_at: dict[NodeAddress, float] = {}

    def _stall(self, address: NodeAddress, extra_s: float = 0.0) -> Stall | None:
        on_stall = self.on_stall
        if on_stall is None or self._settings.node_stall_s <= 0:
            return None

        def timed_out() -> None:
            self._timed_out_at[address] = asyncio.get_running_loop().time()

        return Stall(self._settings.node_stall_s + extra_s, lambda: on_stall(address), timed_out)

    def stalled(self, address: NodeAddress) -> bool:
        """Whether some connection to ``address`` has a request waiting past its stall threshold, or
        a reply timeout closed one lately (its callers' retries may be on a fresh connection to the
        same node)."""
        lane = self._lanes.get(address)
        if lane is None:
            return False
        since = asyncio.get_running_loop().time() - self._timed_out_at.get(address, float("-inf"))
        return since < self._settings.node_socket_timeout_s or any(
            c.stalled for c in (lane.shared, *lane.busy) if c is not None)

    async def __aenter__(self) -> NodeLanes:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def _lane(self, address: NodeAddress) -> _Lane:
        lane = self._lanes.get(address)
        if lane is None:
            if self._closed:
                raise ConnectionLost("the lean connections are closed")
            lane = self._lanes[address] = _Lane(max(1, self._settings.max_connections_per_node))
        return lane

    async def execute(self, address: NodeAddress, commands: Sequence[tuple[Any, ...] | bytes], *,
                      exclusive: bool) -> list[Any]:
        """Send commands to one node in one write and return their replies (error replies as
        exceptions).

        A command is a tuple of arguments or, already encoded, its RESP bytes. ``exclusive`` takes a
        connection nobody else writes to until the replies are in (for WAIT).
        """
        payload = b"".join([command if type(command) is bytes else encode_command(command)
                            for command in commands])
        return await self.execute_encoded(address, payload, len(commands), exclusive=exclusive)

    async def execute_one(self, address: NodeAddress, command: tuple[Any, ...]) -> Any:
        """One command on the node's shared connection: its reply; an error reply is raised."""
        (reply,) = await self.execute(address, [command], exclusive=False)
        if isinstance(reply, BaseException):
            raise reply
        return reply

    async def execute_encoded(self, address: NodeAddress, payload: bytes, replies: int, *,
                              exclusive: bool) -> list[Any]:
        """``execute`` for commands encoded already: ``payload`` holds ``replies`` commands."""
        lane = self._lane(address)
        if exclusive:
            return await self._execute_exclusive(address, lane, payload, replies)
        connection = await self._shared(address, lane)
        return await connection.execute(payload, replies)

    def submit(self, address: NodeAddress, payload: bytes,
               shape: ReplyShape) -> asyncio.Future[list[Any]] | None:
        """``execute_shaped`` without awaiting: the future of ``[answer]``
        (``RespConnection.submit``), or None when the node's shared connection is not open yet or
        has no room (the caller then uses ``execute_shaped``, which waits). Raises ConnectionError
        once closed."""
        connection = self._lane(address).shared
        if connection is None or connection.closed:
            return None
        return connection.submit(payload, shape.replies, [shape])

    async def execute_shaped(self, address: NodeAddress, payload: bytes,
                             shape: ReplyShape) -> Any:
        """``payload`` on the node's shared connection: its replies as ``shape`` answers them."""
        connection = await self._shared(address, self._lane(address))
        (answer,) = await connection.execute(payload, shape.replies, [shape])
        return answer

    async def execute_replicated(self, address: NodeAddress, payload: bytes, replies: int, *,
                                 replicas: int, timeout_ms: int,
                                 shape: ReplyShape | None = None) -> list[Any]:
        """``payload`` (``replies`` commands), then ``WAIT replicas timeout_ms``; their replies,
        WAIT's last.

        A group commit: the callers for one node in one event-loop turn leave together on an
        exclusive connection, followed by one WAIT. WAIT counts the replicas that acknowledged
        everything sent before it on its connection, so it covers each caller's writes, and every
        caller gets its own replies and that WAIT reply (with a ``shape``, its answer and that
        reply). A caller cancelled before its
        batch leaves is dropped from it; once sent, its writes are in doubt like any cancelled
        write. A failed batch fails every caller in it (the appender retries each).
        """
        return await self.submit_replicated(address, payload, replies, replicas=replicas,
                                            timeout_ms=timeout_ms, shape=shape)

    def submit_replicated(self, address: NodeAddress, payload: bytes, replies: int, *,
                          replicas: int, timeout_ms: int,
                          shape: ReplyShape | None = None) -> asyncio.Future[list[Any]]:
        """``execute_replicated`` without awaiting: the future of this caller's share of the node's
        next group commit (cancel it before the commit leaves and the caller is dropped from it)."""
        lane = self._lane(address)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[list[Any]] = loop.create_future()
        key = (replicas, timeout_ms)
        batch = lane.forming.get(key)
        if batch is None:
            batch = lane.forming[key] = []
            loop.call_soon(self._commit, address, lane, key)
        batch.append(_Replicated(payload, replies, future, shape))
        return future

    def _commit(self, address: NodeAddress, lane: _Lane, key: tuple[int, int]) -> None:
        members = [m for m in lane.forming.pop(key, []) if not m.future.done()]
        if members:
            task = asyncio.ensure_future(self._send_commit(address, lane, key, members))
            self._commits.add(task)
            task.add_done_callback(self._commits.discard)

    async def _send_commit(self, address: NodeAddress, lane: _Lane, key: tuple[int, int],
                           members: list[_Replicated]) -> None:
        payload = b"".join([m.payload for m in members]) + encode_command(("WAIT", *key))
        try:
            if self._closed:
                raise ConnectionLost("the lean connections are closed")
            shapes = [m.shape for m in members]
            replies = await self._execute_exclusive(
                address, lane, payload, sum(m.replies for m in members) + 1,
                None if None in shapes else cast(list[ReplyShape], shapes))
        except BaseException as exc:
            error = (exc if isinstance(exc, Exception)
                     else ConnectionLost("the lean connections are closed"))
            for member in members:
                if not member.future.done():
                    member.future.set_exception(error)
            if not isinstance(exc, Exception):
                raise
            return
        waited, pos, shaped = replies[-1], 0, None not in shapes
        for member in members:
            size = 1 if shaped else member.replies
            if not member.future.done():
                mine = replies[pos:pos + size]
                if member.shape is not None and not shaped:
                    mine = [member.shape.fold(mine)]
                member.future.set_result([*mine, waited])
            pos += size

    async def _shared(self, address: NodeAddress, lane: _Lane) -> RespConnection:
        connection = lane.shared
        if connection is not None and not connection.closed:
            return connection
        if lane.opening is None:
            # one connect for every concurrent caller, kept even if they are cancelled
            opening = asyncio.ensure_future(RespConnection.open(address, self._settings,
                                                                stall=self._stall(address),
                                                                handshaking=lane.handshaking))
            lane.opening = opening

            def opened(done: asyncio.Future[RespConnection]) -> None:
                lane.opening = None
                if not done.cancelled() and done.exception() is None:
                    if self._closed or lane.closed:
                        done.result().close()
                    else:
                        lane.shared = done.result()

            opening.add_done_callback(opened)
        connection = await asyncio.shield(lane.opening)
        if connection.closed:
            raise ConnectionLost(f"redis {address[0]}:{address[1]} is no longer a primary")
        return connection

    async def _execute_exclusive(self, address: NodeAddress, lane: _Lane, payload: bytes,
                                 count: int, shapes: list[ReplyShape] | None = None) -> list[Any]:
        async with lane.exclusive_slots:
            while lane.idle and lane.idle[-1].closed:
                lane.idle.pop()
            connection = lane.idle.pop() if lane.idle else await self._open_exclusive(address, lane)
            lane.busy.add(connection)
            try:
                replies = await connection.execute(payload, count, shapes)
            except BaseException:
                connection.close()  # in doubt (or cancelled mid-reply): never reused
                raise
            finally:
                lane.busy.discard(connection)
            if not self._closed and not connection.closed:
                lane.idle.append(connection)
            else:
                connection.close()
            return replies

    async def execute_blocking(self, address: NodeAddress, command: bytes, block_s: float) -> Any:
        """One command that may block in Redis for ``block_s`` (XREADGROUP or XREAD with BLOCK), on
        a connection of its own: never queued behind or in front of other requests, its reply
        allowed ``block_s`` beyond the reply timeout. Its reply, an error reply as an exception
        value. Cancelled or failed, the connection is closed: a late reply must not answer the next
        command."""
        lane = self._lane(address)
        async with lane.blocking_slots:
            while lane.blocking and lane.blocking[-1].closed:
                lane.blocking.pop()
            connection = lane.blocking.pop() if lane.blocking else await self._open_blocking(
                address, lane)
            lane.busy.add(connection)
            try:
                (reply,) = await connection.execute(command, 1, grace_s=block_s)
            except BaseException:
                connection.close()
                raise
            finally:
                lane.busy.discard(connection)
            if not self._closed and not lane.closed and not connection.closed:
                lane.blocking.append(connection)
            else:
                connection.close()
            return reply

    async def _open_blocking(self, address: NodeAddress, lane: _Lane) -> RespConnection:
        # No stall watch: a blocked read waits by design, it says nothing about the node.
        connection = await RespConnection.open(address, self._settings, 1, None, lane.handshaking)
        if lane.closed:  # forgotten during the handshake
            connection.close()
            raise ConnectionLost(f"redis {address[0]}:{address[1]} is no longer a primary")
        return connection

    async def _open_exclusive(self, address: NodeAddress, lane: _Lane) -> RespConnection:
        # WAIT may hold the reply for the WAIT timeout by design: a stall starts after it.
        connection = await RespConnection.open(
            address, self._settings, 1, self._stall(address, self._settings.wait_timeout_ms / 1000),
            lane.handshaking)
        if lane.closed:  # forgotten during the handshake
            connection.close()
            raise ConnectionLost(f"redis {address[0]}:{address[1]} is no longer a primary")
        return connection

    def forget(self, known: set[NodeAddress]) -> None:
        """Close the connections of nodes that are no longer primaries (left the cluster or failed
        over)."""
        for address in [a for a in self._lanes if a not in known]:
            self._close_lane(self._lanes.pop(address))
            self._timed_out_at.pop(address, None)

    async def aclose(self) -> None:
        """Close every connection (idempotent); requests in flight fail with ConnectionError."""
        self._closed = True
        lanes, self._lanes = list(self._lanes.values()), {}
        for lane in lanes:
            self._close_lane(lane)
        for commit in list(self._commits):
            commit.cancel()  # its callers fail with ConnectionError
        await asyncio.sleep(0)  # let the transports run their close callbacks

    @staticmethod
    def _close_lane(lane: _Lane) -> None:
        lane.closed = True
        if lane.shared is not None:
            lane.shared.close()
        for connection in (*lane.idle, *lane.blocking, *lane.busy, *lane.handshaking):
            connection.close()
        lane.idle.clear()
        lane.blocking.clear()


def _integer_reply(data: bytes, offset: int) -> tuple[int, int] | None:
    """An integer reply (``:<n>``) at ``offset`` and where it ends; None if something else is there
    or it is cut."""
    if not data.startswith(b":", offset):
        return None
    end = data.find(b"\r\n", offset)
    digits = data[offset + 1:end]
    if end < 0 or not digits.isdigit() or len(digits) > 18:
        return None
    return int(digits), end + 2


def _read_shapes(shapes: list[ReplyShape], data: bytes,
                 offset: int) -> tuple[list[Any], int] | Literal[False] | None:
    """Every shape's answer read from ``data`` at ``offset`` and where they end
    (``ReplyShape.read``); False or None as the first shape that does not read whole says."""
    answers: list[Any] = []
    for shape in shapes:
        read = shape.read(data, offset)
        if read is None or read is False:
            return read
        answers.append(read[0])
        offset = read[1]
    return answers, offset


def _answer_of(request: _Request) -> list[Any]:
    """A request's answer once hiredis has read its (remaining) replies: raw without shapes, else
    one answer per shape (read from the bytes before, or folded now) and then the rest."""
    replies, shapes = request.replies, request.shapes
    if shapes is None:
        return replies
    replies = with_redis_errors(replies)
    if request.answers is not None:  # the shapes were read from the bytes: only WAIT's is left
        return [*request.answers, *replies]
    answers, pos = [], 0
    for shape in shapes:
        answers.append(shape.fold(replies[pos:pos + shape.replies]))
        pos += shape.replies
    return [*answers, *replies[pos:]]
