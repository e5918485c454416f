"""The Python reference of ``gateway._speedups._frames``' text framing: payloads as consecutive
unmasked WebSocket text frames (same bytes, slower)."""

from __future__ import annotations

import struct
from collections.abc import Sequence

TEXT_FIN = 0x81
SHORT_MAX = 125  # the longest length the header's second byte holds (and a control frame's limit)
MEDIUM_MAX = 0xFFFF


def frame_header(first: int, length: int) -> bytes:
    """An unmasked (server to client) frame header with first byte ``first`` for ``length`` payload
    bytes."""
    if length <= SHORT_MAX:
        return bytes((first, length))
    if length <= MEDIUM_MAX:
        return struct.pack("!BBH", first, 126, length)
    return struct.pack("!BBQ", first, 127, length)


def text_frames(payloads: Sequence[bytes]) -> bytes:
    """Several payloads as consecutive WebSocket text frames: a header and the payload, frame by
    frame."""
    parts: list[bytes] = []
    for payload in payloads:
        parts.append(frame_header(TEXT_FIN, len(payload)))
        parts.append(payload)
    return b"".join(parts)
