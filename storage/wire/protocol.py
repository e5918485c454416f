"""The reply side of a node connection: received bytes read into the replies of the requests in
flight, in order, whole from the bytes where a caller's ``ReplyShape`` can, else by hiredis."""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, cast

from storage.wire.errors import ConnectionLost, with_redis_errors
from storage.wire.resp import NOT_READY, ReplyReader, new_reply_reader


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
class Request:
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


class RespProtocol(asyncio.Protocol):
    """Feeds received bytes to the reply reader and hands complete replies to the waiting
    requests."""

    def __init__(self) -> None:
        self.reader: ReplyReader = new_reply_reader()
        self.waiting: collections.deque[Request] = collections.deque()
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

    def _answer(self, request: Request, replies: list[Any]) -> None:
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


def _answer_of(request: Request) -> list[Any]:
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
