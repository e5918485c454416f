"""The client's lean WebSocket wire on a connection aiohttp opened: frames both ways against an
aiohttp server on loopback: the close handshake, limits, violations, deflate, masks, take-over."""

from __future__ import annotations

import asyncio
import itertools
import ssl
import struct
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import WSMsgType, web
from aiohttp.test_utils import TestServer

from streamgate_client.ws_takeover import take_over
from streamgate_client.ws_wire import WebSocketWire
from streamgate_devstack.certs import self_signed

READY = b'{"type":"ready","note":"the first frame, read through aiohttp before the take-over"}'
Serve = Callable[[web.WebSocketResponse, web.Request], Awaitable[None]]


def server_frame(first: int, payload: bytes, *, masked: bool = False) -> bytes:
    """A frame as a server writes it (unmasked unless asked: a server must not mask)."""
    size, mask_bit = len(payload), 0x80 if masked else 0
    if size < 126:
        head = bytes((first, mask_bit | size))
    elif size < 65536:
        head = struct.pack("!BBH", first, mask_bit | 126, size)
    else:
        head = struct.pack("!BBQ", first, mask_bit | 127, size)
    return head + (b"\0\0\0\0" if masked else b"") + payload


def deflated(*texts: bytes) -> list[bytes]:
    """Each text as a server with context takeover deflates it, one compressor for all."""
    compressor = zlib.compressobj(zlib.Z_DEFAULT_COMPRESSION, zlib.DEFLATED, -15)
    return [(compressor.compress(t) + compressor.flush(zlib.Z_SYNC_FLUSH))[:-4] for t in texts]


@dataclass
class Client:
    """A wire taken over from aiohttp's ws, and what its callbacks heard."""

    ws: aiohttp.ClientWebSocketResponse
    wire: WebSocketWire = field(init=False)
    texts: list[bytes] = field(default_factory=list)
    closes: list[tuple[int, str]] = field(default_factory=list)
    heard: asyncio.Event = field(default_factory=asyncio.Event)

    def take_over(self, max_message_bytes: int = 1 << 20) -> WebSocketWire:
        self.wire = take_over(self.ws, self.on_text, self.on_closed, received=READY,
                              max_message_bytes=max_message_bytes)
        return self.wire

    def on_text(self, payload: bytes) -> None:
        self.texts.append(payload)
        self.heard.set()

    def on_closed(self, code: int, reason: str) -> None:
        self.closes.append((code, reason))
        self.heard.set()

    async def until(self, done: Callable[[], bool]) -> None:
        while not done():
            self.heard.clear()
            await self.heard.wait()


Connect = Callable[..., Awaitable[Client]]


@pytest.fixture
async def connect(aiohttp_server: Any, tmp_path: Path) -> AsyncIterator[Connect]:
    """A server that sends READY (or ``first``, raw) and then runs ``serve``; a client that reads
    READY through aiohttp and, unless ``take`` is false, takes the connection over."""
    sessions: list[aiohttp.ClientSession] = []

    async def start(serve: Serve, *, compress: bool = False, max_message_bytes: int = 1 << 20,
                    autoping: bool = True, first: bytes = b"", take: bool = True,
                    tls: bool = False) -> Client:
        async def handler(request: web.Request) -> web.WebSocketResponse:
            ws = web.WebSocketResponse(compress=compress, autoping=autoping)
            await ws.prepare(request)
            if first:
                assert request.transport is not None
                request.transport.write(first)
            else:
                await ws.send_str(READY.decode())
            await serve(ws, request)
            return ws

        app = web.Application()
        app.router.add_get("/ws", handler)
        server_tls = client_tls = None
        if tls:
            cert, key = self_signed(tmp_path)
            server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            server_tls.load_cert_chain(cert, key)
            client_tls = ssl.create_default_context(cafile=cert)
        server: TestServer = await aiohttp_server(app, ssl=server_tls)
        sessions.append(aiohttp.ClientSession())
        client = Client(await sessions[-1].ws_connect(
            server.make_url("/ws"), ssl=client_tls or True, compress=15 if compress else 0))
        assert (await client.ws.receive()).data == READY.decode()
        if take:
            client.take_over(max_message_bytes)
        return client

    yield start
    for session in sessions:
        await session.close()


async def until_go(ws: web.WebSocketResponse, request: web.Request) -> None:
    """Until the client, having taken its connection over, says so: raw frames written then
    reach the wire, not aiohttp."""
    message = await ws.receive()
    assert message.data == "go"


async def echo(ws: web.WebSocketResponse, request: web.Request) -> None:
    async for message in ws:
        if message.type is WSMsgType.TEXT:
            await ws.send_str(f"echo {message.data}")


async def test_text_messages_round_trip_in_order_after_the_take_over(connect: Connect) -> None:
    client = await connect(echo)
    for n in range(50):
        client.wire.send_text(b"message %d" % n)
    await client.until(lambda: len(client.texts) == 50)
    assert client.texts == [b"echo message %d" % n for n in range(50)]
    await client.wire.close()
    assert client.closes == [(1000, "")]


async def test_a_tls_connection_changes_hands_too(connect: Connect) -> None:
    client = await connect(echo, tls=True, compress=True)
    for n in range(5):
        client.wire.send_text(b"over tls %d" % n)
    await client.until(lambda: len(client.texts) == 5)
    await client.wire.close()
    assert client.texts == [b"echo over tls %d" % n for n in range(5)]
    assert client.closes == [(1000, "")]


async def test_a_fragmented_message_arrives_whole_with_a_ping_between_its_frames(
    connect: Connect,
) -> None:
    pongs: list[bytes] = []

    async def fragments(ws: web.WebSocketResponse, request: web.Request) -> None:
        await until_go(ws, request)
        assert request.transport is not None
        request.transport.write(server_frame(0x01, b"frag") + server_frame(0x89, b"are you there")
                                + server_frame(0x00, b"mented ") + server_frame(0x80, b"text"))
        message = await ws.receive()
        pongs.append(message.data if message.type is WSMsgType.PONG else b"")
        await ws.receive()

    client = await connect(fragments, autoping=False)
    client.wire.send_text(b"go")
    await client.until(lambda: bool(client.texts))
    await client.wire.close()
    assert (client.texts, pongs) == ([b"fragmented text"], [b"are you there"])


async def test_frames_split_across_reads_arrive_whole(connect: Connect) -> None:
    texts = [b"m" * 300, b"l" * 70_000, b"s"]
    stream = b"".join(server_frame(0x81, text) for text in texts)
    # cut inside a header, inside an extended length, inside payloads
    cuts = [0, 1, 3, 150, 305, 306, 309, 40_000, len(stream) - 3, len(stream)]

    async def trickle(ws: web.WebSocketResponse, request: web.Request) -> None:
        await until_go(ws, request)
        assert request.transport is not None
        for start, end in itertools.pairwise(cuts):
            request.transport.write(stream[start:end])
            await asyncio.sleep(0.001)  # a read a piece, most of the time
        await ws.receive()

    client = await connect(trickle)
    client.wire.send_text(b"go")
    await client.until(lambda: len(client.texts) == len(texts))
    await client.wire.close()
    assert client.texts == texts


async def test_a_server_close_reaches_the_callback_and_is_answered(connect: Connect) -> None:
    answered: list[int | None] = []

    async def close(ws: web.WebSocketResponse, request: web.Request) -> None:
        await ws.close(code=4503, message=b"going away")
        answered.append(ws.close_code)

    client = await connect(close)
    await client.until(lambda: bool(client.closes))
    await client.wire.close()  # returns once the connection is gone
    assert (client.closes, answered) == ([(4503, "going away")], [4503])
    assert client.ws._response.closed
    with pytest.raises(ConnectionResetError):
        client.wire.send_text(b"too late")


@pytest.mark.parametrize(("frame", "code"), [
    (server_frame(0x81, b"x" * 200), 1009),  # over the limit
    (server_frame(0x81, b"hello", masked=True), 1002),
    (server_frame(0xC1, b"hello"), 1002),  # RSV1 without deflate negotiated
    (server_frame(0xA1, b"hello"), 1002),  # RSV2
    (server_frame(0x83, b"hello"), 1002),  # an unknown opcode
    (server_frame(0x80, b"hello"), 1002),  # a continuation of nothing
    (server_frame(0x81, "é".encode("latin-1")), 1007),
])
async def test_a_broken_or_oversized_server_frame_closes_with_its_code(
    connect: Connect, frame: bytes, code: int,
) -> None:
    heard: list[int] = []

    async def send_raw(ws: web.WebSocketResponse, request: web.Request) -> None:
        await until_go(ws, request)
        assert request.transport is not None
        request.transport.write(frame)
        message = await ws.receive()
        heard.append(message.data if message.type is WSMsgType.CLOSE else 0)

    client = await connect(send_raw, max_message_bytes=100)
    client.wire.send_text(b"go")
    await client.until(lambda: bool(client.closes))
    await client.wire.close()
    assert ([c for c, _ in client.closes], heard, client.texts) == ([code], [code], [])


async def test_deflated_messages_round_trip_both_ways(connect: Connect) -> None:
    client = await connect(echo, compress=True)
    assert client.ws.compress
    texts = [b'{"n":%d,"pad":"%s"}' % (n, b"abc" * n) for n in range(30)]
    for text in texts:
        client.wire.send_text(text)
    await client.until(lambda: len(client.texts) == len(texts))
    await client.wire.close()
    assert client.texts == [b"echo " + t for t in texts]


async def test_deflated_messages_after_the_take_over_may_refer_back_to_the_ready_frame(
    connect: Connect,
) -> None:
    # written as a server with context takeover writes them: the later ones refer to READY
    ready, again, more = deflated(READY, READY, READY + b" and more")

    async def refer_back(ws: web.WebSocketResponse, request: web.Request) -> None:
        await until_go(ws, request)
        assert request.transport is not None
        request.transport.write(server_frame(0xC1, again) + server_frame(0xC1, more))
        await ws.receive()

    client = await connect(refer_back, compress=True, first=server_frame(0xC1, ready))
    client.wire.send_text(b"go")
    await client.until(lambda: len(client.texts) == 2)
    await client.wire.close()
    assert len(again) < len(READY) // 4
    assert client.texts == [READY, READY + b" and more"]


class Tee(asyncio.Protocol):
    """Records the bytes a server connection receives and passes everything on to aiohttp."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.data = inner, bytearray()

    def data_received(self, data: bytes) -> None:
        self.data += data
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received()  # type: ignore[no-any-return]

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        self.inner.connection_lost(exc)


def client_frames(data: bytes) -> list[tuple[int, bytes, bytes]]:
    """The frames a client sent: (first byte, mask, unmasked payload); each must be masked."""
    frames, at = [], 0
    while at < len(data):
        first, second = data[at], data[at + 1]
        assert second & 0x80, "an unmasked client frame"
        size, at = second & 0x7F, at + 2
        if size == 126:
            size, at = struct.unpack_from("!H", data, at)[0], at + 2
        mask, payload = data[at:at + 4], data[at + 4:at + 4 + size]
        frames.append((first, mask, bytes(b ^ mask[i % 4] for i, b in enumerate(payload))))
        at += 4 + size
    return frames


@pytest.mark.parametrize("compress", [False, True])
async def test_client_frames_are_masked_each_with_a_fresh_mask(
    connect: Connect, compress: bool,
) -> None:
    tees: list[Tee] = []

    async def record(ws: web.WebSocketResponse, request: web.Request) -> None:
        assert request.transport is not None
        tees.append(Tee(request.transport.get_protocol()))
        request.transport.set_protocol(tees[-1])
        await echo(ws, request)

    client = await connect(record, compress=compress)
    texts = [b'{"n":%d,"text":"hello, hello"}' % n for n in range(3)] + [b"x" * 300]
    for text in texts:
        client.wire.send_text(text)
    await client.until(lambda: len(client.texts) == len(texts))
    await client.wire.close(4000, "bye")
    frames = client_frames(bytes(tees[0].data))
    inflater = zlib.decompressobj(-15)
    sent = [inflater.decompress(p + b"\0\0\xff\xff") if compress else p
            for _, _, p in frames[:-1]]
    assert sent == texts
    assert {first for first, _, _ in frames[:-1]} == {0xC1 if compress else 0x81}
    assert frames[-1][:1] + frames[-1][2:] == (0x88, struct.pack("!H", 4000) + b"bye")
    assert len({mask for _, mask, _ in frames}) == len(frames)


async def test_messages_aiohttp_read_past_the_ready_frame_reach_the_wire(
    connect: Connect,
) -> None:
    pongs: list[bytes] = []

    async def answer_after(ws: web.WebSocketResponse, request: web.Request) -> None:
        message = await ws.receive()
        pongs.append(message.data if message.type is WSMsgType.PONG else b"")
        await echo(ws, request)

    # one write: aiohttp parses all of it while it reads the ready frame
    first = (server_frame(0x81, READY) + server_frame(0x81, b"unasked 1")
             + server_frame(0x89, b"ping") + server_frame(0x81, b"unasked 2"))
    client = await connect(answer_after, first=first, autoping=False)
    client.wire.send_text(b"asked")
    await client.until(lambda: len(client.texts) == 3)
    await client.wire.close()
    assert (client.texts, pongs) == ([b"unasked 1", b"unasked 2", b"echo asked"], [b"ping"])


@pytest.mark.parametrize(("after_ready", "error"), [
    (server_frame(0x81, b"abc")[:3], "part of a frame"),
    (server_frame(0xC1, b"abc"), "failed"),  # RSV1 without deflate: aiohttp fails the socket
])
async def test_a_frame_aiohttp_holds_in_part_or_failed_on_drops_the_connection(
    connect: Connect, after_ready: bytes, error: str,
) -> None:
    async def wait(ws: web.WebSocketResponse, request: web.Request) -> None:
        await ws.receive()

    client = await connect(wait, first=server_frame(0x81, READY) + after_ready, take=False)
    with pytest.raises(ConnectionResetError, match=error):
        client.take_over()
    assert client.ws._response.closed


def test_aiohttp_is_a_version_the_take_over_was_written_for() -> None:
    # client.ws_takeover reads aiohttp's internals: check them before widening this
    version = tuple(int(part) for part in aiohttp.__version__.split(".")[:2])
    assert (3, 9) <= version < (3, 15)
