"""The Redis Cluster's topology: the slot map (redis-py's cluster client) and its refresh after a
failover, retries inside a deadline, and the hook that reports each Redis call. Commands go on the
node connections of ``storage.wire.lanes``, to the nodes this router names."""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from redis import exceptions as rexc
from redis.asyncio import RedisCluster
from redis.asyncio.cluster import ClusterNode
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.cluster import PRIMARY

from storage.errors import StorageError, StorageFull, StorageUnavailable
from storage.settings import RedisStoreSettings
from storage.wire.connection import NodeAddress
from storage.wire.errors import (
    ClusterDownError,
    ConnectionLost,
    LoadingError,
    OutOfMemoryError,
    ReadOnlyError,
    Redirect,
    ReplyTimeout,
    TryAgainError,
)
from storage.wire.lanes import NodeLanes

T = TypeVar("T")

CallObserver = Callable[[str, float, "str | None"], None]
"""Called once per attempt with (operation, seconds taken, error class name or None on success)."""


def ignore_call(operation: str, seconds: float, error: str | None) -> None:
    """The default observer: reports go nowhere."""


def report(observer: CallObserver, operation: str, started: float,
           error: BaseException | None) -> None:
    """Tell ``observer`` how an attempt that began at ``started`` (``time.perf_counter()``)
    ended."""
    observer(operation, time.perf_counter() - started,
             None if error is None else type(error).__name__)


FAILOVER_WATCH_INTERVAL_S = 0.2  # how often a stalled node's slot owners are re-read

# Errors after which the same command may succeed once the cluster settles (failover, resharding):
# the store's own, from its connections, and redis-py's, from the topology calls.
TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (
    ConnectionLost,
    ReplyTimeout,
    ClusterDownError,
    TryAgainError,
    LoadingError,
    rexc.ConnectionError,
    rexc.TimeoutError,
    rexc.ClusterDownError,
    rexc.TryAgainError,
    rexc.BusyLoadingError,
    rexc.RedisClusterException,  # includes SlotNotCoveredError and failed topology initialisation
    builtins.TimeoutError,
    OSError,
)
# Errors that mean our slot map is stale: refresh the topology before retrying.
REROUTE_ERRORS: tuple[type[BaseException], ...] = (Redirect, ReadOnlyError, rexc.AskError,
                                                   rexc.ReadOnlyError)
# Errors that may mean a node left or changed role: refresh too.
_NODE_ERRORS: tuple[type[BaseException], ...] = (ConnectionLost, ClusterDownError, LoadingError,
                                                 rexc.ConnectionError, rexc.ClusterDownError)


def is_transient(exc: BaseException) -> bool:
    """True when a retry of the same command (after refresh/backoff) may succeed."""
    return isinstance(exc, TRANSIENT_ERRORS + REROUTE_ERRORS)


def needs_refresh(exc: BaseException) -> bool:
    """True when the slot map should be reloaded before the retry (MOVED/ASK/READONLY, lost
    node)."""
    return isinstance(exc, REROUTE_ERRORS + _NODE_ERRORS)


def translate(exc: BaseException, what: str) -> StorageError:
    """Map a redis exception to a storage error (the boundary: nothing above sees redis types)."""
    if isinstance(exc, StorageError):
        return exc
    if isinstance(exc, OutOfMemoryError | rexc.OutOfMemoryError):
        return StorageFull(f"{what}: a Redis node is at its maxmemory: {exc}")
    if is_transient(exc):
        return StorageUnavailable(f"{what}: redis cluster unavailable: {exc}", retry_after_s=1.0)
    return StorageError(f"{what}: {exc}")


class Deadline:
    """A per-call time budget with capped exponential backoff between attempts."""

    def __init__(self, budget_s: float, backoff_s: float, backoff_max_s: float) -> None:
        self._end = time.monotonic() + budget_s
        self._backoff_s = backoff_s
        self._backoff_max_s = backoff_max_s
        self.attempt = 0
        self._quick_left = 8

    def remaining(self) -> float:
        """Seconds left, never negative."""
        return max(0.0, self._end - time.monotonic())

    async def sleep(self, *, quick: bool = False) -> bool:
        """Back off before the next attempt; False (without sleeping) when the budget cannot cover
        it.

        ``quick`` retries at once (a redirect or a loaded script needs no settling time), a few
        times only.
        """
        if quick and self._quick_left > 0 and self.remaining() > 0:
            self._quick_left -= 1
            return True
        delay = min(self._backoff_max_s, self._backoff_s * (2**self.attempt))
        self.attempt += 1
        if delay >= self.remaining():
            return False
        await asyncio.sleep(delay)
        return True


class RoutedCluster(RedisCluster):
    """A cluster client whose slot map, once loaded, only its router reloads.

    redis-py reloads the slot map inside the first command after a connection error, under a lock
    every other command then waits on; when it asks a frozen node, all of them wait out its socket
    timeout, whichever shard they need. Here such a command only tells the router (``on_stale``),
    which reloads in the background while commands to healthy nodes go on with the map they have.
    """

    on_stale: Callable[[], None] = staticmethod(lambda: None)

    async def initialize(self, additional_startup_nodes_info: list[tuple[str, int]] | None = None,
                         last_failed_node_name: str | None = None) -> RoutedCluster:
        manager = self.nodes_manager
        if not (self._initialize and manager.slots_cache):  # the first load, or nothing to do
            await super().initialize(additional_startup_nodes_info, last_failed_node_name)
            return self
        self._initialize = False
        if manager.default_node is None:  # cleared by aclose() after CLUSTERDOWN: any primary will
                                          # do
            manager.default_node = manager.get_nodes_by_server_type(PRIMARY)[0]
        self.on_stale()
        return self


class ClusterRouter:
    """Owns the cluster client (topology: the slot map and CLUSTER INFO)."""

    def __init__(self, cluster: RedisCluster, settings: RedisStoreSettings, *,
                 owns_cluster: bool) -> None:
        self.cluster = cluster
        self.settings = settings
        self._owns_cluster = owns_cluster
        self._closed = False
        self.observer: CallObserver = ignore_call  # told about every attempt (metrics), set by the
                                                   # store's owner
        self._refresh_listeners: list[Callable[[set[NodeAddress]], None]] = []
        self._refreshing: asyncio.Future[None] | None = None
        self._watches: dict[NodeAddress, asyncio.Task[None]] = {}
        self.suspect: NodeAddress | None = None  # the node that failed last: asked last for the
                                                 # slot map
        if isinstance(cluster, RoutedCluster):
            cluster.on_stale = self.refresh_soon

    def on_refresh(self, listener: Callable[[set[NodeAddress]], None]) -> None:
        """Call ``listener`` with the addresses of the primaries after every slot-map refresh."""
        self._refresh_listeners.append(listener)

    @classmethod
    async def connect(cls, settings: RedisStoreSettings) -> ClusterRouter:
        """Build and initialise a cluster client from settings (raises StorageUnavailable)."""
        cluster = RoutedCluster(
            startup_nodes=[ClusterNode(host, port) for host, port in settings.startup_nodes],
            retry=Retry(NoBackoff(), 0),  # the router retries, inside the caller's deadline
            username=settings.username,
            password=settings.password,
            client_name=settings.client_name,
            socket_timeout=settings.socket_timeout_s,
            socket_connect_timeout=settings.socket_connect_timeout_s,
            max_connections=settings.max_connections_per_node,
            decode_responses=False,
            **settings.tls_options(),
        )
        try:
            await cluster.initialize()
        except Exception as exc:
            await cluster.aclose()
            raise translate(exc, "connect") from exc
        return cls(cluster, settings, owns_cluster=True)

    def node_for_slot(self, slot: int) -> NodeAddress:
        """The (host, port) of the primary currently serving a slot, per the cached slot map."""
        node = self.cluster.nodes_manager.get_node_from_slot(slot)
        return node.host, int(node.port)

    def primaries(self) -> list[NodeAddress]:
        """Addresses of every known primary."""
        return [(node.host, int(node.port)) for node in self.cluster.get_primaries()]

    async def refresh(self) -> None:
        """Reload the slot map from the cluster and tell the listeners; concurrent callers share one
        reload, which asks the node that failed last only when no other
        answers."""
        await asyncio.shield(self._reloading())

    def refresh_soon(self) -> None:
        """Start a reload in the background (a command met a stale map); its failure waits for the
        next one."""
        if not self._closed:
            self._reloading()

    def _reloading(self) -> asyncio.Future[None]:
        """The reload under way, started if there is none."""
        if self._refreshing is None:
            self._refreshing = asyncio.ensure_future(self._reload())
            self._refreshing.add_done_callback(self._refreshed)
        return self._refreshing

    def _refreshed(self, done: asyncio.Future[None]) -> None:
        self._refreshing = None
        if not done.cancelled():
            done.exception()  # retrieved: a failed background reload is not an unhandled error

    def watch_failover(self, address: NodeAddress, stalled: Callable[[NodeAddress], bool]) -> None:
        """A request to ``address`` stalls (a frozen node?): re-read the slot map until the node
        answers again or is no longer a primary; the refresh listeners then close its connections,
        and its requests, failed as in doubt, are retried on its successor as soon as the cluster
        has promoted one."""
        self.suspect = address
        if address in self._watches or self._closed:
            return
        task = asyncio.ensure_future(self._watch(address, stalled))
        self._watches[address] = task
        task.add_done_callback(lambda _: self._watches.pop(address, None))

    async def _watch(self, address: NodeAddress, stalled: Callable[[NodeAddress], bool]) -> None:
        while not self._closed:
            with contextlib.suppress(Exception):  # the cluster may still be electing: ask again
                await self.refresh()
            if address not in self.primaries() or not stalled(address):
                return
            await asyncio.sleep(FAILOVER_WATCH_INTERVAL_S)

    async def _reload(self) -> None:
        suspect = None if self.suspect is None else f"{self.suspect[0]}:{self.suspect[1]}"
        async with asyncio.timeout(self.settings.topology_timeout_s):
            await self.cluster.nodes_manager.initialize(last_failed_node_name=suspect)
        primaries = set(self.primaries())
        for listener in self._refresh_listeners:
            listener(primaries)

    async def call(self, what: str, budget_s: float, op: Callable[[], Awaitable[T]]) -> T:
        """Run ``op`` until it succeeds, retrying transient errors inside ``budget_s`` (reads,
        admin)."""
        deadline = Deadline(budget_s, self.settings.retry_backoff_s,
                            self.settings.retry_backoff_max_s)
        while True:
            started = time.perf_counter()
            try:
                async with asyncio.timeout(deadline.remaining()):
                    result = await op()
            except Exception as exc:
                report(self.observer, what, started, exc)
                if not is_transient(exc):
                    raise translate(exc, what) from exc
                await self.recover(exc)
                if not await deadline.sleep():
                    raise translate(exc, what) from exc
            else:
                report(self.observer, what, started, None)
                return result

    async def call_on_slot(self, lanes: NodeLanes, what: str, budget_s: float, slot: int,
                           command: tuple[Any, ...]) -> Any:
        """One command on the node connection of the slot's primary, as ``call`` retries it (the
        slot's primary asked again after a refresh); an error reply is raised."""
        return await self.call(what, budget_s, lambda: self.execute_on(lanes, slot, command))

    async def execute_on(self, lanes: NodeLanes, slot: int, command: tuple[Any, ...]) -> Any:
        """One attempt of one command on the node connection of the slot's primary (per the
        cached slot map); an error reply is raised."""
        return await lanes.execute_one(self.node_for_slot(slot), command)

    async def recover(self, exc: BaseException) -> None:
        """Refresh the slot map when ``exc`` says it is stale; a failed refresh is left to the next
        try."""
        failed = getattr(exc, "last_failed_node_name", None)  # redis-py names the node a command
                                                              # failed on
        if isinstance(failed, str) and ":" in failed:
            host, _, port = failed.rpartition(":")
            self.suspect = (host, int(port))
        if needs_refresh(exc):
            # A failed refresh (the cluster may still be electing) is left to the caller's next
            # attempt.
            with contextlib.suppress(Exception):
                await self.refresh()

    async def aclose(self) -> None:
        """Stop the failover watches and, if owned, close the cluster client (idempotent)."""
        if self._closed:
            return
        self._closed = True
        for task in [*self._watches.values(), *([self._refreshing] if self._refreshing else [])]:
            task.cancel()
        if self._owns_cluster:
            await self.cluster.aclose()
