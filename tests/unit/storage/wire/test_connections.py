"""The pipelined node connection and its lanes against a scripted loopback server: coalescing,
ordering, failures."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from storage.cluster import ClusterRouter
from storage.settings import RedisStoreSettings
from storage.wire import errors
from storage.wire.connection import RespConnection
from storage.wire.lanes import NodeLanes
from storage.wire.resp import encode_command

Responder = Callable[[bytes], bytes]


@dataclass
class ScriptedServer:
    """Answers each received chunk with ``respond(chunk)``; records the chunks (one per socket
    read)."""

    respond: Responder
    chunks: list[bytes] = field(default_factory=list)
    writers: list[asyncio.StreamWriter] = field(default_factory=list)
    port: int = 0
    connected: asyncio.Event = field(default_factory=asyncio.Event)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writers.append(writer)
        self.connected.set()
        while chunk := await reader.read(65536):
            self.chunks.append(chunk)
            answer = self.respond(chunk)
            for index in range(len(answer)):
                # one byte per write: replies arrive split at every byte
                writer.write(answer[index : index + 1])
                await writer.drain()
        writer.close()


def _pongs(chunk: bytes) -> bytes:
    return b":1\r\n" * chunk.count(b"*")


@pytest.fixture
async def server(request: pytest.FixtureRequest) -> AsyncIterator[ScriptedServer]:
    scripted = ScriptedServer(getattr(request, "param", _pongs))
    listener = await asyncio.start_server(scripted.handle, "127.0.0.1", 0)
    scripted.port = listener.sockets[0].getsockname()[1]
    yield scripted
    for writer in scripted.writers:
        writer.close()
    listener.close()
    await listener.wait_closed()


def _settings(**overrides: object) -> RedisStoreSettings:
    return RedisStoreSettings(client_name=None, **overrides)  # type: ignore[arg-type]


async def test_concurrent_requests_share_a_write_and_get_own_replies(
        server: ScriptedServer) -> None:
    connection = await RespConnection.open(("127.0.0.1", server.port), _settings())
    ping = encode_command(["PING"])
    replies = await asyncio.gather(*(connection.execute(ping * n, n) for n in (1, 2, 3)))
    assert replies == [[1], [1, 1], [1, 1, 1]]
    assert server.chunks == [ping * 6]
    connection.close()


@pytest.mark.parametrize("server", [lambda chunk: b"-MOVED 12 127.0.0.1:7001\r\n+OK\r\n"],
                         indirect=True)
async def test_error_replies_come_back_as_redis_exceptions(server: ScriptedServer) -> None:
    async with NodeLanes(_settings()) as lanes:
        replies = await lanes.execute(("127.0.0.1", server.port), [("EVALSHA", "x", 0), ("PING",)],
                                      exclusive=False)
    assert isinstance(replies[0], errors.MovedError)
    assert replies[0].port == 7001
    assert replies[1] == b"OK"


@pytest.mark.parametrize("server", [lambda chunk: b""], indirect=True)
async def test_silent_connection_times_out_and_is_not_reused(server: ScriptedServer) -> None:
    connection = await RespConnection.open(("127.0.0.1", server.port),
                                           _settings(socket_timeout_s=0.2))
    connection._reply_timeout_s = 0.2  # node_socket_timeout_s has a floor of wait_timeout + 1 s
    with pytest.raises(errors.ReplyTimeout):
        await connection.execute(encode_command(["PING"]), 1)
    assert connection.closed
    with pytest.raises(errors.ConnectionLost):
        await connection.execute(encode_command(["PING"]), 1)


async def test_a_dropped_connection_fails_every_request_in_flight(server: ScriptedServer) -> None:
    server.respond = lambda chunk: b""
    connection = await RespConnection.open(("127.0.0.1", server.port), _settings())
    pending = [asyncio.ensure_future(connection.execute(encode_command(["PING"]), 1))
               for _ in range(3)]
    await server.connected.wait()
    await asyncio.sleep(0.05)  # the requests reach the server, which never answers
    server.writers[0].transport.abort()
    outcomes = await asyncio.gather(*pending, return_exceptions=True)
    assert all(isinstance(outcome, errors.ConnectionLost) for outcome in outcomes)


async def test_cancelled_request_does_not_shift_next_replies(server: ScriptedServer) -> None:
    counter = iter(range(1, 100))
    server.respond = lambda chunk: b"".join(b":%d\r\n" % next(counter)
                                            for _ in range(chunk.count(b"*")))
    connection = await RespConnection.open(("127.0.0.1", server.port), _settings())
    first = asyncio.ensure_future(connection.execute(encode_command(["INCR", "a"]), 1))
    await asyncio.sleep(0)
    first.cancel()
    second = await connection.execute(encode_command(["INCR", "a"]), 1)
    assert second == [2]
    connection.close()


async def test_nothing_listening_is_a_redis_connection_error() -> None:
    listener = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    listener.close()
    await listener.wait_closed()
    async with NodeLanes(_settings()) as lanes:
        with pytest.raises(errors.ConnectionLost):
            await lanes.execute(("127.0.0.1", port), [("PING",)], exclusive=False)
        with pytest.raises(errors.ConnectionLost):
            await lanes.execute(("127.0.0.1", port), [("PING",)], exclusive=True)


async def test_exclusive_requests_use_separate_reused_connections(server: ScriptedServer) -> None:
    async with NodeLanes(_settings()) as lanes:
        address = ("127.0.0.1", server.port)
        together = await asyncio.gather(*(lanes.execute(address, [("WAIT", 1, 10)], exclusive=True)
                                          for _ in range(3)))
        assert together == [[1], [1], [1]]
        assert len(server.writers) == 3
        assert await lanes.execute(address, [("WAIT", 1, 10)], exclusive=True) == [1]
        assert len(server.writers) == 3


async def test_requests_made_during_replies_leave_together_after() -> None:
    release, arrived = asyncio.Event(), asyncio.Event()
    chunks: list[bytes] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while chunk := await reader.read(65536):
            chunks.append(chunk)
            arrived.set()
            if len(chunks) == 1:
                await release.wait()  # hold the first reply while more requests queue up
            writer.write(b":1\r\n" * chunk.count(b"*"))
        writer.close()

    listener = await asyncio.start_server(handle, "127.0.0.1", 0)
    connection = await RespConnection.open(("127.0.0.1", listener.sockets[0].getsockname()[1]),
                                           _settings())
    ping = encode_command(["PING"])
    first = asyncio.ensure_future(connection.execute(ping, 1))
    await arrived.wait()
    later = [asyncio.ensure_future(connection.execute(ping, 1)) for _ in range(5)]
    await asyncio.sleep(0.05)
    assert len(chunks) == 1  # held back: the first request's reply is still outstanding
    release.set()
    assert await asyncio.gather(first, *later) == [[1]] * 6
    assert chunks == [ping, ping * 5]
    connection.close()
    listener.close()
    await listener.wait_closed()


class _Node:
    def __init__(self, port: int) -> None:
        self.host, self.port = "127.0.0.1", port


class _Topology:
    """Stands in for the cluster client: a slot-map reload that finds ``nodes``."""

    def __init__(self, nodes: list[_Node]) -> None:
        self.nodes = nodes
        self.nodes_manager = self

    async def initialize(self, last_failed_node_name: str | None = None) -> None:
        pass

    def get_nodes(self) -> list[_Node]:
        return self.nodes

    def get_primaries(self) -> list[_Node]:
        return self.nodes


async def test_slot_map_refresh_closes_connections_to_demoted_nodes(server: ScriptedServer) -> None:
    topology = _Topology([_Node(server.port)])
    router = ClusterRouter(topology, _settings(), owns_cluster=False)  # type: ignore[arg-type]
    async with NodeLanes(_settings()) as lanes:
        router.on_refresh(lanes.forget)
        address = ("127.0.0.1", server.port)
        assert await lanes.execute(address, [("PING",)], exclusive=False) == [1]
        await router.refresh()  # the node is still there: its connection stays
        assert await lanes.execute(address, [("PING",)], exclusive=False) == [1]
        assert len(server.writers) == 1
        topology.nodes = []
        await router.refresh()
        await asyncio.sleep(0.05)
        assert server.writers[0].is_closing()  # the server saw the client hang up
        # reconnects if asked again
        assert await lanes.execute(address, [("PING",)], exclusive=False) == [1]
        assert len(server.writers) == 2


@pytest.mark.parametrize("server", [lambda chunk: b""], indirect=True)
async def test_requests_behind_an_unanswered_one_time_out_with_it(server: ScriptedServer) -> None:
    connection = await RespConnection.open(("127.0.0.1", server.port),
                                           _settings(socket_timeout_s=0.2))
    connection._reply_timeout_s = 0.3
    started = asyncio.get_running_loop().time()
    pending = []
    for _ in range(4):  # newer requests keep coming; the oldest one's timeout still fires on time
        pending.append(asyncio.ensure_future(connection.execute(encode_command(["PING"]), 1)))
        await asyncio.sleep(0.05)
    outcomes = await asyncio.gather(*pending, return_exceptions=True)
    assert all(isinstance(outcome, errors.ReplyTimeout) for outcome in outcomes)
    assert asyncio.get_running_loop().time() - started < 0.3 + 0.25
    assert connection.closed


async def test_slow_connection_within_timeout_stays_open(server: ScriptedServer) -> None:
    connection = await RespConnection.open(("127.0.0.1", server.port), _settings())
    connection._reply_timeout_s = 0.2
    ping = encode_command(["PING"])
    for _ in range(6):
        # 0.3 s in all: longer than the timeout, but every reply comes well within it
        assert await connection.execute(ping, 1) == [1]
        await asyncio.sleep(0.05)
    assert not connection.closed
    connection.close()


def _counted(chunk: bytes) -> bytes:
    """``:n`` for the n-th command of the chunk, ``:7`` for a WAIT (seven replicas acknowledged)."""
    return b"".join(b":7\r\n" if b"WAIT" in command else b":%d\r\n" % number
                    for number, command in enumerate(chunk.split(b"*")[1:], start=1))


@pytest.mark.parametrize("server", [_counted], indirect=True)
async def test_replicated_writes_of_one_loop_turn_share_one_wait(server: ScriptedServer) -> None:
    ping = encode_command(["PING"])
    address = ("127.0.0.1", server.port)
    async with NodeLanes(_settings()) as lanes:
        replies = await asyncio.gather(*(lanes.execute_replicated(address, ping * n, n, replicas=1,
                                                                  timeout_ms=50)
                                         for n in (1, 2, 3)))
        alone = await lanes.execute_replicated(address, ping, 1, replicas=1, timeout_ms=50)
    # each caller: its own replies, then the one WAIT's
    assert replies == [[1, 7], [2, 3, 7], [4, 5, 6, 7]]
    assert alone == [1, 7]
    sent = b"".join(server.chunks)
    assert sent.count(b"WAIT") == 2
    assert sent.count(b"PING") == 7


@pytest.mark.parametrize("server", [lambda chunk: b""], indirect=True)
async def test_a_failed_group_commit_fails_every_caller_in_it(server: ScriptedServer) -> None:
    settings = _settings(socket_timeout_s=0.2)
    address = ("127.0.0.1", server.port)
    async with NodeLanes(settings) as lanes:
        pending = [asyncio.ensure_future(lanes.execute_replicated(address, encode_command(["PING"]),
                                                                  1, replicas=1, timeout_ms=50))
                   for _ in range(3)]
        await server.connected.wait()
        await asyncio.sleep(0.05)
        server.writers[0].transport.abort()
        outcomes = await asyncio.gather(*pending, return_exceptions=True)
    assert all(isinstance(outcome, errors.ConnectionLost) for outcome in outcomes)


async def test_caller_cancelled_before_commit_is_not_sent(server: ScriptedServer) -> None:
    address = ("127.0.0.1", server.port)
    async with NodeLanes(_settings()) as lanes:
        dropped = asyncio.ensure_future(lanes.execute_replicated(address,
                                                                 encode_command(["DROPPED"]), 1,
                                                                 replicas=1, timeout_ms=50))
        kept = asyncio.ensure_future(lanes.execute_replicated(address, encode_command(["PING"]), 1,
                                                              replicas=1, timeout_ms=50))
        await asyncio.sleep(0)  # both queued for this turn's commit
        dropped.cancel()
        assert await kept == [1, 1]
    assert b"DROPPED" not in b"".join(server.chunks)


async def _answer(server: ScriptedServer, replies: bytes) -> None:
    server.writers[0].write(replies)
    await server.writers[0].drain()


async def test_full_connection_makes_callers_wait_for_replies(server: ScriptedServer) -> None:
    server.respond = lambda chunk: b""  # the test answers by hand
    connection = await RespConnection.open(("127.0.0.1", server.port), _settings(), max_in_flight=2)
    ping = encode_command(["PING"])
    pending = [asyncio.ensure_future(connection.execute(ping, 1)) for _ in range(3)]
    await asyncio.sleep(0.05)
    assert b"".join(server.chunks) == ping * 2  # the third waits for room
    assert connection.submit(ping, 1) is None
    await _answer(server, b":1\r\n")
    assert await pending[0] == [1]
    # the third took the room (held until the second's reply)
    assert connection.submit(ping, 1) is None
    await _answer(server, b":2\r\n")
    assert await pending[1] == [2]
    await asyncio.sleep(0.05)
    assert b"".join(server.chunks) == ping * 3
    await _answer(server, b":3\r\n")
    assert await pending[2] == [3]
    connection.close()


async def test_cancelled_waiter_hands_the_room_on(server: ScriptedServer) -> None:
    server.respond = lambda chunk: b""
    connection = await RespConnection.open(("127.0.0.1", server.port), _settings(), max_in_flight=1)
    ping = encode_command(["PING"])
    first = asyncio.ensure_future(connection.execute(ping, 1))
    woken_then_cancelled = asyncio.ensure_future(connection.execute(ping, 1))
    cancelled_waiting = asyncio.ensure_future(connection.execute(ping, 1))
    last = asyncio.ensure_future(connection.execute(ping, 1))
    await asyncio.sleep(0.05)
    cancelled_waiting.cancel()
    connection._protocol.data_received(b":1\r\n")  # the first's reply wakes the next waiter...
    woken_then_cancelled.cancel()  # ...which is cancelled in the same turn, before it could send
    assert await first == [1]
    await asyncio.sleep(0.05)
    assert woken_then_cancelled.cancelled()
    assert cancelled_waiting.cancelled()
    assert b"".join(server.chunks) == ping * 2  # the room went to the last caller
    await _answer(server, b":2\r\n")
    assert await last == [2]
    connection.close()


async def test_callers_waiting_for_room_fail_on_connection_loss(server: ScriptedServer) -> None:
    server.respond = lambda chunk: b""
    connection = await RespConnection.open(("127.0.0.1", server.port), _settings(), max_in_flight=1)
    ping = encode_command(["PING"])
    pending = [asyncio.ensure_future(connection.execute(ping, 1)) for _ in range(3)]
    await asyncio.sleep(0.05)
    server.writers[0].transport.abort()
    outcomes = await asyncio.wait_for(asyncio.gather(*pending, return_exceptions=True), 5)
    assert all(isinstance(outcome, errors.ConnectionLost) for outcome in outcomes)
    with pytest.raises(errors.ConnectionLost):
        connection.submit(ping, 1)


class _AsItIs:
    """A shape that never reads from the bytes: its answer is the replies hiredis read."""

    def __init__(self, replies: int) -> None:
        self.replies = replies

    def read(self, data: bytes, offset: int, /) -> None:
        return None

    def fold(self, replies: list[Any], /) -> list[Any]:
        return replies


async def test_submit_queues_without_awaiting_and_future_holds_answer(
        server: ScriptedServer) -> None:
    server.respond = lambda chunk: b"-MOVED 12 127.0.0.1:7001\r\n:1\r\n"
    async with NodeLanes(_settings()) as lanes:
        address = ("127.0.0.1", server.port)
        # no connection open yet
        assert lanes.submit(address, encode_command(["PING"]), _AsItIs(1)) is None
        await lanes.execute(address, [("PING",), ("PING",)], exclusive=False)  # opens it
        future = lanes.submit(address, encode_command(["EVALSHA", "x", 0])
                              + encode_command(["PING"]), _AsItIs(2))
        assert future is not None
        ((moved, pong),) = await future
    assert isinstance(moved, errors.MovedError)  # a shape folds replies with their errors mapped
    assert pong == 1


@pytest.mark.parametrize("server", [lambda chunk: b""], indirect=True)
async def test_stalled_request_is_reported_and_forget_fails_it(server: ScriptedServer) -> None:
    stalls: list[tuple[str, int]] = []
    async with NodeLanes(_settings(node_stall_s=0.1, socket_timeout_s=5.0)) as lanes:
        lanes.on_stall = stalls.append
        address = ("127.0.0.1", server.port)
        request = asyncio.ensure_future(lanes.execute(address, [("PING",)], exclusive=False))
        await asyncio.sleep(0.3)
        assert stalls == [address]  # once per oldest request, not once per watchdog round
        assert lanes.stalled(address)
        started = asyncio.get_running_loop().time()
        lanes.forget(set())  # the slot map says the node is no longer a primary
        with pytest.raises(errors.ConnectionLost):
            await request
        assert asyncio.get_running_loop().time() - started < 0.1  # not at the reply timeout
        assert not lanes.stalled(address)


@pytest.mark.parametrize("server", [lambda chunk: b""], indirect=True)
async def test_handshake_stuck_connection_closes_when_node_forgotten(
        server: ScriptedServer) -> None:
    settings = RedisStoreSettings(client_name="streamgate", node_stall_s=0.1, socket_timeout_s=5.0)
    async with NodeLanes(settings) as lanes:
        stalls: list[tuple[str, int]] = []
        lanes.on_stall = stalls.append
        address = ("127.0.0.1", server.port)
        request = asyncio.ensure_future(lanes.execute(address, [("PING",)], exclusive=False))
        # the node accepted the connection but never answers CLIENT SETNAME
        await asyncio.sleep(0.3)
        assert stalls == [address]
        lanes.forget(set())
        with pytest.raises(errors.ConnectionLost):
            async with asyncio.timeout(0.5):
                await request
