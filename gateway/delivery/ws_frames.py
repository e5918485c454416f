"""RFC 6455 client frames as the lean WebSocket reads them: one frame parsed and unmasked, close
payloads, and the violations that close a connection with their code."""

from __future__ import annotations

import struct

from gateway._speedups import SHORT_MAX

OP_CONTINUATION, OP_TEXT, OP_BINARY, OP_CLOSE, OP_PING, OP_PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA
DATA_OPCODES = frozenset((OP_TEXT, OP_BINARY))
CLOSE_NORMAL, CLOSE_PROTOCOL_ERROR, CLOSE_INVALID_TEXT, CLOSE_TOO_BIG = 1000, 1002, 1007, 1009
CLOSE_REASON_MAX_BYTES = 123
_MEDIUM, _LONG = struct.Struct("!H"), struct.Struct("!Q")


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
