"""The lean WebSocket (RFC 6455 + RFC 7692) of subscriptions: frames, handshake, connection and a
real aiohttp peer.

Client frames are built here byte by byte (masked, as a client must) and server frames are parsed
here, so the module is checked against the RFCs rather than against itself. ``FakeTransport`` drives
``LeanWebSocket`` like an asyncio transport does; the last tests put it behind a real aiohttp server
and talk to it with aiohttp's client.
"""

from __future__ import annotations

import asyncio
import random
import struct
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import WSMsgType, web
from aiohttp.test_utils import TestClient
from multidict import CIMultiDict

from gateway.delivery import websocket
from gateway.delivery.upgrade import Handshake, UpgradedResponse, handshake, upgrade
from gateway.delivery.websocket import LeanWebSocket
from gateway.delivery.ws_frames import (
    CLOSE_INVALID_TEXT,
    CLOSE_PROTOCOL_ERROR,
    CLOSE_TOO_BIG,
    ProtocolViolation,
    close_payload,
    parse_frame,
    peer_close_code,
    unmask,
)
from gateway.errors import Problem, problem_for

OP_CONTINUATION, OP_TEXT, OP_BINARY, OP_CLOSE, OP_PING, OP_PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA
RSV1, RSV2, RSV3 = 0x40, 0x20, 0x10
TAIL = b"\x00\x00\xff\xff"
MASK = b"\x37\xfa\x21\x3d"
# RFC 6455 section 1.3
RFC_KEY, RFC_ACCEPT = "dGhlIHNhbXBsZSBub25jZQ==", "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="


# --- frames on the wire, built and parsed independently of the module -----------------------------
def xor(mask: bytes, data: bytes) -> bytes:
    return bytes(byte ^ mask[i % 4] for i, byte in enumerate(data))


def client_frame(
    opcode: int, payload: bytes = b"", *, fin: bool = True, rsv: int = 0, masked: bool = True,
    mask: bytes = MASK
) -> bytes:
    """A client frame: masked, with the shortest length encoding (RFC 6455 section 5.2)."""
    first = (0x80 if fin else 0) | rsv | opcode
    mask_bit = 0x80 if masked else 0
    size = len(payload)
    if size <= 125:
        header = bytes((first, mask_bit | size))
    elif size <= 0xFFFF:
        header = struct.pack("!BBH", first, mask_bit | 126, size)
    else:
        header = struct.pack("!BBQ", first, mask_bit | 127, size)
    return header + mask + xor(mask, payload) if masked else header + payload


def client_close(code: int, reason: bytes = b"") -> bytes:
    return client_frame(OP_CLOSE, struct.pack("!H", code) + reason)


def server_frames(data: bytes) -> list[tuple[int, bytes]]:
    """(first header byte, payload) of each server frame in ``data``: unmasked, shortest length
    form, whole."""
    frames: list[tuple[int, bytes]] = []
    at = 0
    while at < len(data):
        first, second = data[at], data[at + 1]
        assert not second & 0x80, "server frames are never masked"
        size, at = second & 0x7F, at + 2
        if size == 126:
            size, at = struct.unpack_from("!H", data, at)[0], at + 2
            assert size > 125, "the 16-bit length is for 126..65535 bytes"
        elif size == 127:
            size, at = struct.unpack_from("!Q", data, at)[0], at + 8
            assert size > 0xFFFF, "the 64-bit length is for more than 65535 bytes"
        assert at + size <= len(data), "a server frame was cut"
        frames.append((first, data[at:at + size]))
        at += size
    return frames


def close_of(payload: bytes) -> tuple[int, str]:
    return struct.unpack_from("!H", payload)[0], payload[2:].decode()


def deflate(compressor: Any, payload: bytes) -> bytes:
    """A message body as a permessage-deflate client sends it: sync-flushed, the 00 00 ff ff tail
    removed."""
    body: bytes = compressor.compress(payload) + compressor.flush(zlib.Z_SYNC_FLUSH)
    assert body.endswith(TAIL)
    return body[:-4]


def inflate(decompressor: Any, body: bytes) -> bytes:
    data: bytes = decompressor.decompress(body + TAIL)
    return data


# --- a transport as asyncio drives a protocol -----------------------------------------------------
class FakeTransport(asyncio.Transport):
    """Records writes; close and abort report connection_lost from the loop, as asyncio's transports
    do."""

    def __init__(self) -> None:
        super().__init__()
        self.protocol: asyncio.Protocol | None = None
        self.writes: list[bytes] = []
        self.reading = True
        # bytes the client sent while reading was paused (the kernel keeps them)
        self.held: list[bytes] = []
        self.ended_by: str | None = None  # "close" or "abort"
        self.aborts = 0
        self.buffer_full = False  # the next write crosses the high-water mark
        self.writing_paused = False
        self.answer_pings = False  # the peer answers each server ping with a pong at once

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        assert isinstance(protocol, asyncio.Protocol)
        self.protocol = protocol

    def get_protocol(self) -> asyncio.BaseProtocol:
        assert self.protocol is not None
        return self.protocol

    def write(self, data: bytes | bytearray | memoryview[Any]) -> None:
        self.writes.append(bytes(data))
        if self.answer_pings and data[:1] == b"\x89":
            asyncio.get_running_loop().call_soon(self.feed, client_frame(OP_PONG, bytes(data[2:])))
        if self.buffer_full and not self.writing_paused:
            self.writing_paused = True
            self.get_protocol().pause_writing()

    def drain(self) -> None:
        """The socket took the buffered bytes: below the low-water mark again."""
        self.buffer_full = False
        if self.writing_paused:
            self.writing_paused = False
            self.get_protocol().resume_writing()

    def is_closing(self) -> bool:
        return self.ended_by is not None

    def close(self) -> None:
        self._end("close")

    def abort(self) -> None:
        self.aborts += 1
        self._end("abort")

    def _end(self, how: str) -> None:
        if self.ended_by is None:
            self.ended_by = how
            asyncio.get_running_loop().call_soon(self.get_protocol().connection_lost, None)

    def is_reading(self) -> bool:
        return self.reading

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        if not self.reading:
            self.reading = True
            if self.held:
                asyncio.get_running_loop().call_soon(self._deliver_held)

    def _deliver_held(self) -> None:
        held, self.held = b"".join(self.held), []
        if held:
            self.feed(held)

    def feed(self, data: bytes) -> None:
        """Bytes from the client: to the protocol while reading, else held; nothing once closing."""
        if self.ended_by is not None:
            return
        if not self.reading:
            self.held.append(data)
            return
        protocol = self.protocol
        assert protocol is not None
        protocol.data_received(data)

    def frames(self) -> list[tuple[int, bytes]]:
        return server_frames(b"".join(self.writes))

    def close_frames(self) -> list[tuple[int, str]]:
        return [close_of(payload) for first, payload in self.frames() if first == 0x80 | OP_CLOSE]


@dataclass
class Recorder:
    """SocketEvents that record what arrives; ``then`` runs after each message (e.g. to pause
    reading)."""

    received: list[str | bytes] = field(default_factory=list)
    closed: int = 0
    then: Callable[[str | bytes], None] | None = None

    def on_text(self, text: str) -> None:
        self._got(text)

    def on_binary(self, data: bytes) -> None:
        self._got(data)

    def _got(self, message: str | bytes) -> None:
        self.received.append(message)
        if self.then is not None:
            self.then(message)

    def on_closed(self) -> None:
        self.closed += 1


def make_socket(max_bytes: int = 1024, heartbeat_s: float = 0.0, deflate_bits: int = 0,
                no_takeover: bool = False) -> tuple[LeanWebSocket, FakeTransport]:
    transport = FakeTransport()
    socket = LeanWebSocket(transport, max_bytes, heartbeat_s, deflate_bits, no_takeover)
    transport.set_protocol(socket)
    return socket, transport


def served(max_bytes: int = 1024, deflate_bits: int = 0,
           no_takeover: bool = False) -> tuple[LeanWebSocket, FakeTransport, Recorder]:
    socket, transport = make_socket(max_bytes, deflate_bits=deflate_bits, no_takeover=no_takeover)
    events = Recorder()
    socket.serve(events)
    return socket, transport, events


async def settle() -> None:
    for _ in range(10):
        await asyncio.sleep(0)


async def eventually(condition: Callable[[], bool], timeout_s: float = 1.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not condition():
        assert loop.time() < deadline, "the condition did not hold in time"
        await asyncio.sleep(0.005)


# --- unmask ---------------------------------------------------------------------------------------
MASKS = [b"\x00\x00\x00\x00", MASK, b"\xff\xff\xff\xff", b"\x00\x80\x01\xfe"]


@pytest.mark.parametrize("mask", MASKS)
def test_unmask_is_a_per_byte_xor_for_every_length_up_to_70(mask: bytes) -> None:
    for size in range(71):
        for data in (
            bytes((i * 37 + 11) % 256 for i in range(size)), bytes(size), (mask * 18)[:size]
        ):
            assert unmask(mask, data) == xor(mask, data), (size, data)
            assert unmask(mask, xor(mask, data)) == data, (size, data)


def test_unmask_round_trips_a_70000_byte_payload() -> None:
    data = random.Random(6455).randbytes(70_000)
    masked = xor(MASK, data)
    assert unmask(MASK, masked) == data
    assert unmask(MASK, data) == masked


# --- parse_frame ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("size", "header_size"),
    [(0, 6), (1, 6), (125, 6), (126, 8), (65535, 8), (65536, 14), (70_000, 14)],
)
def test_parse_frame_reads_7_16_and_64_bit_lengths(size: int, header_size: int) -> None:
    payload = (bytes(range(256)) * (size // 256 + 1))[:size]
    frame = client_frame(OP_BINARY, payload)
    assert len(frame) == header_size + size
    assert parse_frame(frame, 0, 100_000) == (0x82, payload, len(frame))


def test_parse_frame_reads_from_offset_and_returns_its_end() -> None:
    first, second = (
        client_frame(OP_TEXT, b"one", fin=False), client_frame(OP_CONTINUATION, b"two" * 50)
    )
    buffer = b"junk" + first + second
    parsed = parse_frame(buffer, 4, 1024)
    assert parsed == (0x01, b"one", 4 + len(first))
    assert parse_frame(buffer, parsed[2], 1024) == (0x80, b"two" * 50, len(buffer))


@pytest.mark.parametrize("size", [0, 5, 125, 126, 300])
def test_parse_frame_returns_none_for_every_incomplete_prefix(size: int) -> None:
    frame = client_frame(OP_TEXT, b"x" * size)
    for cut in range(len(frame)):
        assert parse_frame(frame[:cut], 0, 1024) is None, cut
        assert parse_frame(b"ab" + frame[:cut], 2, 1024) is None, cut


def test_parse_frame_returns_none_for_a_cut_64_bit_frame() -> None:
    frame = client_frame(OP_BINARY, bytes(70_000))
    for cut in [*range(15), 1000, len(frame) - 1]:
        assert parse_frame(frame[:cut], 0, 100_000) is None, cut


@pytest.mark.parametrize("frame", [
    pytest.param(client_frame(OP_TEXT, b"x", rsv=RSV2), id="rsv2"),
    pytest.param(client_frame(OP_TEXT, b"x", rsv=RSV3), id="rsv3"),
    pytest.param(client_frame(0x3, b"x"), id="opcode-3"),
    pytest.param(client_frame(0x7, b"x"), id="opcode-7"),
    pytest.param(client_frame(0xB, b"x"), id="opcode-B"),
    pytest.param(client_frame(0xF, b""), id="opcode-F"),
    pytest.param(client_frame(OP_TEXT, b"x", masked=False), id="unmasked"),
    pytest.param(client_frame(OP_PING, b"x" * 126), id="ping-over-125"),
    pytest.param(client_frame(OP_CLOSE, b"\x03\xe8" + b"x" * 124), id="close-over-125"),
    pytest.param(client_frame(OP_PONG, b"x", fin=False), id="fragmented-pong"),
])
def test_parse_frame_refuses_protocol_errors_with_1002(frame: bytes) -> None:
    with pytest.raises(ProtocolViolation) as refused:
        parse_frame(frame, 0, 1024)
    assert refused.value.code == CLOSE_PROTOCOL_ERROR


@pytest.mark.parametrize("size", [101, 300, 70_000])
def test_parse_frame_refuses_oversized_frame_before_payload(size: int) -> None:
    frame = client_frame(OP_BINARY, bytes(size))
    header_only = frame[:len(frame) - size - 4]
    with pytest.raises(ProtocolViolation) as refused:
        parse_frame(header_only, 0, size - 1)
    assert refused.value.code == CLOSE_TOO_BIG
    assert parse_frame(frame, 0, size) is not None, "exactly max_bytes is allowed"


def test_parse_frame_leaves_rsv1_to_the_connection() -> None:
    assert parse_frame(client_frame(OP_TEXT, b"x", rsv=RSV1), 0, 1024) == (0xC1, b"x", 7)


# --- close_payload --------------------------------------------------------------------------------
def test_close_payload_is_the_code_then_the_reason() -> None:
    assert close_payload(1000) == b"\x03\xe8"
    assert close_payload(4008, "slow") == b"\x0f\xa8slow"


@pytest.mark.parametrize(("reason", "kept"), [
    ("a" * 200, "a" * 123),
    ("é" * 100, "é" * 61),  # 2-byte characters: 122 bytes
    ("🙂" * 40, "🙂" * 30),  # 4-byte characters: 120 bytes
    ("x" + "€" * 50, "x" + "€" * 40),  # 121 bytes: the 41st euro would end at byte 124
    ("xx" + "€" * 50, "xx" + "€" * 40),  # 122 bytes
    ("xxx" + "€" * 50, "xxx" + "€" * 40),  # exactly 123 bytes
    ("é" * 61, "é" * 61),  # fits as it is
])
def test_close_payload_cuts_reason_at_character_boundary(reason: str, kept: str) -> None:
    payload = close_payload(4400, reason)
    assert len(payload) <= 125, "a control frame carries at most 125 bytes"
    assert close_of(payload) == (4400, kept)


# --- handshake ------------------------------------------------------------------------------------
def upgrade_headers(changes: dict[str, str | None] | None = None) -> CIMultiDict[str]:
    headers = CIMultiDict({"Host": "gateway.test", "Upgrade": "websocket", "Connection": "Upgrade",
                           "Sec-WebSocket-Key": RFC_KEY, "Sec-WebSocket-Version": "13"})
    for name, value in (changes or {}).items():
        headers.popall(name, None)
        if value is not None:
            headers[name] = value
    return headers


def test_handshake_answers_the_rfc_6455_example_key() -> None:
    answer = handshake(upgrade_headers(), True)
    assert answer == Handshake(RFC_ACCEPT, 0, False)
    assert answer.response_head() == (
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
        b"Connection: Upgrade\r\nSec-WebSocket-Accept: " + RFC_ACCEPT.encode() + b"\r\n\r\n"
    )


def test_handshake_takes_any_case_headers_and_connection_tokens() -> None:
    headers = upgrade_headers({"Upgrade": "WebSocket", "Connection": "keep-alive, upgrade"})
    assert handshake(headers, False).accept == RFC_ACCEPT


@pytest.mark.parametrize("changes", [
    pytest.param({"Upgrade": None}, id="no-upgrade"),
    pytest.param({"Upgrade": "h2c"}, id="upgrade-h2c"),
    pytest.param({"Connection": None}, id="no-connection"),
    pytest.param({"Connection": "keep-alive"}, id="connection-keep-alive"),
    pytest.param({"Sec-WebSocket-Version": None}, id="no-version"),
    pytest.param({"Sec-WebSocket-Version": "8"}, id="version-8"),
    pytest.param({"Sec-WebSocket-Key": None}, id="no-key"),
    pytest.param({"Sec-WebSocket-Key": "not base64!"}, id="key-not-base64"),
    pytest.param({"Sec-WebSocket-Key": "AAAAAAAAAAAAAAAAAAAA"}, id="key-15-bytes"),
    pytest.param({"Sec-WebSocket-Key": "AAAAAAAAAAAAAAAAAAAAAAAA"}, id="key-18-bytes"),
])
def test_handshake_refuses_non_upgrade_request_with_400(changes: dict[str, str | None]) -> None:
    with pytest.raises(Problem) as refused:
        handshake(upgrade_headers(changes), True)
    assert refused.value.status == 400
    assert "WebSocket" in refused.value.detail


def test_handshake_negotiates_deflate_when_offered_and_allowed() -> None:
    answer = handshake(
        upgrade_headers({"Sec-WebSocket-Extensions": "permessage-deflate; client_max_window_bits"}),
        True,
    )
    assert (answer.deflate_bits, answer.deflate_no_takeover) == (15, False)
    assert b"\r\nSec-WebSocket-Extensions: permessage-deflate\r\n" in answer.response_head()


def test_handshake_ignores_deflate_offer_when_not_allowed() -> None:
    answer = handshake(upgrade_headers({"Sec-WebSocket-Extensions": "permessage-deflate"}), False)
    assert answer == Handshake(RFC_ACCEPT, 0, False)
    assert b"Sec-WebSocket-Extensions" not in answer.response_head()


@pytest.mark.parametrize(
    "offer", [None, "x-webkit-deflate-frame", "permessage-deflate; server_max_window_bits=8"]
)
def test_handshake_without_usable_deflate_offer_has_no_extension(offer: str | None) -> None:
    answer = handshake(upgrade_headers({"Sec-WebSocket-Extensions": offer}), True)
    assert answer.deflate_bits == 0
    assert b"Sec-WebSocket-Extensions" not in answer.response_head()


def test_handshake_accepts_server_no_context_takeover() -> None:
    answer = handshake(
        upgrade_headers(
            {"Sec-WebSocket-Extensions": "permessage-deflate; server_no_context_takeover"}
        ),
        True,
    )
    assert (answer.deflate_bits, answer.deflate_no_takeover) == (15, True)
    assert b"\r\nSec-WebSocket-Extensions: permessage-deflate; server_no_context_takeover\r\n" in \
        answer.response_head()


def test_handshake_accepts_server_max_window_bits() -> None:
    answer = handshake(
        upgrade_headers(
            {"Sec-WebSocket-Extensions": "permessage-deflate; server_max_window_bits=10"}
        ),
        True,
    )
    assert (answer.deflate_bits, answer.deflate_no_takeover) == (10, False)
    assert b"\r\nSec-WebSocket-Extensions: permessage-deflate; server_max_window_bits=10\r\n" in \
        answer.response_head()


# --- receiving ------------------------------------------------------------------------------------
async def test_a_text_message_reaches_on_text() -> None:
    _, transport, events = served()
    transport.feed(client_frame(OP_TEXT, "héllo 🙂".encode()))
    assert events.received == ["héllo 🙂"]
    assert transport.writes == []


async def test_a_binary_message_reaches_on_binary() -> None:
    _, transport, events = served()
    transport.feed(client_frame(OP_BINARY, b"\x00\xff\xfe") + client_frame(OP_BINARY, b""))
    assert events.received == [b"\x00\xff\xfe", b""]


async def test_fragmented_message_around_ping_arrives_whole() -> None:
    _, transport, events = served()
    transport.feed(
        client_frame(OP_TEXT, b"hel", fin=False) + client_frame(OP_PING, b"are you there")
    )
    assert events.received == []
    assert transport.frames() == [(0x8A, b"are you there")], (
        "a pong with the ping's payload, at once"
    )
    transport.feed(
        client_frame(OP_CONTINUATION, b"lo ", fin=False) + client_frame(OP_CONTINUATION, b"world")
    )
    assert events.received == ["hello world"]
    assert transport.frames() == [(0x8A, b"are you there")]


async def test_a_pong_is_taken_silently() -> None:
    _, transport, events = served()
    transport.feed(client_frame(OP_PONG, b"unsolicited"))
    assert (events.received, transport.writes, transport.ended_by) == ([], [], None)


SPLIT_STREAM = (
    client_frame(OP_TEXT, b"first")
    + client_frame(OP_BINARY, bytes(range(256)) + bytes(44))
    + client_frame(OP_PING, b"p")
    + client_frame(OP_TEXT, b"a\xc3", fin=False)  # "ü" split in two
    + client_frame(OP_CONTINUATION, b"\xbcz")
    + client_close(1000)
)
SPLIT_RECEIVED: list[str | bytes] = ["first", bytes(range(256)) + bytes(44), "aüz"]


async def test_frames_split_at_every_byte_are_reassembled() -> None:
    for cut in range(1, len(SPLIT_STREAM)):
        _, transport, events = served()
        transport.feed(SPLIT_STREAM[:cut])
        transport.feed(SPLIT_STREAM[cut:])
        assert events.received == SPLIT_RECEIVED, cut
        assert transport.frames() == [(0x8A, b"p"), (0x88, b"\x03\xe8")], cut
    _, transport, events = served()
    for at in range(len(SPLIT_STREAM)):
        transport.feed(SPLIT_STREAM[at:at + 1])
    assert events.received == SPLIT_RECEIVED
    assert transport.frames() == [(0x8A, b"p"), (0x88, b"\x03\xe8")]
    await settle()


@pytest.mark.parametrize(("close", "answered"), [
    pytest.param(client_close(1000), 1000, id="1000"),
    pytest.param(client_close(1001, b"going away"), 1001, id="1001-with-reason"),
    pytest.param(client_close(4000, b"bye"), 4000, id="4000"),
    pytest.param(client_frame(OP_CLOSE), 1000, id="no-status"),
])
async def test_client_close_is_answered_with_same_code(close: bytes, answered: int) -> None:
    socket, transport, events = served()
    transport.feed(close)
    assert transport.close_frames() == [(answered, "")]
    assert transport.ended_by == "close"
    await socket.wait_closed()
    assert socket.closed
    assert events.closed == 1


async def test_on_closed_is_called_exactly_once() -> None:
    socket, transport, events = served()
    transport.feed(client_close(1000))
    await settle()
    socket.abort()
    socket.close(1000)
    socket.connection_lost(None)
    transport.close()
    await settle()
    assert events.closed == 1
    assert transport.close_frames() == [(1000, "")], "nothing more is sent on a closed socket"


async def test_serve_on_a_closed_socket_reports_on_closed_once() -> None:
    socket, transport = make_socket()
    transport.abort()
    await settle()
    events = Recorder()
    socket.serve(events)
    await settle()
    assert events.closed == 1


@pytest.mark.parametrize(
    ("frames", "code"),
    [
        pytest.param(
            client_frame(OP_TEXT, b"x", masked=False), CLOSE_PROTOCOL_ERROR, id="unmasked"
        ),
        pytest.param(client_frame(OP_TEXT, b"x", rsv=RSV2), CLOSE_PROTOCOL_ERROR, id="rsv2"),
        pytest.param(client_frame(0x5, b"x"), CLOSE_PROTOCOL_ERROR, id="unknown-opcode"),
        pytest.param(
            client_frame(OP_CONTINUATION, b"x"), CLOSE_PROTOCOL_ERROR,
            id="continuation-without-message"
        ),
        pytest.param(
            client_frame(OP_TEXT, b"a", fin=False) + client_frame(OP_TEXT, b"b"),
            CLOSE_PROTOCOL_ERROR, id="new-message-inside-a-fragmented-one"
        ),
        pytest.param(client_frame(OP_TEXT, b"\xff\xfe"), CLOSE_INVALID_TEXT, id="invalid-utf8"),
        pytest.param(
            client_frame(OP_TEXT, b"\xed\xa0\x80"), CLOSE_INVALID_TEXT, id="utf8-surrogate"
        ),
        pytest.param(
            client_frame(OP_TEXT, b"a\xc3", fin=False) + client_frame(OP_CONTINUATION, b"z"),
            CLOSE_INVALID_TEXT, id="invalid-utf8-across-fragments"
        ),
        pytest.param(client_frame(OP_TEXT, b"x" * 101), CLOSE_TOO_BIG, id="frame-over-max"),
        pytest.param(
            client_frame(OP_BINARY, bytes(300))[:4], CLOSE_TOO_BIG, id="frame-header-over-max"
        ),
        pytest.param(
            client_frame(OP_TEXT, b"x" * 60, fin=False) + client_frame(OP_CONTINUATION, b"x" * 41),
            CLOSE_TOO_BIG, id="fragments-over-max"
        ),
    ],
)
async def test_broken_client_message_closes_and_nothing_after_is_taken(
    frames: bytes, code: int
) -> None:
    socket, transport, events = served(max_bytes=100)
    transport.feed(frames + client_frame(OP_TEXT, b"after") + client_frame(OP_PING, b"after"))
    assert [close_code for close_code, _ in transport.close_frames()] == [code]
    assert len(transport.frames()) == 1, (
        "only the close frame: no pong for the ping after the violation"
    )
    assert events.received == []
    assert transport.ended_by == "close"
    await socket.wait_closed()
    assert events.closed == 1


async def test_unmasked_client_frame_closes_with_1002() -> None:
    _, transport, _ = served()
    transport.feed(client_frame(OP_TEXT, b"hello", masked=False))
    assert transport.close_frames() == [(CLOSE_PROTOCOL_ERROR, "client frames must be masked")]


async def test_fragmented_message_of_exactly_max_bytes_is_delivered() -> None:
    _, transport, events = served(max_bytes=100)
    transport.feed(
        client_frame(OP_TEXT, b"x" * 50, fin=False) + client_frame(OP_CONTINUATION, b"y" * 50)
    )
    assert events.received == ["x" * 50 + "y" * 50]
    assert transport.ended_by is None


async def test_receive_before_serve_holds_the_rest_until_serve() -> None:
    socket, transport = make_socket()
    transport.feed(client_frame(OP_TEXT, b'{"type":"auth"}') + client_frame(OP_TEXT, b"second"))
    assert await socket.receive(1.0) == '{"type":"auth"}'
    waiting = asyncio.create_task(socket.receive(1.0))
    await settle()
    assert waiting.done(), "buffered messages are taken by the next receive"
    assert waiting.result() == "second"
    pending = asyncio.create_task(socket.receive(1.0))
    await settle()
    transport.feed(
        client_frame(OP_BINARY, b"\x01") + client_frame(OP_TEXT, b"later") + client_frame(OP_PING)
    )
    assert await pending == b"\x01"
    await settle()
    assert transport.writes == [], (
        "nothing, not even the ping, is taken while nobody takes messages"
    )
    events = Recorder()
    socket.serve(events)
    await settle()
    assert events.received == ["later"]
    assert transport.frames() == [(0x8A, b"")]


async def test_receive_times_out_without_losing_later_message() -> None:
    socket, transport = make_socket()
    with pytest.raises(TimeoutError):
        await socket.receive(0.01)
    transport.feed(client_frame(OP_TEXT, b"late"))
    assert await socket.receive(1.0) == "late"


async def test_receive_on_closing_connection_raises_connection_reset() -> None:
    socket, transport = make_socket()
    waiting = asyncio.create_task(socket.receive(5.0))
    await settle()
    transport.feed(client_close(1001))
    with pytest.raises(ConnectionResetError):
        await asyncio.wait_for(waiting, 1.0)
    assert transport.close_frames() == [(1001, "")]
    with pytest.raises(ConnectionResetError):
        await socket.receive(1.0)


async def test_pause_reading_holds_delivery_until_resumed() -> None:
    socket, transport = make_socket()

    def pause_on_request(message: str | bytes) -> None:
        if message == "pause":
            socket.pause_reading()

    events = Recorder(then=pause_on_request)
    socket.serve(events)
    transport.feed(
        client_frame(OP_TEXT, b"one")
        + client_frame(OP_TEXT, b"pause")
        + client_frame(OP_TEXT, b"three")
    )
    assert events.received == ["one", "pause"]
    assert not transport.reading, "the transport stops reading: TCP pushes back on the client"
    transport.feed(client_frame(OP_TEXT, b"four"))
    await settle()
    assert events.received == ["one", "pause"]
    socket.resume_reading()
    await settle()
    assert events.received == ["one", "pause", "three", "four"]
    assert transport.reading
    transport.feed(client_frame(OP_TEXT, b"five"))
    assert events.received[-1] == "five"


# --- sending --------------------------------------------------------------------------------------
async def test_send_texts_writes_unmasked_final_frames_at_once() -> None:
    socket, transport = make_socket()
    payloads = [b"", b'{"n":1}', b"a" * 125, b"b" * 126, b"c" * 65535, b"d" * 65536]
    await socket.send_texts(payloads)
    assert len(transport.writes) == 1
    assert server_frames(transport.writes[0]) == [(0x81, payload) for payload in payloads]
    assert transport.writes[0][:9] == b"\x81\x00\x81\x07" + b'{"n":'


async def test_send_texts_waits_while_the_transport_paused_writing() -> None:
    socket, transport = make_socket()
    transport.buffer_full = True
    first = asyncio.create_task(socket.send_texts([b"one"]))
    await settle()
    assert not first.done()
    second = asyncio.create_task(socket.send_texts([b"two"]))
    await settle()
    assert not second.done()
    assert transport.frames() == [(0x81, b"one"), (0x81, b"two")], (
        "written at once, the wait is for the drain"
    )
    transport.drain()
    await settle()
    assert first.done()
    assert second.done()
    assert first.result() is None
    assert second.result() is None
    await asyncio.wait_for(socket.send_texts([b"three"]), 1.0)


async def test_send_waiting_for_drain_raises_reset_on_drop() -> None:
    socket, transport = make_socket()
    transport.buffer_full = True
    waiting = asyncio.create_task(socket.send_texts([b"one"]))
    await settle()
    transport.abort()
    with pytest.raises(ConnectionResetError):
        await asyncio.wait_for(waiting, 1.0)


async def test_send_texts_raises_connection_reset_after_close() -> None:
    socket, transport = make_socket()
    socket.close(1000)
    with pytest.raises(ConnectionResetError):
        await socket.send_texts([b"late"])
    transport.feed(client_close(1000))
    await socket.wait_closed()
    with pytest.raises(ConnectionResetError):
        await socket.send_texts([b"later"])
    assert transport.frames() == [(0x88, b"\x03\xe8")]


async def test_close_aborts_after_timeout_when_peer_never_answers(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(websocket, "CLOSE_TIMEOUT_S", 0.1)
    socket, transport, events = served()
    socket.close(4008, "slow")
    socket.close(1000, "again")
    assert transport.close_frames() == [(4008, "slow")]
    await asyncio.sleep(0.02)
    assert transport.ended_by is None, "the peer has CLOSE_TIMEOUT_S to answer"
    await asyncio.wait_for(socket.wait_closed(), 1.0)
    assert transport.ended_by == "abort"
    assert events.closed == 1
    assert transport.close_frames() == [(4008, "slow")]


async def test_close_completes_without_abort_when_the_peer_answers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(websocket, "CLOSE_TIMEOUT_S", 0.05)
    socket, transport, events = served()
    socket.close(4008, "slow")
    transport.feed(client_frame(OP_TEXT, b"in flight") + client_close(4008))
    assert transport.ended_by == "close"
    assert transport.close_frames() == [(4008, "slow")], (
        "the reply to our close is not answered again"
    )
    await socket.wait_closed()
    await asyncio.sleep(0.1)
    assert transport.aborts == 0
    assert events.closed == 1


async def test_a_close_before_serve_completes_when_the_peer_answers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(websocket, "CLOSE_TIMEOUT_S", 5.0)
    socket, transport = make_socket()
    # e.g. a refused first-frame authentication: nobody ever serves the socket
    socket.close(4401, "unauthorized")
    transport.feed(client_close(4401))
    await asyncio.wait_for(socket.wait_closed(), 1.0)
    assert transport.ended_by == "close"
    assert transport.close_frames() == [(4401, "unauthorized")]


async def test_close_reason_is_cut_to_fit_a_control_frame() -> None:
    socket, transport = make_socket()
    socket.close(4000, "é" * 100)
    assert transport.close_frames() == [(4000, "é" * 61)]


# --- heartbeat ------------------------------------------------------------------------------------
# uvloop's clock counts whole milliseconds (libuv's uv_now): 0.1 s measured on it can be
# 86883.128 - 86883.028, 0.09999999 in floating point.
LOOP_CLOCK_SLACK_S = 0.002


async def test_heartbeat_pings_and_aborts_a_peer_silent_for_two() -> None:
    loop = asyncio.get_running_loop()
    socket, transport = make_socket(heartbeat_s=0.05)
    started = loop.time()
    socket.start_heartbeat()
    await eventually(lambda: bool(transport.writes))
    assert loop.time() - started >= 0.05 - LOOP_CLOCK_SLACK_S
    assert transport.frames() == [(0x89, b"")]
    assert transport.ended_by is None, "one ping without an answer yet is no reason to drop"
    await asyncio.wait_for(socket.wait_closed(), 1.0)
    assert loop.time() - started >= 0.1 - LOOP_CLOCK_SLACK_S, "dropped at the second beat"
    assert transport.ended_by == "abort"
    assert transport.frames() == [(0x89, b"")]


async def test_heartbeat_keeps_a_peer_that_answers_pongs() -> None:
    socket, transport = make_socket(heartbeat_s=0.02)
    transport.answer_pings = True
    socket.start_heartbeat()
    await eventually(lambda: len(transport.writes) >= 5)
    assert set(transport.frames()) == {(0x89, b"")}
    assert transport.ended_by is None
    transport.answer_pings = False  # the peer goes silent
    await asyncio.wait_for(socket.wait_closed(), 1.0)
    assert transport.ended_by == "abort"


async def test_close_stops_the_heartbeat() -> None:
    socket, transport = make_socket(heartbeat_s=0.01)
    socket.start_heartbeat()
    socket.close(1000)
    transport.feed(client_close(1000))
    await asyncio.sleep(0.05)
    assert transport.frames() == [(0x88, b"\x03\xe8")]


# --- permessage-deflate ---------------------------------------------------------------------------
DEFLATE_PAYLOADS = [
    b'{"type":"message","topic":"orders","partition":%d,"value":{"total":%d,"items":["abc","def"]}}'
    % (n, n * 7)
    for n in range(4)
]


async def test_compressed_sends_set_rsv1_and_inflate_with_takeover() -> None:
    socket, transport = make_socket(deflate_bits=15)
    await socket.send_texts(DEFLATE_PAYLOADS[:2])
    await socket.send_texts(DEFLATE_PAYLOADS[2:])
    frames = transport.frames()
    assert [first for first, _ in frames] == [0xC1] * 4, "FIN, RSV1 and text"
    decompressor = zlib.decompressobj(-15)
    assert [inflate(decompressor, body) for _, body in frames] == DEFLATE_PAYLOADS
    assert len(frames[1][1]) < len(frames[0][1]) / 2, "the second message refers back to the first"
    with pytest.raises(zlib.error):
        inflate(zlib.decompressobj(-15), frames[1][1])


async def test_compressed_sends_without_takeover_inflate_alone() -> None:
    socket, transport = make_socket(deflate_bits=15, no_takeover=True)
    await socket.send_texts(DEFLATE_PAYLOADS[:2])
    await socket.send_texts(DEFLATE_PAYLOADS[2:])
    frames = transport.frames()
    assert [first for first, _ in frames] == [0xC1] * 4
    assert [inflate(zlib.decompressobj(-15), body) for _, body in frames] == DEFLATE_PAYLOADS


async def test_compressed_sends_keep_to_the_negotiated_server_window() -> None:
    socket, transport = make_socket(max_bytes=100_000, deflate_bits=10)
    # repeats 4000 bytes back: beyond 1 KiB
    payload = random.Random(7692).randbytes(2000).hex().encode() * 3
    await socket.send_texts([payload, payload])
    decompressor = zlib.decompressobj(-10)
    assert [inflate(decompressor, body) for _, body in transport.frames()] == [payload, payload]


async def test_a_compressed_client_message_is_inflated() -> None:
    _, transport, events = served(deflate_bits=15)
    compressor = zlib.compressobj(wbits=-15)
    body = deflate(compressor, "héllo ".encode() * 20)
    transport.feed(client_frame(OP_TEXT, body, rsv=RSV1))
    fragmented = deflate(compressor, b"\x00\x01" * 100)
    transport.feed(client_frame(OP_BINARY, fragmented[:3], fin=False, rsv=RSV1)
                   + client_frame(OP_PING, b"between")
                   + client_frame(OP_CONTINUATION, fragmented[3:6], fin=False)
                   + client_frame(OP_CONTINUATION, fragmented[6:]))
    transport.feed(client_frame(OP_TEXT, b"not compressed"))
    transport.feed(client_frame(OP_TEXT, deflate(compressor, "héllo ".encode() * 20), rsv=RSV1))
    assert events.received == ["héllo " * 20, b"\x00\x01" * 100, "not compressed", "héllo " * 20]
    assert transport.frames() == [(0x8A, b"between")]


async def test_compressed_message_of_exactly_max_bytes_is_delivered() -> None:
    _, transport, events = served(max_bytes=1000, deflate_bits=15)
    transport.feed(
        client_frame(OP_TEXT, deflate(zlib.compressobj(wbits=-15), b"a" * 1000), rsv=RSV1)
    )
    assert events.received == ["a" * 1000]


async def test_compressed_message_inflating_past_max_closes_1009() -> None:
    socket, transport, events = served(max_bytes=1000, deflate_bits=15)
    transport.feed(
        client_frame(OP_TEXT, deflate(zlib.compressobj(wbits=-15), b"a" * 1001), rsv=RSV1)
    )
    assert [code for code, _ in transport.close_frames()] == [CLOSE_TOO_BIG]
    assert events.received == []
    await socket.wait_closed()


async def test_a_compression_bomb_closes_with_1009() -> None:
    _, transport, events = served(max_bytes=2000, deflate_bits=15)
    bomb = deflate(zlib.compressobj(wbits=-15), bytes(1_000_000))  # deflate's best ratio is ~1030:1
    assert len(bomb) < 2000, "the frame itself is within the limit"
    transport.feed(client_frame(OP_BINARY, bomb, rsv=RSV1))
    assert [code for code, _ in transport.close_frames()] == [CLOSE_TOO_BIG]
    assert events.received == []


async def test_an_undecodable_compressed_message_closes_the_connection() -> None:
    _, transport, events = served(deflate_bits=15)
    transport.feed(client_frame(OP_TEXT, b"\xff\xff\xff\xff garbage", rsv=RSV1))
    assert [code for code, _ in transport.close_frames()] == [CLOSE_INVALID_TEXT]
    assert events.received == []


@pytest.mark.parametrize(
    ("deflate_bits", "frames"),
    [
        pytest.param(0, client_frame(OP_TEXT, b"x", rsv=RSV1), id="text-without-deflate"),
        pytest.param(0, client_frame(OP_PING, b"x", rsv=RSV1), id="ping-without-deflate"),
        pytest.param(15, client_frame(OP_PING, b"x", rsv=RSV1), id="ping-with-deflate"),
        pytest.param(15, client_frame(OP_CLOSE, b"\x03\xe8", rsv=RSV1), id="close-with-deflate"),
        pytest.param(
            15,
            client_frame(OP_TEXT, b"x", fin=False) + client_frame(OP_CONTINUATION, b"y", rsv=RSV1),
            id="continuation-with-deflate",
        ),
    ],
)
async def test_misplaced_rsv1_closes_with_1002(deflate_bits: int, frames: bytes) -> None:
    _, transport, events = served(deflate_bits=deflate_bits)
    transport.feed(frames)
    assert [code for code, _ in transport.close_frames()] == [CLOSE_PROTOCOL_ERROR]
    assert [first for first, _ in transport.frames()] == [0x88], "no pong: the ping was refused"
    assert events.received == []


# --- end to end, behind a real aiohttp server -----------------------------------------------------
class Echo:
    """Sends every text back upper-cased; "close please" makes the server close with 4008 "slow"."""

    def __init__(self, socket: LeanWebSocket) -> None:
        self.socket = socket
        self.closed = 0
        self.sends: set[asyncio.Future[None]] = set()

    def on_text(self, text: str) -> None:
        if text == "close please":
            self.socket.close(4008, "slow")
            return
        send = asyncio.ensure_future(self.socket.send_texts([text.upper().encode()]))
        self.sends.add(send)
        send.add_done_callback(self._sent)

    def _sent(self, send: asyncio.Future[None]) -> None:
        self.sends.discard(send)
        if not send.cancelled():
            send.exception()  # a socket closed meanwhile: nothing to echo to

    def on_binary(self, data: bytes) -> None:
        self.on_text(f"{len(data)} bytes")

    def on_closed(self) -> None:
        self.closed += 1


@dataclass
class Upgraded:
    request: web.Request
    socket: LeanWebSocket
    echo: Echo


@dataclass
class EchoServer:
    heartbeat_s: float
    upgraded: list[Upgraded] = field(default_factory=list)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        try:
            answer = handshake(request.headers, True)
        except Problem as problem:
            return problem_for(request, problem)
        socket = upgrade(request, answer, 64 * 1024, self.heartbeat_s)
        echo = Echo(socket)
        socket.serve(echo)
        self.upgraded.append(Upgraded(request, socket, echo))
        return UpgradedResponse()

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/ws", self.handle)
        return app

    def only(self) -> Upgraded:
        assert len(self.upgraded) == 1
        return self.upgraded[0]


Client = TestClient[web.Request, web.Application]
StartEcho = Callable[..., Awaitable[tuple[Client, EchoServer]]]


@pytest.fixture
async def start_echo(aiohttp_client: Any) -> AsyncIterator[StartEcho]:
    servers: list[EchoServer] = []

    async def start(heartbeat_s: float = 30.0) -> tuple[Client, EchoServer]:
        server = EchoServer(heartbeat_s)
        servers.append(server)
        client: Client = await aiohttp_client(server.app())
        return client, server

    yield start
    for server in servers:  # aiohttp forgot the upgraded connections: they are ours to end
        for upgraded in server.upgraded:
            upgraded.socket.abort()
            await asyncio.wait_for(upgraded.socket.wait_closed(), 1.0)


def aiohttp_handler_tasks() -> list[asyncio.Task[Any]]:
    return [task for task in asyncio.all_tasks()
            if getattr(task.get_coro(), "__qualname__", "").startswith("RequestHandler.")]


@pytest.mark.parametrize("compress", [0, 15])
async def test_messages_echo_through_a_real_aiohttp_server_and_client(
    start_echo: StartEcho, compress: int
) -> None:
    client, server = await start_echo()
    async with client.ws_connect("/ws", compress=compress) as ws:
        assert ws.compress == compress
        await ws.send_str("hello")
        assert await ws.receive_str(timeout=1.0) == "HELLO"
        large = "streamgate " * 3000
        await ws.send_str(large)
        assert await ws.receive_str(timeout=1.0) == large.upper()
        await ws.send_bytes(b"\x00" * 300)
        assert await ws.receive_str(timeout=1.0) == "300 BYTES"
        assert server.only().socket.compressed == bool(compress)


async def test_no_aiohttp_handler_after_upgrade_and_socket_echoes(start_echo: StartEcho) -> None:
    client, server = await start_echo()
    async with client.ws_connect("/ws") as ws:
        await eventually(lambda: len(server.upgraded) == 1)
        upgraded = server.only()
        await eventually(
            lambda: upgraded.request.protocol.transport is None and not aiohttp_handler_tasks()
        )
        assert upgraded.socket.transport.get_protocol() is upgraded.socket
        await ws.send_str("still here")
        assert await ws.receive_str(timeout=1.0) == "STILL HERE"
        assert not upgraded.socket.closed


@pytest.mark.parametrize(("code", "message"), [(1000, b""), (4001, b"bye")])
async def test_a_client_close_gets_a_proper_close_reply(
    start_echo: StartEcho, code: int, message: bytes
) -> None:
    client, server = await start_echo()
    ws = await client.ws_connect("/ws")
    await ws.send_str("hi")
    assert await ws.receive_str(timeout=1.0) == "HI"
    assert await ws.close(code=code, message=message) is True
    assert ws.close_code == code, "the server answers with the client's code"
    upgraded = server.only()
    await asyncio.wait_for(upgraded.socket.wait_closed(), 1.0)
    assert upgraded.echo.closed == 1


async def test_server_close_reaches_client_with_code_and_reason(start_echo: StartEcho) -> None:
    client, server = await start_echo()
    async with client.ws_connect("/ws") as ws:
        await ws.send_str("close please")
        msg = await ws.receive(timeout=1.0)
        assert (msg.type, msg.data, msg.extra) == (WSMsgType.CLOSE, 4008, "slow")
        assert ws.close_code == 4008
    await asyncio.wait_for(server.only().socket.wait_closed(), 1.0)  # long before CLOSE_TIMEOUT_S


async def test_aiohttp_client_autoping_keeps_the_heartbeat_alive(start_echo: StartEcho) -> None:
    client, server = await start_echo(heartbeat_s=0.2)
    async with client.ws_connect("/ws", autoping=True) as ws:
        received: asyncio.Queue[Any] = asyncio.Queue()

        async def read() -> None:
            async for msg in ws:  # answers the server's pings while reading
                await received.put(msg)

        reader = asyncio.create_task(read())
        await asyncio.sleep(1.0)
        assert not server.only().socket.closed
        await ws.send_str("alive")
        msg = await asyncio.wait_for(received.get(), 1.0)
        assert (msg.type, msg.data) == (WSMsgType.TEXT, "ALIVE")
        await ws.close()
        await asyncio.wait_for(reader, 1.0)


async def test_a_client_that_never_answers_pings_is_dropped(start_echo: StartEcho) -> None:
    client, server = await start_echo(heartbeat_s=0.1)
    async with client.ws_connect("/ws", autoping=False) as ws:
        kinds: list[WSMsgType] = []
        while not kinds or kinds[-1] is WSMsgType.PING:
            kinds.append((await ws.receive(timeout=2.0)).type)
        assert kinds[0] is WSMsgType.PING
        assert kinds[-1] in (WSMsgType.CLOSED, WSMsgType.ERROR), "dropped: no close handshake"
    assert server.only().socket.closed


async def test_a_plain_get_without_upgrade_headers_gets_400(start_echo: StartEcho) -> None:
    client, server = await start_echo()
    response = await client.get("/ws")
    assert response.status == 400
    assert response.content_type == "application/problem+json"
    assert "Upgrade: websocket" in (await response.json())["detail"]
    assert server.upgraded == []


@pytest.mark.parametrize(
    ("payload", "code"),
    [
        (b"", 1000), (struct.pack("!H", 1000) + b"bye", 1000), (struct.pack("!H", 1001), 1001),
        (struct.pack("!H", 1011), 1011), (struct.pack("!H", 3000), 3000),
        (struct.pack("!H", 4999), 4999)
    ],
)
def test_a_valid_client_close_payload_gives_its_code(payload: bytes, code: int) -> None:
    assert peer_close_code(payload) == code


@pytest.mark.parametrize(
    ("payload", "code"),
    [
        (b"\x03", CLOSE_PROTOCOL_ERROR), (struct.pack("!H", 999), CLOSE_PROTOCOL_ERROR),
        (struct.pack("!H", 1004), CLOSE_PROTOCOL_ERROR),
        (struct.pack("!H", 1005), CLOSE_PROTOCOL_ERROR),
        (struct.pack("!H", 1006), CLOSE_PROTOCOL_ERROR),
        (struct.pack("!H", 1015), CLOSE_PROTOCOL_ERROR),
        (struct.pack("!H", 2000), CLOSE_PROTOCOL_ERROR),
        (struct.pack("!H", 5000), CLOSE_PROTOCOL_ERROR),
        (struct.pack("!H", 1000) + b"\xff\xfe", CLOSE_INVALID_TEXT)
    ],
)
def test_forbidden_client_close_payload_is_a_violation(payload: bytes, code: int) -> None:
    with pytest.raises(ProtocolViolation) as raised:
        peer_close_code(payload)
    assert raised.value.code == code
