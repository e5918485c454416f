"""etcd access: the connection, the topic registry stored in etcd, and the watch that feeds
``TopicCache``.

This is the only module that imports ``aetcd``. Every aetcd/gRPC failure is translated here into
``CoordinationUnavailable`` (``HistoryCompacted`` for a watch behind etcd's compaction), so nothing
above sees etcd types. aetcd has no type hints: its objects are ``Any`` inside this module only and
are turned into the typed values below (``StoredValue``, ``Snapshot``, ``WatchEvent``) before
leaving it.

Layout under the prefix (default ``/streamgate/``): ``topics/<name>`` ->
``TopicMetadata.to_json()``; a topic's ``version`` is the key's ``mod_revision``, which makes every
update a compare-and-swap. Consumer groups live under ``groups/`` (see ``partitioner.membership``);
this module only offers the lease, guarded put and watch primitives they need.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import AsyncIterator, Coroutine, Iterator, Sequence
from dataclasses import dataclass, replace
from types import TracebackType
from typing import Any, Literal, cast

import aetcd
import aetcd.watcher
import grpc

from partitioner.cache import TopicCache
from partitioner.errors import (
    ConcurrentModification,
    CoordinationUnavailable,
    HistoryCompacted,
    PartitionerError,
    TopicExists,
    TopicNotFound,
)
from partitioner.observer import CallObserver, ignore_call, report
from partitioner.tasks import cancel_until_done
from partitioner.topics import TopicMetadata, TopicSettings, validate_settings

__all__ = [
    "EtcdConnection",
    "EtcdTls",
    "EtcdTopicRegistry",
    "EtcdWatch",
    "Guard",
    "Snapshot",
    "StoredValue",
    "TopicWatcher",
    "WatchEvent",
    "open_etcd",
]

log = logging.getLogger(__name__)

DEFAULT_PREFIX = "/streamgate/"
REVOKE_RETRY_S = 300.0  # how long a lease that could not be revoked is retried
REVOKE_BACKOFF_S = 0.2  # between revocation attempts, doubling...
REVOKE_BACKOFF_MAX_S = 1.0  # ...up to this: a recovered etcd is seen within about a second
PING_KEY = b"/streamgate-ping"
RETIRE_MARGIN_S = 1.0  # past the call timeout, before a replaced client is closed
# etcd's require-leader metadata: a member cut off from its peers refuses requests and ends watches
# at once, instead of letting requests time out and watches fall silent
REQUIRE_LEADER = (("hasleader", "true"),)


@dataclass(frozen=True, slots=True)
class StoredValue:
    """One key as etcd stores it."""

    key: bytes
    value: bytes
    create_revision: int
    mod_revision: int
    lease_id: int = 0  # 0 when no lease is attached


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Every key under a prefix, read at one ``revision``."""

    values: list[StoredValue]
    revision: int


@dataclass(frozen=True, slots=True)
class WatchEvent:
    """A put or delete of one key; ``mod_revision`` is the revision of the change.

    For a put, ``create_revision`` and ``lease_id`` describe the key as stored; for a delete they
    are 0.
    """

    kind: Literal["put", "delete"]
    key: bytes
    value: bytes
    mod_revision: int
    create_revision: int = 0
    lease_id: int = 0


@dataclass(frozen=True, slots=True)
class Guard:
    """A transaction precondition: ``key``'s create_revision (or mod_revision) equals ``revision``.

    ``revision == 0`` means "the key is absent".
    """

    key: bytes
    revision: int
    target: Literal["create", "mod"] = "create"


@contextlib.contextmanager
def _etcd_errors(operation: str) -> Iterator[None]:
    """Translate aetcd/gRPC failures of ``operation`` into partitioner errors."""
    try:
        yield
    except aetcd.RevisionCompactedError as exc:
        raise HistoryCompacted(int(exc.compacted_revision)) from exc
    except (aetcd.ClientError, aetcd.rpc.AioRpcError, TimeoutError, OSError) as exc:
        raise CoordinationUnavailable(f"etcd {operation} failed: {exc}") from exc


def _stored(raw_kv: Any) -> StoredValue:
    return StoredValue(bytes(raw_kv.key), bytes(raw_kv.value), int(raw_kv.create_revision),
                       int(raw_kv.mod_revision), int(raw_kv.lease))


async def _finished_within(operation: Coroutine[Any, Any, Any], timeout_s: float) -> bool:
    """Run ``operation`` for at most ``timeout_s``; False (and cancelled, not awaited) if it did not
    finish.

    Unlike ``asyncio.wait_for`` this never waits for a cancellation that aetcd swallows. Failures
    are logged.
    """
    task = asyncio.ensure_future(operation)
    done, _ = await asyncio.wait({task}, timeout=timeout_s)
    if not done:
        task.cancel()
        return False
    if not task.cancelled() and task.exception() is not None:
        log.debug("etcd cleanup failed: %r", task.exception())
    return True


def _compares(client: Any, guards: Sequence[Guard]) -> list[Any]:
    """aetcd transaction compares for ``guards``."""
    return [(client.transactions.create(guard.key) if guard.target == "create"
             else client.transactions.mod(guard.key)) == guard.revision for guard in guards]


def _split_endpoint(endpoint: str) -> tuple[str, int]:
    """``"host:port"`` (optionally ``http://`` or ``https://``) -> (host, port)."""
    host, _, port = endpoint.removeprefix("http://").removeprefix("https://").rpartition(":")
    if not host or not (port.isascii() and port.isdigit()):
        raise ValueError(f"etcd endpoint must look like host:port, got {endpoint!r}")
    return host, int(port)


class EtcdWatch:
    """A live watch on a key prefix; iterate for events, ``cancel`` to stop."""

    def __init__(self, handle: Any, prefix: bytes = b"", start_revision: int = 0) -> None:
        self._handle = handle
        self._prefix = prefix
        self._start_revision = start_revision

    async def events(self) -> AsyncIterator[WatchEvent]:
        """Events in revision order; raises ``CoordinationUnavailable`` when the watch dies.

        An event outside the watched prefix or older than the start revision means aetcd bound this
        watch to another create request (see ``EtcdConnection._reset_watch_stream``); that also
        raises, so the caller re-watches instead of following the wrong keys.
        """
        with _etcd_errors("watch"):
            async for event in self._handle:
                yield self._checked(self._convert(event))

    def _checked(self, event: WatchEvent) -> WatchEvent:
        if not event.key.startswith(self._prefix) or event.mod_revision < self._start_revision:
            raise CoordinationUnavailable(
                f"watch on {self._prefix!r} from revision {self._start_revision} "
                f"received {event.key!r} at revision {event.mod_revision}"
            )
        return event

    @staticmethod
    def _convert(event: Any) -> WatchEvent:
        kv = event.kv
        if str(event.kind) == "PUT":
            return WatchEvent("put", bytes(kv.key), bytes(kv.value), int(kv.mod_revision),
                              int(kv.create_revision), int(kv.lease))
        return WatchEvent("delete", bytes(kv.key), bytes(kv.value), int(kv.mod_revision))

    async def cancel(self) -> None:
        """Stop the watch; safe to call on a dead watch."""
        with contextlib.suppress(Exception):
            await self._handle.cancel()


@dataclass(frozen=True, slots=True)
class EtcdTls:
    """TLS to etcd (https:// client URLs): the CA that signed etcd's certificate, a client
    certificate for mutual TLS (``--client-cert-auth``), and the name to check in etcd's certificate
    when it is not the host."""

    ca_path: str | None = None  # None: the system's CAs
    cert_path: str | None = None
    key_path: str | None = None
    server_name: str | None = None

    def __post_init__(self) -> None:
        if bool(self.cert_path) != bool(self.key_path):
            raise ValueError("the etcd client certificate and key must be set together")

    def credentials(self) -> grpc.ChannelCredentials:
        """gRPC channel credentials from the PEM files; OSError when one cannot be read."""
        return grpc.ssl_channel_credentials(root_certificates=_read(self.ca_path),
                                            private_key=_read(self.key_path),
                                            certificate_chain=_read(self.cert_path))


def _read(path: str | None) -> bytes | None:
    if not path:
        return None
    with open(path, "rb") as file:
        return file.read()


class _TlsClient(aetcd.Client):  # type: ignore[misc]  # aetcd is untyped
    """aetcd 1.0.0 only opens plaintext channels; this is its ``connect`` over a TLS channel.

    Same stubs and watcher as aetcd's own connect; etcd user/password auth is not supported here
    (the gateway authenticates to etcd with its client certificate).
    """

    def __init__(self, host: str, port: int, timeout: float, tls: EtcdTls,
                 credentials: grpc.ChannelCredentials,
                 ) -> None:
        options = {"grpc.ssl_target_name_override": tls.server_name} if tls.server_name else {}
        super().__init__(host=host, port=port, timeout=timeout, options=options)
        self._credentials = credentials

    async def connect(self) -> None:
        if self._connected.is_set():
            return
        # Nothing here awaits, so no second coroutine can see a half-built client.
        self.channel = aetcd.rpc.secure_channel(f"{self._host}:{self._port}", self._credentials,
                                                options=list(self._options.items()))
        self.kvstub = aetcd.rpc.KVStub(self.channel)
        self.clusterstub = aetcd.rpc.ClusterStub(self.channel)
        self.leasestub = aetcd.rpc.LeaseStub(self.channel)
        self.maintenancestub = aetcd.rpc.MaintenanceStub(self.channel)
        self._watcher = aetcd.watcher.Watcher(aetcd.rpc.WatchStub(self.channel),
                                              timeout=self._timeout, metadata=self.metadata)
        self._connected.set()


class EtcdConnection:
    """One aetcd client with a typed surface. An async context manager; ``aclose`` is idempotent.

    aetcd talks to a single endpoint: on open the first of ``endpoints`` that answers a linearizable
    read is used. After a failed call, when that member no longer answers one either (it is down,
    unreachable, or without a leader), the connection moves to the next endpoint that does; the old
    client is closed once the calls under way on it had their timeout, so its watches end and their
    owners re-watch through the new one.
    """

    def __init__(self, endpoints: Sequence[str], timeout_s: float,
                 tls: EtcdTls | None = None) -> None:
        if not endpoints:
            raise ValueError("at least one etcd endpoint is required")
        self._endpoints = [_split_endpoint(endpoint) for endpoint in endpoints]
        self._timeout_s = timeout_s
        self._tls = tls
        self._client: Any = None
        # told about every call (metrics), set by the owner
        self.observer: CallObserver = ignore_call
        self.endpoint = ""
        self._current = 0  # index of the endpoint in use
        self._failover: asyncio.Task[None] | None = None
        self._retired: list[Any] = []  # clients replaced by a failover, closed once idle
        self._revocations: set[asyncio.Task[None]] = set()

    async def __aenter__(self) -> EtcdConnection:
        await self.open()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.aclose()

    async def open(self) -> None:
        """Connect to the first endpoint that answers; ``CoordinationUnavailable`` if none does."""
        last_error: CoordinationUnavailable | None = None
        credentials = self._tls_credentials()
        for index, (host, port) in enumerate(self._endpoints):
            self._client = self._new_client(host, port, credentials)
            try:
                await self.ping()
            except CoordinationUnavailable as exc:
                last_error = exc
                await self.aclose()
                continue
            self._current, self.endpoint = index, f"{host}:{port}"
            return
        assert last_error is not None
        raise last_error

    def _new_client(self, host: str, port: int,
                    credentials: grpc.ChannelCredentials | None) -> Any:
        if self._tls is None or credentials is None:
            client = aetcd.Client(host=host, port=port, timeout=self._timeout_s)
        else:
            client = _TlsClient(host, port, self._timeout_s, self._tls, credentials)
        client.metadata = REQUIRE_LEADER
        return client

    def _check_member(self) -> None:
        """After a failed call: one background check of the member in use (see the class doc)."""
        if len(self._endpoints) > 1 and (self._failover is None or self._failover.done()):
            self._failover = asyncio.ensure_future(self._fail_over())

    async def _answers(self, client: Any) -> bool:
        """Whether the client's member answers a linearizable read in time."""
        try:
            with _etcd_errors("ping"):
                await asyncio.wait_for(client.get(PING_KEY), self._timeout_s)
        except PartitionerError:
            return False
        return True

    async def _fail_over(self) -> None:
        client = self._client
        if client is None or await self._answers(client):
            return
        credentials = self._tls_credentials()
        for step in range(1, len(self._endpoints)):
            index = (self._current + step) % len(self._endpoints)
            host, port = self._endpoints[index]
            candidate = self._new_client(host, port, credentials)
            answers = await self._answers(candidate)
            if not answers or self._client is not client:  # no, or closed meanwhile
                await _finished_within(candidate.close(), self._timeout_s)
                if answers or self._client is not client:
                    return
                continue
            log.warning("etcd member %s stopped answering; moving to %s:%d", self.endpoint,
                        host, port)
            self._client, self._current, self.endpoint = candidate, index, f"{host}:{port}"
            # Closing a channel cancels its calls in flight, and a cancelled call surfaces as a
            # CancelledError that would end its caller's task: calls already under way get their
            # own timeout to finish on the old member first.
            self._retired.append(client)
            await asyncio.sleep(self._timeout_s + RETIRE_MARGIN_S)
            self._retired.remove(client)
            await _finished_within(client.close(), self._timeout_s)
            return

    def _tls_credentials(self) -> grpc.ChannelCredentials | None:
        if self._tls is None:
            return None
        try:
            return self._tls.credentials()
        except OSError as exc:
            raise CoordinationUnavailable(
                f"etcd TLS: cannot read a certificate or key file: {exc}"
            ) from exc

    async def aclose(self) -> None:
        """Close the client (and its watches). Safe to call more than once."""
        failover, self._failover = self._failover, None
        await cancel_until_done([*self._revocations, *([failover] if failover else [])])
        retired, self._retired = self._retired, []
        for old in retired:
            await _finished_within(old.close(), self._timeout_s)
        client, self._client = self._client, None
        if client is not None and not await _finished_within(client.close(), self._timeout_s):
            log.warning("etcd client did not close within %.1fs; abandoning it", self._timeout_s)

    @contextlib.contextmanager
    def _observed(self, operation: str) -> Iterator[None]:
        """Translate failures like ``_etcd_errors`` and report the call's time and outcome to the
        observer."""
        name, started = operation.replace(" ", "_"), time.perf_counter()
        try:
            with _etcd_errors(operation):
                yield
        except PartitionerError as exc:
            report(self.observer, name, started, exc.__cause__ or exc)
            if isinstance(exc, CoordinationUnavailable):
                self._check_member()
            raise
        report(self.observer, name, started, None)

    @property
    def _live(self) -> Any:
        if self._client is None:
            raise CoordinationUnavailable("etcd connection is closed")
        return self._client

    async def ping(self) -> None:
        """A linearizable read, so it needs an etcd leader: the readiness probe."""
        with self._observed("ping"):
            await self._live.get(PING_KEY)

    async def get(self, key: bytes) -> StoredValue | None:
        """One key, or None when absent."""
        with self._observed("get"):
            result = await self._live.get(key)
        return None if result is None else _stored(result)

    async def get_prefix(self, prefix: bytes) -> Snapshot:
        """Every key under ``prefix`` sorted by key, with the revision the read saw."""
        with self._observed("get_prefix"):
            result = await self._live.get_prefix(prefix, sort_order="ascend", sort_target="key")
        return Snapshot([_stored(kv) for kv in result.kvs], int(result.header.revision))

    async def put_if_absent(self, key: bytes, value: bytes,
                            lease_id: int | None = None) -> int | None:
        """Create ``key`` (attached to ``lease_id`` if given); its revision, or None when it already
        exists."""
        return await self.put_if(key, value, guards=[Guard(key, 0)], lease_id=lease_id)

    async def put(self, key: bytes, value: bytes, lease_id: int | None = None) -> int:
        """Store ``key`` unconditionally; returns the new revision.

        As in etcd, a put without ``lease_id`` detaches the key from any lease it had.
        """
        with self._observed("put"):
            result = await self._live.put(key, value, lease=lease_id)
        return int(result.header.revision)

    async def put_if(self, key: bytes, value: bytes, *, guards: Sequence[Guard],
                     lease_id: int | None = None) -> int | None:
        """Store ``key`` only if every guard holds (one transaction); the new revision, or None if
        not."""
        client = self._live
        compare = _compares(client, guards)
        with self._observed("transaction"):
            succeeded, responses = await client.transaction(
                compare=compare,
                success=[client.transactions.put(key, value, lease=lease_id)],
                failure=[],
            )
        return int(responses[0].response_put.header.revision) if succeeded else None

    async def grant_lease(self, ttl_s: float) -> tuple[int, int]:
        """A new lease of at least ``ttl_s`` (rounded up to whole seconds): (lease id, granted TTL
        in s)."""
        with self._observed("lease grant"):
            lease = await self._live.lease(max(1, math.ceil(ttl_s)))
        return int(lease.id), int(lease.ttl)

    async def keep_alive(self, lease_id: int) -> int:
        """Refresh a lease once; its remaining TTL in seconds, 0 when etcd no longer knows the
        lease."""
        with self._observed("lease keepalive"):
            reply = await self._live.refresh_lease(lease_id)
        return 0 if reply is None else int(reply.TTL)

    async def revoke_lease(self, lease_id: int) -> None:
        """Revoke a lease: every key attached to it is deleted at once."""
        with self._observed("lease revoke"):
            await self._live.revoke_lease(lease_id)

    def revoke_when_reachable(self, lease_id: int) -> None:
        """Revoke ``lease_id`` in the background, retrying while etcd is unreachable, for at most
        ``REVOKE_RETRY_S``. A lease outlives an etcd restart by its TTL, and its keys (a member that
        is gone, a coordinator, a partition owner) would hold the others back that long after etcd
        is back."""
        task = asyncio.ensure_future(self._revoke_until_done(lease_id))
        self._revocations.add(task)
        task.add_done_callback(self._revocations.discard)

    async def _revoke_until_done(self, lease_id: int) -> None:
        give_up_at = time.monotonic() + REVOKE_RETRY_S
        delay_s = REVOKE_BACKOFF_S
        while self._client is not None:
            try:
                await self.revoke_lease(lease_id)
                log.info("revoked lease %x once etcd answered again", lease_id)
                return
            except CoordinationUnavailable as exc:
                if "not found" in str(exc) or time.monotonic() + delay_s > give_up_at:
                    return  # expired meanwhile, or it will expire on etcd's clock
            await asyncio.sleep(delay_s)
            delay_s = min(delay_s * 2, REVOKE_BACKOFF_MAX_S)

    async def put_if_unchanged(self, key: bytes, value: bytes,
                               mod_revision: int) -> tuple[int | None, StoredValue | None]:
        """Overwrite ``key`` only if it exists at ``mod_revision``.

        Returns (new revision, None) on success, else (None, the current value or None when absent).
        """
        client = self._live
        with self._observed("update"):
            succeeded, responses = await client.transaction(
                compare=[client.transactions.mod(key) == mod_revision,
                         client.transactions.create(key) > 0],
                success=[client.transactions.put(key, value)],
                failure=[client.transactions.get(key)],
            )
        if succeeded:
            return int(responses[0].response_put.header.revision), None
        found = cast(list[tuple[bytes, Any]], responses[0])
        return None, (_stored(found[0][1]) if found else None)

    async def delete(self, key: bytes) -> StoredValue | None:
        """Delete ``key`` and return what it held (one atomic request), or None when absent."""
        with self._observed("delete"):
            result = await self._live.delete(key, prev_kv=True)
        return None if result is None or result.prev_kv is None else _stored(result.prev_kv)

    async def delete_prefix(self, prefix: bytes) -> int:
        """Delete every key under ``prefix`` (one request); how many were deleted."""
        with self._observed("delete_prefix"):
            result = await self._live.delete_prefix(prefix)
        return int(result.deleted)

    async def delete_if(self, key: bytes, *, guards: Sequence[Guard]) -> bool:
        """Delete ``key`` only if every guard holds (one transaction); False when a guard failed."""
        client = self._live
        compare = _compares(client, guards)
        with self._observed("transaction"):
            succeeded, _ = await client.transaction(compare=compare,
                                                    success=[client.transactions.delete(key)],
                                                    failure=[])
        return bool(succeeded)

    async def watch_prefix(self, prefix: bytes, start_revision: int) -> EtcdWatch:
        """Start watching ``prefix`` from ``start_revision`` (inclusive); returns once etcd accepted
        it.

        Raises ``HistoryCompacted`` when ``start_revision`` is older than etcd's history.
        """
        try:
            with self._observed("watch"):
                handle = await self._live.watch_prefix(prefix, start_revision=start_revision)
        except HistoryCompacted:
            raise
        except CoordinationUnavailable:
            await self._reset_watch_stream()
            raise
        return EtcdWatch(handle, prefix, start_revision)

    async def _reset_watch_stream(self) -> None:
        """Drop aetcd's shared watch stream after a failed watch create.

        aetcd matches watch-create replies to requests by order: a create that timed out while etcd
        was unreachable stays queued on the stream, and when etcd answers, its reply is handed to
        the *next* watch created on this client, which then silently follows the wrong prefix from
        the wrong revision. Shutting the stream down discards the stale request; every other watch
        of this connection ends too (its iterator stops) and its owner re-watches from its last
        revision + 1.
        """
        client = self._client
        watcher = getattr(client, "_watcher", None)
        if watcher is None:
            return
        if not await _finished_within(watcher.shutdown(), self._timeout_s):
            # A wedged stream must not wedge its caller: start a fresh watcher instead.
            log.warning("etcd watch stream did not shut down within %.1fs; replacing it",
                        self._timeout_s)
            client._watcher = aetcd.watcher.Watcher(aetcd.rpc.WatchStub(client.channel),
                                                    timeout=self._timeout_s,
                                                    metadata=client.metadata)


def open_etcd(endpoints: Sequence[str], timeout_s: float,
              tls: EtcdTls | None = None) -> EtcdConnection:
    """An unopened ``EtcdConnection``; use as ``async with open_etcd(...) as conn`` (``tls``: https
    to etcd)."""
    return EtcdConnection(endpoints, timeout_s, tls)


def _topics_prefix(prefix: str) -> str:
    return prefix.rstrip("/") + "/topics/"


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class EtcdTopicRegistry:
    """``TopicRegistry`` in etcd: ``<prefix>topics/<name>``, version = the key's mod_revision."""

    def __init__(self, conn: EtcdConnection, prefix: str = DEFAULT_PREFIX) -> None:
        self._conn = conn
        self._topics_prefix = _topics_prefix(prefix)

    def _key(self, name: str) -> bytes:
        return f"{self._topics_prefix}{name}".encode()

    async def create(self, settings: TopicSettings, owner: str) -> TopicMetadata:
        """Record a new topic; ``TopicExists`` if the name is taken (atomic: create_revision ==
        0)."""
        validate_settings(settings)
        metadata = TopicMetadata(settings.name, settings.partitions, settings.retention_ms,
                                 settings.max_length, _now_ms(), owner,
                                 key_index=settings.key_index, compact=settings.compact)
        revision = await self._conn.put_if_absent(self._key(settings.name), metadata.to_json())
        if revision is None:
            raise TopicExists(settings.name)
        return _with_version(metadata, revision)

    async def get(self, name: str) -> TopicMetadata:
        """Read one topic; ``TopicNotFound`` if absent."""
        stored = await self._conn.get(self._key(name))
        if stored is None:
            raise TopicNotFound(name)
        return TopicMetadata.from_json(stored.value, stored.mod_revision)

    async def list(self) -> Sequence[TopicMetadata]:
        """Every topic, sorted by name."""
        snapshot = await self._conn.get_prefix(self._topics_prefix.encode())
        return [TopicMetadata.from_json(kv.value, kv.mod_revision) for kv in snapshot.values]

    async def update(self, metadata: TopicMetadata) -> TopicMetadata:
        """Store ``metadata`` if the topic is still at ``metadata.version``.

        ``ConcurrentModification`` when someone changed it since, ``TopicNotFound`` when it is gone.
        """
        validate_settings(TopicSettings(metadata.name, metadata.partitions, metadata.retention_ms,
                                        metadata.max_length))
        key = self._key(metadata.name)
        revision, current = await self._conn.put_if_unchanged(key, metadata.to_json(),
                                                              metadata.version)
        if revision is not None:
            return _with_version(metadata, revision)
        if current is None:
            raise TopicNotFound(metadata.name)
        raise ConcurrentModification(metadata.name)

    async def delete(self, name: str) -> TopicMetadata:
        """Remove a topic and return what it was; ``TopicNotFound`` if absent."""
        deleted = await self._conn.delete(self._key(name))
        if deleted is None:
            raise TopicNotFound(name)
        return TopicMetadata.from_json(deleted.value, deleted.mod_revision)


def _with_version(metadata: TopicMetadata, version: int) -> TopicMetadata:
    return replace(metadata, version=version)


class TopicWatcher:
    """Keeps a ``TopicCache`` in step with etcd: a snapshot on enter, then a watch in a background
    task.

    When the watch dies (etcd restarted or unreachable) ``healthy`` turns False and the watch is
    retried with capped exponential backoff from ``cache.revision + 1``; if etcd compacted that
    history, a full snapshot is reloaded first. Entering raises ``CoordinationUnavailable`` if the
    first snapshot cannot be read.
    """

    def __init__(self, conn: EtcdConnection, cache: TopicCache, prefix: str = DEFAULT_PREFIX,
                 initial_backoff_s: float = 0.1, max_backoff_s: float = 2.0) -> None:
        self._conn = conn
        self._cache = cache
        self._topics_prefix = _topics_prefix(prefix).encode()
        self._initial_backoff_s = initial_backoff_s
        self._max_backoff_s = max_backoff_s
        self._backoff_s = initial_backoff_s
        self._synced = asyncio.Event()
        self._progress = asyncio.Condition()
        self._task: asyncio.Task[None] | None = None

    @property
    def healthy(self) -> bool:
        """True while a watch is established and events flow into the cache."""
        return self._synced.is_set()

    async def __aenter__(self) -> TopicWatcher:
        await self._load_snapshot()
        self._task = asyncio.create_task(self._run(), name="streamgate-topic-watcher")
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Cancel and await the background watch. Safe to call more than once."""
        task, self._task = self._task, None
        if task is not None:
            # a cancel inside the watch's gRPC call surfaces as a retried error
            await cancel_until_done([task])
        self._synced.clear()

    async def wait_synced(self, timeout_s: float | None = None) -> bool:
        """Wait until the watch is established; False if ``timeout_s`` passed first."""
        try:
            await asyncio.wait_for(self._synced.wait(), timeout_s)
        except TimeoutError:
            return False
        return True

    async def wait_for_revision(self, revision: int, timeout_s: float) -> bool:
        """Wait until the cache has applied ``revision`` (e.g. our own write); False on timeout."""
        async with self._progress:
            try:
                await asyncio.wait_for(
                    self._progress.wait_for(lambda: self._cache.revision >= revision), timeout_s)
            except TimeoutError:
                return False
        return True

    async def _load_snapshot(self) -> None:
        snapshot = await self._conn.get_prefix(self._topics_prefix)
        topics = [TopicMetadata.from_json(kv.value, kv.mod_revision) for kv in snapshot.values]
        self._cache.replace_all(topics, snapshot.revision)
        await self._notify_progress()

    async def _run(self) -> None:
        while True:
            try:
                await self._follow()
            except HistoryCompacted as exc:
                log.warning("topic watch fell behind compaction (%s); reloading snapshot", exc)
                await self._reload_after_compaction()
                continue
            except CoordinationUnavailable as exc:
                log.warning("topic watch lost: %s; retrying in %.2fs", exc, self._backoff_s)
            self._synced.clear()
            await self._sleep_backoff()

    async def _follow(self) -> None:
        """Watch from the cache's revision until the watch ends or fails."""
        watch = await self._conn.watch_prefix(self._topics_prefix, self._cache.revision + 1)
        self._synced.set()
        self._backoff_s = self._initial_backoff_s
        try:
            async for event in watch.events():
                self._apply(event)
                await self._notify_progress()
        finally:
            self._synced.clear()
            await watch.cancel()

    async def _reload_after_compaction(self) -> None:
        self._synced.clear()
        try:
            await self._load_snapshot()
        except CoordinationUnavailable as exc:
            log.warning("topic snapshot reload failed: %s", exc)
            await self._sleep_backoff()

    async def _sleep_backoff(self) -> None:
        await asyncio.sleep(self._backoff_s)
        self._backoff_s = min(self._backoff_s * 2, self._max_backoff_s)

    def _apply(self, event: WatchEvent) -> None:
        if event.kind == "delete":
            name = event.key[len(self._topics_prefix):].decode()
            self._cache.forget(name, event.mod_revision)
            return
        try:
            self._cache.remember(TopicMetadata.from_json(event.value, event.mod_revision))
        except (ValueError, KeyError, TypeError):
            log.exception("ignoring unreadable topic metadata at %r", event.key)

    async def _notify_progress(self) -> None:
        async with self._progress:
            self._progress.notify_all()
