"""Server-Sent Events as a subscription transport: the session's JSON frames become SSE events, each
``message`` carrying as its ``id`` the resume cursor after it (docs/sse.md)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Sequence
from itertools import chain, repeat
from typing import TYPE_CHECKING

import orjson

from gateway.delivery.params import format_cursor
from gateway.delivery.session import CloseRequest, Outgoing, Session

if TYPE_CHECKING:
    from gateway.delivery.tail import BroadcastFollow

Write = Callable[[bytes], Awaitable[None]]
Finish = tuple[Callable[[], Awaitable[None]], Callable[[], None]]  # end the response, or cut it

RETRY_MS = 1000
PING = b": ping\n\n"
# the heartbeat, queued as an empty control frame (the writer's timeout covers it) and written as
# the comment
PING_FRAME: dict[str, str] = {}
_PING_JSON = b"{}"
CLOSE_WAIT_S = 2.0  # the final bytes of an ending stream; a client that reads none is cut off
CLIENT_GONE = 1006
_MESSAGE = b'{"type":"message",'
_PARTITION_FIELD = b',"partition":'
_OFFSET_FIELD = b',"offset":"'
_CURSOR_MOVING_ERRORS = ("schema-conversion-failed",)  # they take a message's place
_MESSAGE_AFTER_ID = b"\nevent: message\ndata: "
_EVENT_END = b"\n\n"


def stream_start(retry_ms: int = RETRY_MS) -> bytes:
    """The first bytes of a stream: how long a browser waits before reconnecting."""
    return b"retry: %d\n\n" % retry_ms


def sse_event(event: bytes, data: bytes, event_id: str | None = None) -> bytes:
    """One SSE event; ``data`` is one line of JSON (JSON never holds a raw newline)."""
    head = b"" if event_id is None else b"id: " + event_id.encode() + b"\n"
    return b"".join((head, b"event: ", event, b"\ndata: ", data, b"\n\n"))


def message_position(frame: bytes) -> tuple[int, str]:
    """The (partition, offset) of a ``message`` frame as gateway.delivery.wire lays it out."""
    # only the topic comes before the partition, and a topic name holds no quote
    start = frame.index(_PARTITION_FIELD) + len(_PARTITION_FIELD)
    comma = frame.index(b",", start)
    offset_start = comma + len(_OFFSET_FIELD)
    return int(frame[start:comma]), frame[offset_start:frame.index(b'"', offset_start)].decode()


def page_events(partition: int, frames: Sequence[bytes], offsets: Sequence[str],
                cursor: dict[int, str]) -> bytes:
    """The ``message`` events of a page of one partition's frames (at ``offsets``); ``cursor`` (the
    position before them, updated in place) gives each its ``id``. Only the partition's offset
    differs between the ids of a page, so each event is joined from the same two pieces around it
    in one pass (no per-message step in Python: the events of a fan-out are built per stream)."""
    before = [f"{p}:{o}" for p, o in sorted(cursor.items()) if p < partition]
    after = [f"{p}:{o}" for p, o in sorted(cursor.items()) if p > partition]
    head = f"id: {','.join([*before, ''])}{partition}:".encode()
    tail = (("," + ",".join(after)) if after else "").encode() + _MESSAGE_AFTER_ID
    cursor[partition] = offsets[-1]
    return b"".join(chain.from_iterable(zip(repeat(head), map(str.encode, offsets), repeat(tail),
                                            frames, repeat(_EVENT_END))))


def sse_events(frames: Sequence[bytes], cursor: dict[int, str]) -> bytes:
    """The SSE bytes of a session's frames; ``cursor`` (the position before them, updated in place)
    gives each message its ``id``: the cursor right after it."""
    out: list[bytes] = []
    for frame in frames:
        if frame.startswith(_MESSAGE):
            partition, offset = message_position(frame)
            cursor[partition] = offset
            out.append(sse_event(b"message", frame, format_cursor(cursor)))
            continue
        if frame == _PING_JSON:
            out.append(PING)
            continue
        doc = orjson.loads(frame)
        kind = str(doc.get("type", "error"))
        event_id = None
        if kind == "error" and doc.get("code") in _CURSOR_MOVING_ERRORS:
            cursor[int(doc["partition"])] = str(doc["offset"])
            event_id = format_cursor(cursor)
        out.append(sse_event(kind.encode(), frame, event_id))
    return b"".join(out)


class SseStream:
    """One subscription written as an event stream: the session's ``Send``, heartbeats, and the end
    of the stream (shutdown, slow consumer, client gone) as an open subscription."""

    __slots__ = ("_cursor", "_ended", "_follow", "_release", "_write", "session")

    def __init__(self, write: Write, release: Callable[[], None]) -> None:
        """``write`` puts bytes on the response (waiting while the client does not read);
        ``release`` gives the connection slot back once the stream ended."""
        self._write = write
        self._release = release
        self._ended = asyncio.Event()
        self._follow: BroadcastFollow | None = None
        self.session: Session | None = None
        self._cursor: dict[int, str] | None = None  # what the events written so far resume after

    async def send(self, frames: Sequence[bytes]) -> None:
        """The session's ``Send``: its frames as events, the ids from the cursor written so far.

        Only the session's writer calls it (one at a time), so events never interleave; pings go
        through the same outbox."""
        session = self.session
        assert session is not None
        await self._write(sse_events(frames, dict(session.cursor)))

    async def send_items(self, items: list[Outgoing]) -> None:
        """The session's outbox items as events: a page of one partition's messages in one pass,
        anything else (control frames, a page holding an error in a message's place) frame by
        frame."""
        cursor = self._cursor
        if cursor is None:
            assert self.session is not None
            cursor = self._cursor = dict(self.session.cursor)  # the start, nothing written yet
        out: list[bytes] = []
        for payload, _, partition, offsets in items:
            frames = [payload] if isinstance(payload, bytes) else payload
            if partition >= 0 and all(map(bytes.startswith, frames, repeat(_MESSAGE))):
                out.append(page_events(partition, frames,
                                       [offsets] if isinstance(offsets, str) else offsets, cursor))
            else:
                out.append(sse_events(frames, cursor))
        await self._write(b"".join(out))

    def ping(self) -> None:
        """Queue a heartbeat comment unless something waits to be written already; a client that
        does not take it is a slow consumer as for any event."""
        session = self.session
        if session is not None and not session.outbox_bytes:
            session.send_control(PING_FRAME)

    def serve(self, session: Session, follow: BroadcastFollow | None) -> None:
        """Take over the session and its follow (closed with the stream)."""
        self.session = session
        self._follow = follow
        session.send_items = self.send_items

    async def serve_until_closed(self, heartbeat_s: float,
                                 connected: Callable[[], bool]) -> CloseRequest:
        """Heartbeats until the session asks to close (or the client went away); why it closed."""
        session = self.session
        assert session is not None
        closing = session.closing
        while not closing.done():
            await asyncio.wait([closing], timeout=heartbeat_s)
            if closing.done():
                break
            if not connected():
                session.request_close(CLIENT_GONE, "client went away")
                break
            self.ping()
        return closing.result()

    async def aclose(self, final: bytes = b"", finish: Finish | None = None) -> None:
        """Stop following and writing, then write ``final`` and end the response with ``finish``
        (bounded: a client that reads nothing is cut off), and give the connection slot back;
        idempotent."""
        if self._ended.is_set():
            return
        try:
            if self._follow is not None:
                await self._follow.aclose()
            if self.session is not None:
                await self.session.aclose()  # its writer stopped: nothing else writes now
            if finish is not None:
                await _ended_within(self._write, final, finish, CLOSE_WAIT_S)
        finally:
            self._ended.set()
            self._release()

    # --- OpenSubscription -------------------------------------------------------------------------
    def request_shutdown(self) -> None:
        """End the stream: the browser reconnects (elsewhere) with its ``Last-Event-ID``."""
        if self.session is not None:
            self.session.request_close(1001, "gateway shutting down")

    async def finished(self, timeout_s: float) -> None:
        """Until the stream ended and was cleaned up (bounded)."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._ended.wait(), timeout_s)


async def _ended_within(write: Write, final: bytes, finish: Finish, timeout_s: float) -> None:
    """Write ``final`` and end the response within ``timeout_s``, else cut the connection."""
    end, cut = finish
    try:
        async with asyncio.timeout(timeout_s):
            if final:
                await write(final)
            await end()
    except (TimeoutError, ConnectionError, RuntimeError):
        cut()
