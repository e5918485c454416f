"""Moving a WebSocket aiohttp opened onto a ``WebSocketWire``: aiohttp keeps the handshake (TLS,
proxies, headers, auth), the frames after it change hands. Written against aiohttp's internals."""

from __future__ import annotations

import functools
import os
import struct
from typing import Any

from aiohttp import ClientWebSocketResponse, WSMsgType

from streamgate_client.ws_wire import MAX_MESSAGE_BYTES, OnClosed, OnText, WebSocketWire

_CODE = struct.Struct("!H")
_OPCODES = {WSMsgType.TEXT: 0x1, WSMsgType.CLOSE: 0x8, WSMsgType.PING: 0x9}


def take_over(ws: ClientWebSocketResponse, on_text: OnText, on_closed: OnClosed, *,
              received: bytes = b"", max_message_bytes: int = MAX_MESSAGE_BYTES) -> WebSocketWire:
    """Move ``ws``'s connection from aiohttp's reader and writer to a ``WebSocketWire``.

    Messages aiohttp parsed that nobody read yet are replayed to the wire; a frame it holds in part
    (or a connection it failed) raises ConnectionResetError once the connection is dropped: open
    another. ``received``: the data messages already read through ``ws``, in order (the server's
    deflate window holds them). RuntimeError if aiohttp's internals are not as expected.
    """
    response, handler, queue, parser = _internals(ws)
    try:
        waiting = _waiting_messages(handler, parser, queue)
    except ConnectionResetError:
        response.close()  # aiohttp's parser is past repair: nothing more is read
        raise
    history = b"".join(_as_bytes(m.data) for m in waiting
                       if m.type in (WSMsgType.TEXT, WSMsgType.BINARY))
    transport = handler.transport
    wire = WebSocketWire(transport, on_text, on_closed, deflate_bits=ws.compress,
                         no_takeover=ws.client_notakeover, max_message_bytes=max_message_bytes,
                         received=received + history,
                         on_lost=functools.partial(_release, handler, response))
    if handler._paused:
        wire.pause_writing()
    transport.set_protocol(wire)
    transport.resume_reading()  # aiohttp pauses it while its queue is full
    for message in waiting:
        if (opcode := _OPCODES.get(message.type)) is not None:
            wire.feed_message(opcode, _payload_of(message))
    return wire


def _internals(ws: ClientWebSocketResponse) -> tuple[Any, Any, Any, Any]:
    """The response, connection protocol, message queue and frame parser behind ``ws``."""
    if ws.closed:
        raise ConnectionResetError("the WebSocket closed before it changed hands")
    try:
        response: Any = ws._response
        handler = response.connection.protocol
        heartbeat, queue, parser = ws._heartbeat, ws._reader, handler._payload_parser
        _used = (handler.transport, handler._paused, queue._buffer)
    except AttributeError as exc:
        raise RuntimeError(f"this aiohttp keeps a WebSocket's connection otherwise than "
                           f"take_over expects ({exc})") from exc
    if heartbeat is not None:
        raise ValueError("take_over needs a WebSocket opened without heartbeat")
    return response, handler, queue, parser


def _waiting_messages(handler: Any, parser: Any, queue: Any) -> list[Any]:
    """The messages in aiohttp's queue, known to be all it holds by a probe: a fragmented text
    message, whose parse fails or differs if the parser holds part of a frame or a message."""
    transport = handler.transport
    if parser is None or transport is None or transport.is_closing():
        raise ConnectionResetError("aiohttp failed or closed the WebSocket before it changed hands")
    nonce = os.urandom(8).hex().encode()
    parser.feed_data(bytes((0x01, len(nonce))) + nonce + b"\x80\x00")
    waiting = [message for message, _ in queue._buffer]
    queue._buffer.clear()
    if not waiting or waiting[-1].type is not WSMsgType.TEXT or \
            _as_bytes(waiting[-1].data) != nonce:
        raise ConnectionResetError("aiohttp held part of a frame when the WebSocket changed hands")
    return waiting[:-1]


def _payload_of(message: Any) -> bytes:
    if message.type is WSMsgType.CLOSE:
        return _CODE.pack(message.data) + (message.extra or "").encode()
    return _as_bytes(message.data)


def _as_bytes(data: str | bytes) -> bytes:
    return data.encode() if isinstance(data, str) else data


def _release(handler: Any, response: Any, exc: Exception | None) -> None:
    """What aiohttp does when the connection ends, then its release (never to be reused)."""
    handler.connection_lost(exc)
    response.close()
