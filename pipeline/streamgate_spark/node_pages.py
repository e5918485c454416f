"""Paged XRANGE of one partition over a socket of its own to the primary holding it: each reply is
read as raw bytes and decoded straight into Arrow buffers (``storage.pages``); redis-py's cluster
client only says which node holds the key.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from types import TracebackType

from redis.cluster import RedisCluster
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

from storage._speedups import page_columns
from storage.pages import PageColumns
from storage.wire.resp import encode_command
from streamgate_spark import stream_ids
from streamgate_spark.options import RedisTls

ATTEMPTS = 5  # per page, across redirects and broken connections
RETRY_PAUSE_S = 0.25
TIMEOUT_S = 30.0
FIRST_BUFFER = 1 << 20
# Replies after which the slot map is refreshed and the page asked again.
MOVING = ("MOVED", "ASK", "TRYAGAIN", "CLUSTERDOWN", "LOADING", "MASTERDOWN")


class NodePages:
    """Pages of one stream key; a context manager owning its socket (reopened after the slot map is
    refreshed on a redirect or a broken connection, ``ATTEMPTS`` times per page)."""

    def __init__(self, cluster: RedisCluster, key: str, tls: RedisTls | None = None) -> None:
        self._cluster = cluster
        self._key = key
        self._tls = tls.context() if tls else None
        self._socket: socket.socket | None = None
        self._buffer = bytearray(FIRST_BUFFER)

    def __enter__(self) -> NodePages:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        """Close the socket; idempotent."""
        if self._socket is not None:
            self._socket.close()
            self._socket = None

    def pages(self, start: str, end: str, page_size: int) -> Iterator[PageColumns]:
        """The half-open range (start, end] in ID order, at most ``page_size`` entries a page."""
        cursor = start
        while stream_ids.before(cursor, end):
            page = self.page(f"({cursor}", end, page_size)
            if not page.rows:
                return
            yield page
            if page.rows < page_size:
                return
            cursor = page.last_id()

    def page(self, first: str, last: str, count: int) -> PageColumns:
        """``XRANGE key first last COUNT count`` as columns."""
        request = encode_command(("XRANGE", self._key, first, last, "COUNT", count))
        failure: Exception | None = None
        for attempt in range(ATTEMPTS):
            if attempt:
                self.close()
                time.sleep(RETRY_PAUSE_S)
                self._cluster.nodes_manager.initialize()
            try:
                reply = self._ask(request)
            except OSError as exc:
                failure = exc
                continue
            if isinstance(reply, PageColumns):
                return reply
            if not reply.startswith(MOVING):
                raise ResponseError(reply)
            failure = ResponseError(reply)
        raise RedisConnectionError(f"XRANGE of {self._key} failed {ATTEMPTS} times: "
                                   f"{failure}") from failure

    def _ask(self, request: bytes) -> PageColumns | str:
        connection = self._connection()
        connection.sendall(request)
        filled = 0
        while True:
            if filled == len(self._buffer):
                self._buffer.extend(bytes(len(self._buffer)))
            with memoryview(self._buffer) as view:
                received = connection.recv_into(view[filled:])
                if not received:
                    raise ConnectionResetError("the Redis node closed the connection")
                filled += received
                reply = page_columns(view[:filled])
            if isinstance(reply, tuple):
                columns, end = reply
                if end != filled:  # a reply nobody asked for after it
                    raise ValueError("not an XRANGE reply")
                return columns
            if reply is not None:
                return reply

    def _connection(self) -> socket.socket:
        if self._socket is None:
            node = self._cluster.get_node_from_key(self._key)  # type: ignore[no-untyped-call]
            if node is None:
                raise ConnectionRefusedError(f"no node holds {self._key}")
            plain = socket.create_connection((node.host, node.port), timeout=TIMEOUT_S)
            plain.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._socket = (plain if self._tls is None
                            else self._tls.wrap_socket(plain, server_hostname=node.host))
        return self._socket
