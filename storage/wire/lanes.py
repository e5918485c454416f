"""Node lanes: per node, one shared connection for writes without WAIT, exclusive connections for
acks=all writes (one WAIT per node and event-loop turn: a group commit) and for blocking reads."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

from storage.settings import RedisStoreSettings
from storage.wire.connection import NodeAddress, RespConnection, Stall
from storage.wire.errors import ConnectionLost
from storage.wire.protocol import ReplyShape
from storage.wire.resp import encode_command


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
    """Pipelined connections per node address; an async context manager that closes them all.

    Per node: one shared connection for writes without WAIT, and a small pool of connections taken
    exclusively by acks=all writes: WAIT blocks its connection until the replicas answer, and it
    must follow the caller's own writes on the same connection (WAIT counts only what its
    connection sent; docs/architecture.md, acks). acks=all writes to one node made in the same
    event-loop turn share one such connection and one WAIT (``submit_replicated``, a group commit).
    Blocking reads take connections of a third pool, one read each at a time
    (``execute_blocking``).
    """

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
                raise ConnectionLost("the node lanes are closed")
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

    async def execute_shaped(self, address: NodeAddress, payload: bytes, shape: ReplyShape, *,
                             exclusive: bool = False) -> Any:
        """``payload`` on the node's shared connection (``exclusive``: one nobody else writes to
        meanwhile, so that a large reply is read from its first byte by ``shape``): its replies as
        ``shape`` answers them."""
        lane = self._lane(address)
        if exclusive:
            (answer,) = await self._execute_exclusive(address, lane, payload, shape.replies,
                                                      [shape])
            return answer
        connection = await self._shared(address, lane)
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
                raise ConnectionLost("the node lanes are closed")
            shapes = [m.shape for m in members]
            replies = await self._execute_exclusive(
                address, lane, payload, sum(m.replies for m in members) + 1,
                None if None in shapes else cast(list[ReplyShape], shapes))
        except BaseException as exc:
            error = (exc if isinstance(exc, Exception)
                     else ConnectionLost("the node lanes are closed"))
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
