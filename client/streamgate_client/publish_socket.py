"""The producer's WebSocket transport: publish frames to any topic over one connection to
``/v1/publish``, their answers matched by id, a new connection after the gateway closes one."""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections import deque
from collections.abc import Callable
from ssl import SSLContext
from typing import Any

import aiohttp
import orjson

from streamgate_client.credentials import Credentials, tls_hint
from streamgate_client.errors import ClientError, ConnectionFailed, ProblemError, problem_of
from streamgate_client.token_refresh import SocketTokenRefresh
from streamgate_client.ws_takeover import take_over

log = logging.getLogger(__name__)

# permessage-deflate with the full 32 KiB window, offered when asked for: for small frames it
# costs more CPU on both ends than it saves
WS_DEFLATE_WINDOW_BITS = 15
# a close that says what an HTTP publish would have answered
CLOSE_STATUSES = {4401: 401, 4403: 403, 4429: 429, 4503: 503}
_TEXT = aiohttp.WSMsgType.TEXT
_ENDED = frozenset({aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSING,
                    aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.ERROR})


class PublishNotOffered(ClientError):
    """The gateway answered the upgrade to ``/v1/publish`` with 404: it publishes over HTTP
    only."""


def closed_error(code: int | None, reason: str) -> ClientError:
    """What a frame left unanswered by a close fails with: retriable unless the close says the
    credentials or the permissions are wrong."""
    status = CLOSE_STATUSES.get(code or 0)
    detail = f"the publish socket closed with {code}: {reason or 'no reason given'}"
    if status is None:
        return ConnectionFailed(detail)
    return ProblemError(status, {"status": status, "title": "Publish socket closed",
                                 "detail": detail})


def problem_of_answer(answer: dict[str, Any]) -> ProblemError:
    """The ``ProblemError`` an HTTP publish would have raised for a ``problem`` frame."""
    document = answer.get("problem")
    if not isinstance(document, dict):
        document = {"status": 500, "detail": f"a malformed problem frame: {answer!r}"[:500]}
    status = document.get("status")
    return problem_of(status if isinstance(status, int) else 500, orjson.dumps(document),
                      {"Retry-After": answer.get("retry_after_s")})


class _Room:
    """The frames and bytes awaiting their answers on one connection, within the gateway's
    limits; callers wait their turn in order."""

    __slots__ = ("bytes", "frames", "max_bytes", "max_frames", "waiters")

    def __init__(self, max_frames: int, max_bytes: int) -> None:
        self.frames = self.bytes = 0
        self.max_frames, self.max_bytes = max_frames, max_bytes
        self.waiters: deque[tuple[asyncio.Future[None], int]] = deque()

    def fits(self, size: int) -> bool:
        # a frame alone may be as large as the gateway takes at all
        return self.frames < self.max_frames and (
            not self.frames or self.bytes + size <= self.max_bytes)

    def try_take(self, size: int) -> bool:
        """Take room for a frame of ``size`` bytes if there is some and nobody waits for it."""
        if self.waiters or not self.fits(size):
            return False
        self.frames += 1
        self.bytes += size
        return True

    async def take(self, size: int) -> None:
        if self.try_take(size):
            return
        waiter = asyncio.get_running_loop().create_future()
        self.waiters.append((waiter, size))
        try:
            await waiter  # given its room by give_back
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.give_back(size)
            raise

    def give_back(self, size: int) -> None:
        self.frames -= 1
        self.bytes -= size
        while self.waiters:
            waiter, wanted = self.waiters[0]
            if not waiter.done():
                if not self.fits(wanted):
                    return
                self.frames += 1
                self.bytes += wanted
                waiter.set_result(None)
            self.waiters.popleft()


class _Connection:
    """One open socket: the frames awaiting their answer by id (with when each was sent), room
    for ``max_in_flight`` of them, a watchdog that retires the socket once the oldest has
    waited ``timeout_s``, and a provider's fresh token sent before the socket's expires."""

    __slots__ = ("auth", "close_code", "close_reason", "closers", "loop", "max_frame_bytes",
                 "open", "pending", "refresh", "room", "timeout_s", "url", "watchdog", "wire",
                 "ws")

    def __init__(self, ws: aiohttp.ClientWebSocketResponse, ready: dict[str, Any], url: str,
                 timeout_s: float, closers: set[asyncio.Task[None]], ready_text: bytes,
                 credentials: Credentials, auth: dict[str, str]) -> None:
        self.ws, self.url, self.timeout_s, self.closers = ws, url, timeout_s, closers
        # the headers whose token the socket holds (its upgrade's, then the last fresh one the
        # gateway took): forgotten when a 4401 ends it
        self.auth = auth
        self.loop = asyncio.get_running_loop()
        self.pending: dict[str, tuple[asyncio.Future[dict[str, Any]], float]] = {}
        self.max_frame_bytes = int(ready.get("max_frame_bytes", 1 << 20))
        self.room = _Room(max(1, int(ready.get("max_in_flight", 1))),
                          int(ready.get("max_in_flight_bytes", 0)) or 1 << 62)
        self.open = True
        self.close_code: int | None = None
        self.close_reason = ""
        self.watchdog: asyncio.TimerHandle | None = None
        self.refresh: SocketTokenRefresh | None = None
        self.wire = take_over(ws, self.answered, self.ended, received=ready_text)
        if self.open:
            self.refresh = SocketTokenRefresh(credentials, auth, self.wire.send_text)
        else:  # refused at once, by what aiohttp had read past the ready frame
            self._close_wire(self.close_code or 1000, self.close_reason)

    def error(self) -> ClientError:
        return closed_error(self.close_code, self.close_reason)

    def send(self, frame_id: str, frame: bytes) -> asyncio.Future[dict[str, Any]]:
        """Write ``frame`` and return the future its answer resolves."""
        future = self.loop.create_future()
        now = self.loop.time()
        self.pending[frame_id] = (future, now)
        if self.watchdog is None:
            self.watchdog = self.loop.call_at(now + self.timeout_s, self._watch)
        self.wire.send_text(frame)
        return future

    def answered(self, payload: bytes) -> None:
        """The wire's callback for each text message: the answer resolves its frame's future."""
        try:
            answer = orjson.loads(payload)
            waiting = self.pending.pop(answer.get("id"), None)
        except (orjson.JSONDecodeError, AttributeError, TypeError) as exc:
            log.warning("%s sent what is not an answer (%s): reconnecting", self.url, exc)
            self.retire(1002, "not an answer")
            return
        if waiting is not None:
            if not waiting[0].done():
                waiting[0].set_result(answer)
        elif answer.get("type") == "authenticated":  # a fresh token was taken: not an answer
            if self.refresh is not None:
                self.refresh.authenticated(answer)
                self.auth = self.refresh.auth
        elif answer.get("type") == "error":
            log.warning("%s refused a frame: %s", self.url, answer.get("detail"))

    def ended(self, code: int, reason: str) -> None:
        """The wire's callback once the socket closes: every frame unanswered fails with what
        the close means."""
        self.open = False
        self._stop_refresh()
        if self.close_code is None:
            self.close_code, self.close_reason = code, reason
        if self.watchdog is not None:
            self.watchdog.cancel()
            self.watchdog = None
        self._fail(self.pending, self.error)

    def retire(self, code: int, reason: str) -> None:
        """Stop sending on this socket, fail what it has in flight, close it in the
        background."""
        if not self.open:
            return
        self.open = False
        self._stop_refresh()
        self.close_code, self.close_reason = code, reason
        self._fail(self.pending, self.error)
        if hasattr(self, "wire"):  # else __init__ closes it once taken over
            self._close_wire(code, reason)

    def _stop_refresh(self) -> None:
        if self.refresh is not None:
            self.refresh.cancel()

    def _close_wire(self, code: int, reason: str) -> None:
        closer = asyncio.ensure_future(self.wire.close(code, reason))
        self.closers.add(closer)
        closer.add_done_callback(self.closers.discard)

    def _watch(self) -> None:
        """Armed while frames may be pending: a socket whose oldest frame has waited
        ``timeout_s`` stopped answering and is replaced (its frames are sent again)."""
        self.watchdog = None
        if not self.pending or not self.open:
            return
        due = next(iter(self.pending.values()))[1] + self.timeout_s
        if due > self.loop.time():
            self.watchdog = self.loop.call_at(due, self._watch)
            return
        late = {frame_id: waiting for frame_id, waiting in self.pending.items()
                if waiting[1] + self.timeout_s <= self.loop.time()}
        self._fail(late, lambda: ConnectionFailed(f"no answer over {self.url} in "
                                                  f"{self.timeout_s}s"))
        self.retire(1001, "no answer in time")

    def _fail(self, frames: dict[str, tuple[asyncio.Future[dict[str, Any]], float]],
              error: Callable[[], ClientError]) -> None:
        for future, _ in frames.values():
            if not future.done():
                future.set_exception(error())  # one each: each caller's traceback grows on it
        if frames is self.pending:
            frames.clear()
        else:
            for frame_id in frames:
                self.pending.pop(frame_id, None)


class PublishSocket:
    """Publishes batch bodies (``{"acks":..,"messages":[..]}``) as frames over one WebSocket,
    each frame naming its topic, opened on first use and again after a close. ``publish``
    answers the gateway's ``published`` frame, raises what HTTP would, or returns None: that body
    goes over HTTP (the gateway does not offer the socket, or the frame is larger than it takes).
    ``deflate`` offers permessage-deflate. Each connection's upgrade carries the credentials'
    current token, and a provider's fresh one goes over the open connection before it expires; a
    4401 close (the token expired anyway) makes them forget it, so the next connection asks for a
    fresh one."""

    def __init__(self, session: aiohttp.ClientSession, base_url: str,
                 credentials: Credentials, *, required: bool, timeout_s: float,
                 deflate: bool = False, ssl: SSLContext | bool = True) -> None:
        self.url = f"{base_url.rstrip('/')}/v1/publish"
        self.offered = True  # until the upgrade is answered with 404
        self.connections = 0
        self._session = session
        self._credentials = credentials
        self._ssl = ssl
        self._required = required
        self._timeout_s = timeout_s
        self._compress = WS_DEFLATE_WINDOW_BITS if deflate else 0
        self._ids = itertools.count(1)
        self._connection: _Connection | None = None
        self._connecting = asyncio.Lock()
        self._closers: set[asyncio.Task[None]] = set()
        self._closed = False

    async def publish(self, topic: str, body: bytes,
                      idempotency_key: str) -> dict[str, Any] | None:
        """Send ``body`` as one publish frame to ``topic`` under ``idempotency_key`` and return
        its answer."""
        connection = self._connection
        if connection is None or not connection.open:
            connection = await self._connected()
            if connection is None:
                return None
        frame_id = str(next(self._ids))
        # spliced, not re-encoded: the body's messages are already JSON
        frame = (b'{"type":"publish","topic":' + orjson.dumps(topic) + b',"id":"'
                 + frame_id.encode() + b'","idempotency_key":' + orjson.dumps(idempotency_key)
                 + b"," + body[1:])
        if len(frame) > connection.max_frame_bytes:
            return None
        room = connection.room
        if not room.try_take(len(frame)):
            await room.take(len(frame))
        try:
            answer = await self._exchange(connection, frame_id, frame)
        except ProblemError as exc:
            if exc.status == 401:
                self._credentials.forget(connection.auth)
            raise
        finally:
            room.give_back(len(frame))
        if answer.get("type") == "published":
            return answer
        raise problem_of_answer(answer)

    async def _exchange(self, connection: _Connection, frame_id: str,
                        frame: bytes) -> dict[str, Any]:
        """One frame out and its answer back; a close or a silence (the connection's watchdog)
        fails it, retriably."""
        if not connection.open:
            raise connection.error()
        try:
            future = connection.send(frame_id, frame)
            if connection.wire.writing_paused:
                await connection.wire.drain()
            return await future
        except ConnectionError as exc:
            raise ConnectionFailed(f"publish over {self.url}: {type(exc).__name__}: {exc}"
                                   ) from exc
        finally:
            connection.pending.pop(frame_id, None)

    async def _connected(self) -> _Connection | None:
        """The open connection, opened now if needed (once for concurrent callers); None when
        the gateway does not offer it."""
        async with self._connecting:
            connection = self._connection
            if connection is not None and connection.open:
                return connection
            if self._closed:
                raise ConnectionFailed("the producer's publish socket is closed")
            if not self.offered:
                return None
            self._connection = await self._open()
            return self._connection

    async def _open(self) -> _Connection | None:
        auth = await self._credentials.headers()
        try:
            return await self._open_with(auth)
        except ProblemError as exc:
            if exc.status == 401:  # refused at the upgrade, or closed with 4401 before ready
                self._credentials.forget(auth)
            raise

    async def _open_with(self, auth: dict[str, str]) -> _Connection | None:
        try:
            ws = await self._session.ws_connect(self.url, headers=auth, compress=self._compress,
                                                ssl=self._ssl)
        except aiohttp.WSServerHandshakeError as exc:
            if exc.status != 404:
                raise ProblemError(exc.status, {"status": exc.status, "detail": exc.message}
                                   ) from exc
            if self._required:
                raise PublishNotOffered(f"{self.url} answered 404: this gateway publishes over "
                                        "HTTP only (use transport='auto' or 'http')") from exc
            log.info("%s answered 404: publishing over HTTP", self.url)
            self.offered = False
            return None
        except (aiohttp.ClientConnectionError, TimeoutError) as exc:
            raise ConnectionFailed(f"connect {self.url}: {type(exc).__name__}: {exc}"
                                   f"{tls_hint(self.url, exc)}") from exc
        ready, text = await self._ready(ws)
        try:
            connection = _Connection(ws, ready, self.url, self._timeout_s, self._closers, text,
                                     self._credentials, auth)
        except ConnectionError as exc:  # dropped: aiohttp held part of a frame, or failed
            raise ConnectionFailed(f"{self.url}: {exc}") from exc
        except RuntimeError as exc:  # an aiohttp whose internals the take-over does not know
            await ws.close()
            if self._required:
                raise
            log.warning("%s: %s; publishing over HTTP", self.url, exc)
            self.offered = False
            return None
        self.connections += 1
        return connection

    async def _ready(self, ws: aiohttp.ClientWebSocketResponse) -> tuple[dict[str, Any], bytes]:
        """The gateway's ``ready`` frame (parsed, and as sent), the first after the upgrade; a
        close instead raises."""
        try:
            message = await ws.receive(timeout=self._timeout_s)
        except TimeoutError as exc:
            await ws.close()
            raise ConnectionFailed(f"no ready frame from {self.url}") from exc
        if message.type is _TEXT:
            ready = orjson.loads(message.data)
            if isinstance(ready, dict) and ready.get("type") == "ready":
                return ready, message.data.encode()
        await ws.close()
        if message.type in _ENDED:
            raise closed_error(ws.close_code, str(message.extra or ""))
        raise ConnectionFailed(f"{self.url} sent {message.data!r:.200} instead of a ready frame")

    async def aclose(self) -> None:
        """Close the connection cleanly (after the producer flushed); idempotent."""
        async with self._connecting:
            self._closed = True
            connection, self._connection = self._connection, None
        if connection is not None:
            await connection.wire.close()
        for closer in list(self._closers):
            await closer
