"""One fakeredis server on a loopback port, owning every slot: storage unit tests reach it through
the node lanes (``storage.wire.lanes``) as the store reaches a node, and through a client of the
same data to look."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import fakeredis
from fakeredis.commands_mixins.scripting_mixin import ScriptingCommandsMixin

from storage.cluster import ignore_call
from storage.settings import RedisStoreSettings
from storage.wire.lanes import NodeLanes

T = TypeVar("T")


class OneNodeRouter:
    """What the stores use of a ClusterRouter, for one node that owns every slot (no retries)."""

    def __init__(self, address: tuple[str, int], client: Any, settings: RedisStoreSettings) -> None:
        self.address = address
        self.cluster = client
        self.settings = settings
        self.observer = ignore_call

    def node_for_slot(self, slot: int) -> tuple[str, int]:
        return self.address

    async def call(self, what: str, budget_s: float, op: Callable[[], Awaitable[T]]) -> T:
        return await op()

    async def call_on_slot(self, lanes: NodeLanes, what: str, budget_s: float, slot: int,
                           command: tuple[Any, ...]) -> Any:
        return await self.execute_on(lanes, slot, command)

    async def execute_on(self, lanes: NodeLanes, slot: int, command: tuple[Any, ...]) -> Any:
        return await lanes.execute_one(self.address, command)


class _ShebangRuntime:
    """fakeredis's Lua runtime, reading a script's ``#!lua flags=...`` line as Redis 7 does (the
    flags matter only on a node at its maxmemory, which the integration tests cover)."""

    def __init__(self, runtime: Any) -> None:
        self._runtime = runtime

    def execute(self, script: bytes | str) -> Any:
        text = script.decode() if isinstance(script, bytes) else script
        if text.startswith("#!"):
            script = "\n" + text.partition("\n")[2]  # the same line numbers in errors
        return self._runtime.execute(script)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._runtime, name)


_server_runtime = ScriptingCommandsMixin._get_server_runtime
ScriptingCommandsMixin._get_server_runtime = (  # type: ignore[method-assign]
    lambda self, server: _ShebangRuntime(_server_runtime(self, server)))


@asynccontextmanager
async def fake_node(settings: RedisStoreSettings) -> AsyncIterator[tuple[OneNodeRouter, NodeLanes]]:
    """A router to the fake node, and node lanes (closed before the server stops)."""
    server = fakeredis.TcpFakeServer(("127.0.0.1", 0), server_type="redis")
    thread = threading.Thread(target=server.serve_forever, name="fakeredis-tcp")
    thread.start()
    client = fakeredis.FakeAsyncRedis(server=server.fake_server)
    host, port = server.server_address[:2]
    try:
        async with NodeLanes(settings) as lanes:
            yield OneNodeRouter((str(host), int(port)), client, settings), lanes
    finally:
        await client.aclose()
        server.shutdown()
        server.server_close()
        thread.join(10)
