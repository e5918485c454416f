"""A lean server side of RFC 6455 for subscriptions: no task, no queue and no parser object while a
socket idles (gateway.delivery.upgrade hands the connection over from aiohttp)."""

from __future__ import annotations

import asyncio
import contextlib
import zlib
from collections.abc import Sequence
from typing import Protocol

from gateway._speedups import frame_header
from gateway.delivery.wire import text_frames
from gateway.delivery.ws_frames import (
    CLOSE_INVALID_TEXT,
    CLOSE_PROTOCOL_ERROR,
    CLOSE_TOO_BIG,
    DATA_OPCODES,
    OP_CLOSE,
    OP_CONTINUATION,
    OP_PING,
    OP_PONG,
    OP_TEXT,
    ProtocolViolation,
    close_payload,
    parse_frame,
    peer_close_code,
)

CLOSE_TIMEOUT_S = 5.0  # a close frame the peer does not answer within this drops the connection
DEFLATE_TAIL = b"\x00\x00\xff\xff"


class SocketEvents(Protocol):
    """What a served socket reports to its subscription (called from the event loop, never
    concurrently)."""

    def on_text(self, text: str) -> None: ...

    def on_binary(self, data: bytes) -> None: ...

    def on_closed(self) -> None: ...


class LeanWebSocket(asyncio.Protocol):
    """The server side of one WebSocket connection, driven by the transport's callbacks.

    aiohttp keeps a lot per WebSocket connection (its request handler and HTTP parser, the upgrade
    request and its headers, a reader with a data queue, two tasks and the handler's coroutine
    frames for as long as the socket lives); a subscription socket needs far less. Once upgraded,
    the transport calls this protocol: client frames are parsed as they arrive and handed to the
    ``SocketEvents`` of the subscription, sends go straight to the transport, and the only timer is
    the heartbeat.

    Of RFC 6455 and RFC 7692: masked client frames (an unmasked one is a protocol error),
    fragmented messages with control frames between fragments, ping/pong, the close handshake (a
    close frame not answered within ``CLOSE_TIMEOUT_S`` drops the connection), UTF-8 checked text
    (1007), messages over the size limit (1009), and permessage-deflate when negotiated.
    """

    __slots__ = ("_buffer", "_close_sent", "_closed_waiters", "_compressor", "_decompressor",
                 "_deflate_bits", "_drain", "_events", "_fragment_deflated", "_fragment_op",
                 "_fragment_size", "_fragments", "_heard", "_heartbeat_s", "_max_bytes",
                 "_no_takeover", "_reading", "_timer", "_waiter", "closed", "transport")

    def __init__(self, transport: asyncio.Transport, max_message_bytes: int, heartbeat_s: float,
                 deflate_bits: int = 0, deflate_no_takeover: bool = False) -> None:
        self.transport = transport
        self.closed = False
        self._events: SocketEvents | None = None
        self._waiter: asyncio.Future[str | bytes] | None = None  # a ``receive`` in progress
        self._buffer = b""  # bytes of a frame not complete yet (b"": nothing held)
        self._fragments: list[bytes] | None = None  # a fragmented message being assembled
        self._fragment_op = 0
        self._fragment_size = 0
        self._fragment_deflated = False
        self._max_bytes = max_message_bytes
        self._heartbeat_s = heartbeat_s
        self._heard = True  # anything received since the last ping
        self._timer: asyncio.TimerHandle | None = None
        self._close_sent = False
        # set while the transport has writing paused
        self._drain: asyncio.Future[None] | None = None
        self._reading = True
        self._deflate_bits = deflate_bits
        self._no_takeover = deflate_no_takeover
        self._compressor: zlib._Compress | None = None  # created on the first compressed send
        self._decompressor: zlib._Decompress | None = None
        self._closed_waiters: list[asyncio.Future[None]] | None = None

    @property
    def compressed(self) -> bool:
        """Whether permessage-deflate was negotiated."""
        return self._deflate_bits > 0

    # --- serving ----------------------------------------------------------------------------------
    def serve(self, events: SocketEvents) -> None:
        """Hand every further client message to ``events`` (and ``on_closed`` once, also if already
        closed)."""
        self._events = events
        loop = asyncio.get_running_loop()
        if self.closed:
            loop.call_soon(events.on_closed)
            return
        self._take_buffered()

    def _take_buffered(self) -> None:
        """Read again (a transport paused while nobody took messages) and parse what is already
        held."""
        if self._reading and not self.closed:
            self.transport.resume_reading()
            if self._buffer:
                asyncio.get_running_loop().call_soon(self._process)

    async def receive(self, timeout_s: float) -> str | bytes:
        """The next client message (before ``serve``): text as ``str``, binary as ``bytes``.

        Raises TimeoutError, or ConnectionResetError when the connection closes first.
        """
        if self.closed:
            raise ConnectionResetError("the WebSocket is closed")
        self._waiter = asyncio.get_running_loop().create_future()
        self._take_buffered()
        try:
            return await asyncio.wait_for(asyncio.shield(self._waiter), timeout_s)
        finally:
            self._waiter = None

    def pause_reading(self) -> None:
        """Stop taking client messages (a bounded inbox is full); TCP pushes back on the client."""
        if self._reading and not self.closed:
            self._reading = False
            self.transport.pause_reading()

    def resume_reading(self) -> None:
        """Take client messages again, starting with any already buffered."""
        if not self._reading:
            self._reading = True
            self._take_buffered()

    async def wait_closed(self) -> None:
        """Until the connection is gone."""
        if self.closed:
            return
        waiter = asyncio.get_running_loop().create_future()
        if self._closed_waiters is None:
            self._closed_waiters = []
        self._closed_waiters.append(waiter)
        await waiter

    # --- sending ----------------------------------------------------------------------------------
    async def send_texts(self, payloads: Sequence[bytes]) -> None:
        """Each payload as its own text frame, all in one transport write; waits while the transport
        is full.

        Raises ConnectionResetError once the socket is closing.
        """
        if self._close_sent or self.closed:
            raise ConnectionResetError("the WebSocket is closed")
        self.transport.write(self._deflated_frames(payloads) if self._deflate_bits
                             else text_frames(payloads))
        if self._drain is not None:
            await asyncio.shield(self._drain)

    def _deflated_frames(self, payloads: Sequence[bytes]) -> bytes:
        compressor = self._compressor
        if compressor is None:
            compressor = self._compressor = zlib.compressobj(zlib.Z_DEFAULT_COMPRESSION,
                                                             zlib.DEFLATED, -self._deflate_bits)
        flush = zlib.Z_FULL_FLUSH if self._no_takeover else zlib.Z_SYNC_FLUSH
        parts: list[bytes] = []
        for payload in payloads:
            body = compressor.compress(payload) + compressor.flush(flush)
            if body.endswith(DEFLATE_TAIL):
                body = body[:-4]
            parts.append(frame_header(0xC1, len(body)))  # FIN, RSV1 (compressed), text
            parts.append(body)
        return b"".join(parts)

    def close(self, code: int, reason: str = "") -> None:
        """Send a close frame (once); the connection drops when the peer answers or after
        CLOSE_TIMEOUT_S."""
        if self._close_sent or self.closed:
            return
        self._close_sent = True
        self._write_control(OP_CLOSE, close_payload(code, reason))
        self._restart_timer(CLOSE_TIMEOUT_S, self.abort)
        # the peer's close may come behind messages nobody takes (a socket never served)
        self._take_buffered()

    def abort(self) -> None:
        """Drop the connection now (no close handshake)."""
        if not self.closed:
            self.transport.abort()

    def _write_control(self, opcode: int, payload: bytes) -> None:
        if not self.transport.is_closing():
            self.transport.write(bytes((0x80 | opcode, len(payload))) + payload)

    # --- heartbeat --------------------------------------------------------------------------------
    def start_heartbeat(self) -> None:
        """Ping every ``heartbeat_s``; a peer that sent nothing between two pings is dropped."""
        if self._heartbeat_s > 0:
            self._restart_timer(self._heartbeat_s, self._beat)

    def _beat(self) -> None:
        if not self._heard:
            self.abort()
            return
        self._heard = False
        self._write_control(OP_PING, b"")
        self._restart_timer(self._heartbeat_s, self._beat)

    def _restart_timer(self, delay_s: float, callback: object) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = asyncio.get_running_loop().call_later(
            delay_s, callback)  # type: ignore[arg-type]

    # --- asyncio.Protocol -------------------------------------------------------------------------
    def data_received(self, data: bytes) -> None:
        self._heard = True
        self._buffer = self._buffer + data if self._buffer else data
        self._process()

    def eof_received(self) -> bool:
        return False  # the transport closes itself

    def pause_writing(self) -> None:
        if self._drain is None:
            self._drain = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        drain, self._drain = self._drain, None
        if drain is not None and not drain.done():
            drain.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.closed:
            return
        self.closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._buffer = b""
        self._fragments = None
        drain, self._drain = self._drain, None
        if drain is not None and not drain.done():
            drain.set_exception(ConnectionResetError("the WebSocket closed"))
            drain.exception()  # retrieved: nobody may be waiting
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_exception(ConnectionResetError("the WebSocket closed"))
        for waiter in self._closed_waiters or ():
            if not waiter.done():
                waiter.set_result(None)
        self._closed_waiters = None
        if self._events is not None:
            self._events.on_closed()

    # --- parsing ----------------------------------------------------------------------------------
    def _consumer_ready(self) -> bool:
        if not self._reading or self.closed or self.transport.is_closing():
            return False
        if self._events is not None or self._close_sent:
            # once closing, frames are read for the peer's close (messages nobody takes are dropped)
            return True
        return self._waiter is not None and not self._waiter.done()

    def _process(self) -> None:
        """Parse and dispatch every complete frame buffered, while someone takes messages."""
        buffer = self._buffer
        at = 0
        try:
            while self._consumer_ready():
                parsed = parse_frame(buffer, at, self._max_bytes)
                if parsed is None:
                    break
                header, payload, at = parsed
                self._on_frame(header, payload)
        except ProtocolViolation as violation:
            self._fail(violation)
            return
        if self.closed:
            return
        self._buffer = buffer[at:] if at else buffer
        if len(self._buffer) > self._max_bytes and not self._consumer_ready():
            self.transport.pause_reading()  # nobody takes messages yet: hold at most one frame

    def _fail(self, violation: ProtocolViolation) -> None:
        """Close with the violation's code and stop reading: nothing more is taken from this
        peer."""
        self._buffer = b""
        self._fragments = None
        if not self._close_sent:
            self._close_sent = True
            self._write_control(OP_CLOSE, close_payload(violation.code, violation.reason))
        self.transport.close()

    def _on_frame(self, header: int, payload: bytes) -> None:
        opcode, final, deflated = header & 0x0F, bool(header & 0x80), bool(header & 0x40)
        # RFC 7692 6.1: first frames only
        if deflated and (not self._deflate_bits or opcode not in DATA_OPCODES):
            raise ProtocolViolation(CLOSE_PROTOCOL_ERROR, "unexpected RSV1 bit")
        if opcode >= OP_CLOSE:
            self._on_control(opcode, payload)
            return
        if opcode == OP_CONTINUATION:
            if self._fragments is None:
                raise ProtocolViolation(CLOSE_PROTOCOL_ERROR, "continuation without a message")
            self._fragment_size += len(payload)
            self._check_size(self._fragment_size)
            self._fragments.append(payload)
            if final:
                fragments, self._fragments = self._fragments, None
                self._deliver(self._fragment_op, b"".join(fragments), self._fragment_deflated)
            return
        if self._fragments is not None:
            raise ProtocolViolation(CLOSE_PROTOCOL_ERROR, "a new message before the last one ended")
        if final:
            self._deliver(opcode, payload, deflated)
            return
        self._fragments, self._fragment_op, self._fragment_deflated = [payload], opcode, deflated
        self._fragment_size = len(payload)
        self._check_size(self._fragment_size)

    def _check_size(self, size: int) -> None:
        if size > self._max_bytes:
            raise ProtocolViolation(CLOSE_TOO_BIG, f"message over {self._max_bytes} bytes")

    def _on_control(self, opcode: int, payload: bytes) -> None:
        if opcode == OP_PING:
            self._write_control(OP_PONG, payload)
        elif opcode == OP_CLOSE:
            code = peer_close_code(payload)
            if not self._close_sent:
                self._close_sent = True
                self._write_control(OP_CLOSE, close_payload(code))
            self.transport.close()
        # a pong only proves the peer is there (``_heard``)

    def _deliver(self, opcode: int, payload: bytes, deflated: bool) -> None:
        if deflated:
            payload = self._inflate(payload)
        message: str | bytes = payload
        if opcode == OP_TEXT:
            try:
                message = payload.decode()
            except UnicodeDecodeError:
                raise ProtocolViolation(CLOSE_INVALID_TEXT, "text frame is not UTF-8") from None
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(message)
        elif self._events is not None:
            if isinstance(message, str):
                self._events.on_text(message)
            else:
                self._events.on_binary(message)

    def _inflate(self, payload: bytes) -> bytes:
        decompressor = self._decompressor
        if decompressor is None:
            decompressor = self._decompressor = zlib.decompressobj(-15)
        try:
            data = decompressor.decompress(payload + DEFLATE_TAIL, self._max_bytes + 1)
        except zlib.error:
            raise ProtocolViolation(CLOSE_INVALID_TEXT, "undecodable compressed message") from None
        self._check_size(len(data) + (1 if decompressor.unconsumed_tail else 0))
        return data


async def closed_within(socket: LeanWebSocket, timeout_s: float) -> None:
    """Until ``socket`` is closed: dropped if still open after ``timeout_s``; then one loop turn,
    in which the transport's ``connection_lost`` callback starts the socket's cleanup."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(socket.wait_closed(), timeout_s)
    socket.abort()
    await socket.wait_closed()
    await asyncio.sleep(0)
