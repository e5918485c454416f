"""The connection to etcd: one aetcd client behind a typed surface (reads, guarded writes, leases,
watches) that fails over between endpoints; every failure leaves it as a ``partitioner`` error."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Iterator, Sequence
from types import TracebackType
from typing import Any, cast

from partitioner.backoff import Backoff
from partitioner.errors import CoordinationUnavailable, HistoryCompacted, PartitionerError
from partitioner.etcd.aetcd_client import (
    EtcdWatch,
    channel_credentials,
    compares,
    etcd_errors,
    finished_within,
    new_client,
    reset_watch_stream,
    stored_value,
)
from partitioner.etcd.values import EtcdTls, Guard, Snapshot, StoredValue
from partitioner.observer import CallObserver, ignore_call, report
from partitioner.tasks import cancel_until_done

__all__ = ["EtcdConnection", "open_etcd"]

log = logging.getLogger(__name__)

REVOKE_RETRY_S = 300.0  # how long a lease that could not be revoked is retried
PING_KEY = b"/streamgate-ping"
RETIRE_MARGIN_S = 1.0  # past the call timeout, before a replaced client is closed


def _split_endpoint(endpoint: str) -> tuple[str, int]:
    """``"host:port"`` (optionally ``http://`` or ``https://``) -> (host, port)."""
    host, _, port = endpoint.removeprefix("http://").removeprefix("https://").rpartition(":")
    if not host or not (port.isascii() and port.isdigit()):
        raise ValueError(f"etcd endpoint must look like host:port, got {endpoint!r}")
    return host, int(port)


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
        credentials = channel_credentials(self._tls)
        for index, (host, port) in enumerate(self._endpoints):
            self._client = new_client(host, port, self._timeout_s, self._tls, credentials)
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

    def _check_member(self) -> None:
        """After a failed call: one background check of the member in use (see the class doc)."""
        if len(self._endpoints) > 1 and (self._failover is None or self._failover.done()):
            self._failover = asyncio.ensure_future(self._fail_over())

    async def _answers(self, client: Any) -> bool:
        """Whether the client's member answers a linearizable read in time."""
        try:
            with etcd_errors("ping"):
                await asyncio.wait_for(client.get(PING_KEY), self._timeout_s)
        except PartitionerError:
            return False
        return True

    async def _fail_over(self) -> None:
        client = self._client
        if client is None or await self._answers(client):
            return
        credentials = channel_credentials(self._tls)
        for step in range(1, len(self._endpoints)):
            index = (self._current + step) % len(self._endpoints)
            host, port = self._endpoints[index]
            candidate = new_client(host, port, self._timeout_s, self._tls, credentials)
            answers = await self._answers(candidate)
            if not answers or self._client is not client:  # no, or closed meanwhile
                await finished_within(candidate.close(), self._timeout_s)
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
            await finished_within(client.close(), self._timeout_s)
            return

    async def aclose(self) -> None:
        """Close the client (and its watches). Safe to call more than once."""
        failover, self._failover = self._failover, None
        await cancel_until_done([*self._revocations, *([failover] if failover else [])])
        retired, self._retired = self._retired, []
        for old in retired:
            await finished_within(old.close(), self._timeout_s)
        client, self._client = self._client, None
        if client is not None and not await finished_within(client.close(), self._timeout_s):
            log.warning("etcd client did not close within %.1fs; abandoning it", self._timeout_s)

    @contextlib.contextmanager
    def _observed(self, operation: str) -> Iterator[None]:
        """Translate failures like ``etcd_errors`` and report the call's time and outcome to the
        observer."""
        name, started = operation.replace(" ", "_"), time.perf_counter()
        try:
            with etcd_errors(operation):
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
        return None if result is None else stored_value(result)

    async def get_prefix(self, prefix: bytes) -> Snapshot:
        """Every key under ``prefix`` sorted by key, with the revision the read saw."""
        with self._observed("get_prefix"):
            result = await self._live.get_prefix(prefix, sort_order="ascend", sort_target="key")
        return Snapshot([stored_value(kv) for kv in result.kvs], int(result.header.revision))

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
        compare = compares(client, guards)
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
        backoff = Backoff()  # capped: a recovered etcd is seen within about half a second
        while self._client is not None:
            try:
                await self.revoke_lease(lease_id)
                log.info("revoked lease %x once etcd answered again", lease_id)
                return
            except CoordinationUnavailable as exc:
                if "not found" in str(exc) or time.monotonic() + backoff.delay_s > give_up_at:
                    return  # expired meanwhile, or it will expire on etcd's clock
            await backoff.sleep()

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
        return None, (stored_value(found[0][1]) if found else None)

    async def delete(self, key: bytes) -> StoredValue | None:
        """Delete ``key`` and return what it held (one atomic request), or None when absent."""
        with self._observed("delete"):
            result = await self._live.delete(key, prev_kv=True)
        return None if result is None or result.prev_kv is None else stored_value(result.prev_kv)

    async def delete_prefix(self, prefix: bytes) -> int:
        """Delete every key under ``prefix`` (one request); how many were deleted."""
        with self._observed("delete_prefix"):
            result = await self._live.delete_prefix(prefix)
        return int(result.deleted)

    async def delete_if(self, key: bytes, *, guards: Sequence[Guard]) -> bool:
        """Delete ``key`` only if every guard holds (one transaction); False when a guard failed."""
        client = self._live
        compare = compares(client, guards)
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
            await reset_watch_stream(self._client, self._timeout_s)
            raise
        return EtcdWatch(handle, prefix, start_revision)


def open_etcd(endpoints: Sequence[str], timeout_s: float,
              tls: EtcdTls | None = None) -> EtcdConnection:
    """An unopened ``EtcdConnection``; use as ``async with open_etcd(...) as conn`` (``tls``: https
    to etcd)."""
    return EtcdConnection(endpoints, timeout_s, tls)
