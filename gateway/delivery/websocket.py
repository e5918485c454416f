"""A lean server side of RFC 6455 for subscriptions: no task, no queue and no parser object while a
socket idles.

aiohttp keeps a lot per WebSocket connection (its request handler and HTTP parser, the upgrade
request and its headers, a reader with a data queue, two tasks and the handler's coroutine frames
for as long as the socket lives). A subscription socket needs far less: the route validates the
upgrade through aiohttp, then ``upgrade`` writes the 101 itself, puts a ``LeanWebSocket`` in place
as the transport's protocol and lets aiohttp forget the connection, so an idle connection costs
little memory. From then on the transport calls this protocol: client frames are parsed as they
arrive and handed to the ``SocketEvents`` of the subscription, sends go straight to the transport,
and the only timer is the heartbeat.

What is implemented of RFC 6455 and RFC 7692: masked client frames (an unmasked one is a protocol
error), fragmented messages with control frames between fragments, ping/pong, the close handshake (a
close frame not answered within ``CLOSE_TIMEOUT_S`` drops the connection), UTF-8 checked text
(1007), messages over the size limit (1009), and permessage-deflate when the client offers it and
the gateway allows it (negotiated as aiohttp does, through its ``ws_ext_parse``/``ws_ext_gen``).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import struct
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from aiohttp import web
from aiohttp.http_websocket import ws_ext_gen, ws_ext_parse

from gateway.delivery.wire import SHORT_MAX, frame_header, text_frames
from gateway.errors import Problem, bad_request

OP_CONTINUATION, OP_TEXT, OP_BINARY, OP_CLOSE, OP_PING, OP_PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA
DATA_OPCODES = frozenset((OP_TEXT, OP_BINARY))
CLOSE_NORMAL, CLOSE_PROTOCOL_ERROR, CLOSE_INVALID_TEXT, CLOSE_TOO_BIG = 1000, 1002, 1007, 1009
CLOSE_TIMEOUT_S = 5.0  # a close frame the peer does not answer within this drops the connection
CLOSE_REASON_MAX_BYTES = 123
WS_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
DEFLATE_TAIL = b"\x00\x00\xff\xff"
_MEDIUM, _LONG = struct.Struct("!H"), struct.Struct("!Q")


class SocketEvents(Protocol):
    """What a served socket reports to its subscription (called from the event loop, never
    concurrently)."""

    def on_text(self, text: str) -> None: ...

    def on_binary(self, data: bytes) -> None: ...

    def on_closed(self) -> None: ...


@dataclass(frozen=True, slots=True)
class Handshake:
    """A valid upgrade request's answer: the accept value and the negotiated permessage-deflate, if
    any."""

    accept: str
    deflate_bits: int  # 0: no compression; else the server's window bits (9..15)
    deflate_no_takeover: bool

    def response_head(self) -> bytes:
        """The 101 response that completes the handshake."""
        lines = ["HTTP/1.1 101 Switching Protocols", "Upgrade: websocket", "Connection: Upgrade",
                 f"Sec-WebSocket-Accept: {self.accept}"]
        if self.deflate_bits:
            lines.append("Sec-WebSocket-Extensions: "
                         + ws_ext_gen(compress=self.deflate_bits, isserver=True,
                                      server_notakeover=self.deflate_no_takeover))
        return ("\r\n".join(lines) + "\r\n\r\n").encode()


def handshake(headers: Mapping[str, str], compression_allowed: bool) -> Handshake:
    """Validate a WebSocket upgrade request's headers (400 problem when it is not one) and negotiate
    deflate."""
    if headers.get("Upgrade", "").strip().lower() != "websocket":
        raise _not_websocket("the request must carry 'Upgrade: websocket'")
    if "upgrade" not in (token.strip().lower()
                         for token in headers.get("Connection", "").split(",")):
        raise _not_websocket("the request must carry 'Connection: Upgrade'")
    if headers.get("Sec-WebSocket-Version", "").strip() != "13":
        raise _not_websocket("only WebSocket version 13 is supported (Sec-WebSocket-Version: 13)")
    key = headers.get("Sec-WebSocket-Key", "").strip()
    try:
        valid_key = len(base64.b64decode(key, validate=True)) == 16
    except binascii.Error:
        valid_key = False
    if not valid_key:
        raise _not_websocket("Sec-WebSocket-Key must be 16 bytes in base64")
    accept = base64.b64encode(hashlib.sha1(key.encode() + WS_GUID).digest()).decode()
    bits, no_takeover = ws_ext_parse(headers.get("Sec-WebSocket-Extensions"), isserver=True) \
        if compression_allowed else (0, False)
    return Handshake(accept, bits, no_takeover)


def _not_websocket(detail: str) -> Problem:
    return bad_request(f"not a WebSocket upgrade: {detail}")


def upgrade(request: web.Request, answer: Handshake, max_message_bytes: int,
            heartbeat_s: float) -> LeanWebSocket:
    """Write the 101 and make a ``LeanWebSocket`` the connection's protocol (the transport's
    callbacks go to it).

    The route goes on (first-frame authentication, start positions) and then returns an
    ``UpgradedResponse``, which detaches aiohttp's handler from the connection once the handler is
    done.
    """
    transport = request.transport
    if transport is None or transport.is_closing():
        raise ConnectionResetError("the client went away before the upgrade")
    socket = LeanWebSocket(transport, max_message_bytes, heartbeat_s, answer.deflate_bits,
                           answer.deflate_no_takeover)
    transport.set_protocol(socket)
    transport.write(answer.response_head())
    socket.start_heartbeat()
    return socket


class UpgradedResponse(web.StreamResponse):
    """What the subscribe route returns once the socket is a ``LeanWebSocket``'s: aiohttp must write
    nothing.

    Its ``prepare`` (aiohttp calls it after the handler returned) takes the transport away from
    aiohttp's request handler and tells it the connection is gone (``connection_lost``), so the
    handler stops, keeps no reference to the connection and never closes the transport. Done here,
    not at the upgrade: a server with ``handler_cancellation`` cancels the handler on
    ``connection_lost``.
    """

    def __init__(self) -> None:
        super().__init__(status=101, reason="Switching Protocols")
        self.force_close()

    async def prepare(self, request: web.BaseRequest) -> None:
        detach_handler(request)

    async def write_eof(self, data: bytes = b"") -> None:
        return None


def detach_handler(request: web.BaseRequest) -> None:
    """Make aiohttp's request handler forget an upgraded connection (see ``UpgradedResponse``);
    idempotent."""
    handler = request.protocol
    if handler.transport is not None:
        # first: the handler's force_close would close the transport it still knew
        handler.transport = None
        handler.connection_lost(None)


class LeanWebSocket(asyncio.Protocol):
    """The server side of one WebSocket connection, driven by the transport's callbacks."""

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


class ProtocolViolation(Exception):
    """The peer broke RFC 6455 (or a limit): the connection is closed with ``code``."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


def parse_frame(buffer: bytes, at: int, max_bytes: int) -> tuple[int, bytes, int] | None:
    """The client frame starting at ``at``: (first header byte, unmasked payload, end), or None if
    incomplete.

    A frame announcing more than ``max_bytes`` is refused (1009) before its payload is buffered.
    """
    available = len(buffer) - at
    if available < 2:
        return None
    first, second = buffer[at], buffer[at + 1]
    if first & 0x30:
        raise ProtocolViolation(CLOSE_PROTOCOL_ERROR, "reserved bits set")
    opcode = first & 0x0F
    if opcode not in DATA_OPCODES and opcode not in (OP_CONTINUATION, OP_CLOSE, OP_PING, OP_PONG):
        raise ProtocolViolation(CLOSE_PROTOCOL_ERROR, f"unknown opcode {opcode}")
    if not second & 0x80:
        raise ProtocolViolation(CLOSE_PROTOCOL_ERROR, "client frames must be masked")
    length, start = second & 0x7F, at + 2
    if opcode >= OP_CLOSE and (length > SHORT_MAX or not first & 0x80):
        raise ProtocolViolation(CLOSE_PROTOCOL_ERROR,
                                "control frames must be final and at most 125 bytes")
    if length == 126:
        if available < 4:
            return None
        length, start = _MEDIUM.unpack_from(buffer, start)[0], start + 2
    elif length == 127:
        if available < 10:
            return None
        length, start = _LONG.unpack_from(buffer, start)[0], start + 8
    if length > max_bytes:
        raise ProtocolViolation(CLOSE_TOO_BIG, f"frame over {max_bytes} bytes")
    end = start + 4 + length
    if end > len(buffer):
        return None
    return first, unmask(buffer[start:start + 4], buffer[start + 4:end]), end


def unmask(mask: bytes, data: bytes) -> bytes:
    """``data`` XOR the repeated 4-byte ``mask`` (as one big-integer XOR: C speed without a C
    module)."""
    size = len(data)
    if not size:
        return data
    key = (mask * (size // 4 + 1))[:size]
    return (int.from_bytes(data, "big") ^ int.from_bytes(key, "big")).to_bytes(size, "big")


def peer_close_code(payload: bytes) -> int:
    """The code of a client's close frame (1000 for none); an invalid frame is a violation (RFC 6455
    7.4)."""
    if not payload:
        return CLOSE_NORMAL
    if len(payload) == 1:
        raise ProtocolViolation(CLOSE_PROTOCOL_ERROR, "a close payload of one byte")
    code = int(_MEDIUM.unpack_from(payload)[0])
    if not (1000 <= code <= 1014 and code not in (1004, 1005, 1006)) and not 3000 <= code <= 4999:
        raise ProtocolViolation(CLOSE_PROTOCOL_ERROR, f"close code {code} may not be sent")
    try:
        payload[2:].decode()
    except UnicodeDecodeError:
        raise ProtocolViolation(CLOSE_INVALID_TEXT, "the close reason is not UTF-8") from None
    return code


def close_payload(code: int, reason: str = "") -> bytes:
    """A close frame's payload: the code, then the reason cut to what fits a control frame (whole
    characters)."""
    encoded = reason.encode()[:CLOSE_REASON_MAX_BYTES].decode(errors="ignore").encode()
    return _MEDIUM.pack(code) + encoded
