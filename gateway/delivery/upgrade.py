"""Taking a subscription's connection over from aiohttp: the upgrade request checked, deflate
negotiated as aiohttp does (``ws_ext_parse``/``ws_ext_gen``), the 101 written by hand and a
``LeanWebSocket`` made the transport's protocol."""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass

from aiohttp import web
from aiohttp.http_websocket import ws_ext_gen, ws_ext_parse

from gateway.delivery.websocket import LeanWebSocket
from gateway.errors import Problem, bad_request

WS_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


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
