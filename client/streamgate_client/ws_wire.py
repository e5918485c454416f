"""A lean client side of RFC 6455: the frames of one WebSocket connection parsed in its transport's
callbacks and handed on synchronously, client frames masked and written straight to the transport
(client.ws_takeover gives it a connection aiohttp opened)."""

from __future__ import annotations

import asyncio
import random
import struct
import zlib
from collections.abc import Callable
from typing import Any

try:
    from aiohttp._websocket.helpers import websocket_mask
except ImportError:  # aiohttp before 3.11
    from aiohttp.http_websocket import (  # type: ignore[attr-defined,no-redef]
        _websocket_mask as websocket_mask,
    )

CLOSE_TIMEOUT_S = 5.0  # a close the peer does not answer within this drops the connection
MAX_MESSAGE_BYTES = 4 << 20  # aiohttp's own default for ws_connect's max_msg_size
OP_CONTINUATION, OP_TEXT, OP_BINARY, OP_CLOSE, OP_PING, OP_PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA
CLOSE_NORMAL, CLOSE_PROTOCOL_ERROR, CLOSE_INVALID_DATA, CLOSE_TOO_BIG = 1000, 1002, 1007, 1009
CLOSE_NO_STATUS, CLOSE_ABNORMAL = 1005, 1006
DEFLATE_TAIL = b"\x00\x00\xff\xff"
_WINDOW_BYTES = 1 << 15
_CODE = struct.Struct("!H")
_HEADS = (struct.Struct("!BBI").pack, struct.Struct("!BBHI").pack, struct.Struct("!BBQI").pack)
_LENGTHS = {126: (struct.Struct("!H").unpack_from, 4), 127: (struct.Struct("!Q").unpack_from, 10)}
_mask_bits = random.Random().getrandbits

OnText = Callable[[bytes], None]
OnClosed = Callable[[int, str], None]


class WireViolation(Exception):
    """The server broke RFC 6455 (or the size limit): the connection closes with ``code``."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code, self.reason = code, reason


def client_frame(first: int, payload: bytes) -> bytes:
    """A masked client frame: ``first`` (FIN, RSV and opcode bits), a fresh mask, the payload."""
    size, bits = len(payload), _mask_bits(32)
    if size < 126:
        head = _HEADS[0](first, 0x80 | size, bits)
    elif size < 65536:
        head = _HEADS[1](first, 0xFE, size, bits)
    else:
        head = _HEADS[2](first, 0xFF, size, bits)
    masked = bytearray(payload)
    websocket_mask(head[-4:], masked)
    return head + masked


class WebSocketWire(asyncio.Protocol):
    """The client side of one WebSocket connection, driven by its transport's callbacks: each text
    message goes to ``on_text`` as it completes (no task, no queue), ``on_closed`` hears the close
    code once. ``received``: data messages already read through aiohttp, which the server's deflate
    window (context takeover) holds."""

    def __init__(self, transport: asyncio.Transport, on_text: OnText, on_closed: OnClosed, *,
                 deflate_bits: int = 0, no_takeover: bool = False,
                 max_message_bytes: int = MAX_MESSAGE_BYTES, received: bytes = b"",
                 on_lost: Callable[[Exception | None], None] | None = None) -> None:
        self.transport, self._on_text, self._on_closed, self._on_lost = (
            transport, on_text, on_closed, on_lost)
        self._max_bytes = max_message_bytes
        self._held: list[bytes] = []  # a frame not complete yet, and the bytes it needs
        self._held_bytes = self._needed = 0
        self._fragments: list[bytes] | None = None
        self._fragment_first = self._fragment_bytes = 0
        self._close_sent = self._stopped = self._ended = False
        self._lost = asyncio.get_running_loop().create_future()
        self._drain: asyncio.Future[None] | None = None
        self._deflate_bits, self._no_takeover = deflate_bits, no_takeover
        self._compressor: Any = None  # zlib's types are private; made on the first send
        self._decompressor = zlib.decompressobj(-15, zdict=received[-_WINDOW_BYTES:]) \
            if received else zlib.decompressobj(-15)

    @property
    def writing_paused(self) -> bool:
        """Whether the transport's buffer is full (``drain`` waits until it is not)."""
        return self._drain is not None

    async def drain(self) -> None:
        """Until the transport takes writes again; ConnectionResetError if it closes first."""
        if self._drain is not None:
            await asyncio.shield(self._drain)

    def send_text(self, payload: bytes) -> None:
        """One text message as one frame, deflated when negotiated; ConnectionResetError once
        closing."""
        if self._close_sent or self._stopped or self.transport.is_closing():
            raise ConnectionResetError("the WebSocket is closing")
        if not self._deflate_bits:
            self.transport.write(client_frame(0x81, payload))
            return
        if self._compressor is None:
            self._compressor = zlib.compressobj(zlib.Z_BEST_SPEED, zlib.DEFLATED,
                                                -self._deflate_bits)
        body = self._compressor.compress(payload) + self._compressor.flush(
            zlib.Z_FULL_FLUSH if self._no_takeover else zlib.Z_SYNC_FLUSH)
        self.transport.write(client_frame(0xC1, body.removesuffix(DEFLATE_TAIL)))

    async def close(self, code: int = CLOSE_NORMAL, reason: str = "",
                    timeout_s: float = CLOSE_TIMEOUT_S) -> None:
        """Send a close frame and wait for the connection's end (the peer's close ends it), at
        most ``timeout_s``: then it is dropped."""
        self._send_close(code, reason)
        try:
            await asyncio.wait_for(asyncio.shield(self._lost), timeout_s)
        except TimeoutError:
            self.transport.abort()
            await self._lost

    def _send_close(self, code: int, reason: str = "") -> None:
        if not self._close_sent:
            self._close_sent = True
            # the reason cut to what a control frame holds, in whole characters
            reason_bytes = reason.encode()[:123].decode(errors="ignore").encode()
            self._write_control(OP_CLOSE, _CODE.pack(code) + reason_bytes)

    def _write_control(self, opcode: int, payload: bytes) -> None:
        if not self.transport.is_closing():
            self.transport.write(client_frame(0x80 | opcode, payload))

    def feed_message(self, opcode: int, payload: bytes) -> None:
        """A whole unfragmented message parsed before this wire took the connection over."""
        try:
            if opcode == OP_TEXT:
                self._check_size(len(payload))
                self._text(payload)
            elif opcode >= OP_CLOSE:
                self._on_control(opcode, payload, 0x80)
        except WireViolation as violation:
            self._fail(violation)

    def _end(self, code: int, reason: str) -> None:
        if not self._ended:
            self._ended = True
            self._on_closed(code, reason)

    # --- asyncio.Protocol -------------------------------------------------------------------------
    def data_received(self, data: bytes) -> None:
        if self._held:
            self._held.append(data)
            self._held_bytes += len(data)
            if self._held_bytes < self._needed:
                return
            data = b"".join(self._held)
            self._held.clear()
        try:
            self._parse(data)
        except WireViolation as violation:
            self._fail(violation)

    def _fail(self, violation: WireViolation) -> None:
        """Close with the violation's code and read nothing more from this peer."""
        self._held.clear()
        self._stopped = True
        self._send_close(violation.code, violation.reason)
        self._end(violation.code, violation.reason)
        self.transport.close()

    def eof_received(self) -> bool:
        return False  # the transport closes itself

    def pause_writing(self) -> None:
        if self._drain is None:
            self._drain = self._lost.get_loop().create_future()

    def resume_writing(self) -> None:
        drain, self._drain = self._drain, None
        if drain is not None and not drain.done():
            drain.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        self._held.clear()
        self._end(CLOSE_ABNORMAL, f"connection lost: {exc}" if exc else "connection lost")
        drain, self._drain = self._drain, None
        if drain is not None and not drain.done():
            drain.set_exception(ConnectionResetError("the WebSocket closed"))
            drain.exception()  # retrieved: nobody may be waiting
        if not self._lost.done():
            self._lost.set_result(None)
        if self._on_lost is not None:
            self._on_lost(exc)

    # --- parsing ----------------------------------------------------------------------------------
    def _parse(self, buffer: bytes) -> None:
        """Dispatch every complete frame in ``buffer``; hold the rest with the bytes it needs."""
        at, size, needed = 0, len(buffer), 2
        while size - at >= 2 and not self._stopped:
            first, length = buffer[at], buffer[at + 1]
            if length & 0x80:
                raise WireViolation(CLOSE_PROTOCOL_ERROR, "a masked server frame")
            start = at + 2
            if length > 125:
                unpack, head = _LENGTHS[length]
                if size - at < head:
                    needed = head
                    break
                length, start = unpack(buffer, start)[0], at + head
            if length > self._max_bytes:
                raise WireViolation(CLOSE_TOO_BIG, f"a frame over {self._max_bytes} bytes")
            if start + length > size:
                needed = start + length - at
                break
            payload, at = buffer[start:start + length], start + length
            if first == 0x81:  # a whole plain text message: the common case
                self._text(payload)
            else:
                self._on_frame(first, payload)
        if at < size and not self._stopped:
            self._held.append(buffer[at:] if at else buffer)
            self._held_bytes, self._needed = size - at, needed

    def _on_frame(self, first: int, payload: bytes) -> None:
        opcode, final = first & 0x0F, first & 0x80
        if first & 0x30 or (first & 0x40 and (not self._deflate_bits or opcode == OP_CONTINUATION
                                               or opcode >= OP_CLOSE)):
            raise WireViolation(CLOSE_PROTOCOL_ERROR, "reserved bits set")
        if opcode >= OP_CLOSE:
            self._on_control(opcode, payload, final)
        elif opcode == OP_CONTINUATION:
            if self._fragments is None:
                raise WireViolation(CLOSE_PROTOCOL_ERROR, "a continuation without a message")
            self._fragments.append(payload)
            self._fragment_bytes += len(payload)
            self._check_size(self._fragment_bytes)
            if final:
                fragments, self._fragments = self._fragments, None
                self._message(self._fragment_first, b"".join(fragments))
        elif opcode not in (OP_TEXT, OP_BINARY):
            raise WireViolation(CLOSE_PROTOCOL_ERROR, f"unknown opcode {opcode}")
        elif self._fragments is not None:
            raise WireViolation(CLOSE_PROTOCOL_ERROR, "a new message before the last one ended")
        elif final:
            self._message(first, payload)
        else:
            self._fragments, self._fragment_first = [payload], first
            self._fragment_bytes = len(payload)

    def _on_control(self, opcode: int, payload: bytes, final: int) -> None:
        if not final or len(payload) > 125:
            raise WireViolation(CLOSE_PROTOCOL_ERROR, "a fragmented or long control frame")
        if opcode == OP_PING:
            self._write_control(OP_PONG, payload)
        elif opcode == OP_CLOSE:
            if len(payload) == 1:
                raise WireViolation(CLOSE_PROTOCOL_ERROR, "a close payload of one byte")
            code = _CODE.unpack_from(payload)[0] if payload else CLOSE_NO_STATUS
            self._peer_closed(code, payload[2:].decode(errors="replace"))
        elif opcode != OP_PONG:
            raise WireViolation(CLOSE_PROTOCOL_ERROR, f"unknown opcode {opcode}")

    def _peer_closed(self, code: int, reason: str) -> None:
        """Answer the server's close with its code, tell the owner, end the connection."""
        self._stopped = True
        self._send_close(CLOSE_NORMAL if code == CLOSE_NO_STATUS else code)
        self._end(code, reason)
        self.transport.close()

    def _message(self, first: int, payload: bytes) -> None:
        if first & 0x40:
            payload = self._inflate(payload)
        if first & 0x0F == OP_TEXT:
            self._text(payload)
        # binary messages have no taker here

    def _text(self, payload: bytes) -> None:
        if not payload.isascii():
            try:
                payload.decode()
            except UnicodeDecodeError:
                raise WireViolation(CLOSE_INVALID_DATA, "a text message not UTF-8") from None
        self._on_text(payload)

    def _inflate(self, payload: bytes) -> bytes:
        try:
            data = self._decompressor.decompress(payload + DEFLATE_TAIL, self._max_bytes + 1)
        except zlib.error:
            raise WireViolation(CLOSE_INVALID_DATA, "an undecodable deflated message") from None
        self._check_size(len(data))
        return data

    def _check_size(self, size: int) -> None:
        if size > self._max_bytes:
            raise WireViolation(CLOSE_TOO_BIG, f"a message over {self._max_bytes} bytes")

