"""Everything that touches aetcd and gRPC: building a client, translating its failures, and turning
its untyped replies and watch events into ``partitioner.etcd.values``."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Coroutine, Iterator, Sequence
from typing import Any

import aetcd
import aetcd.watcher
import grpc

from partitioner.errors import CoordinationUnavailable, HistoryCompacted
from partitioner.etcd.values import EtcdTls, Guard, StoredValue, WatchEvent

__all__ = ["EtcdWatch", "TlsClient", "channel_credentials", "compares", "etcd_errors",
           "finished_within", "new_client", "reset_watch_stream", "stored_value"]

log = logging.getLogger(__name__)

# aetcd 1.x lacks two things streamgate needs, so this module (and only it) reaches into aetcd's
# internals, which is why pyproject pins aetcd<2: a TLS connect (TlsClient) and a way to drop a
# watch stream that a timed-out create has poisoned (reset_watch_stream).

# etcd's require-leader metadata: a member cut off from its peers refuses requests and ends watches
# at once, instead of letting requests time out and watches fall silent
REQUIRE_LEADER = (("hasleader", "true"),)

# gRPC waits ever longer between reconnects to a member that is down (by default growing towards
# minutes), and a call meanwhile fails without trying: a member back after an outage would only be
# seen at the next attempt gRPC scheduled. Capped, with gRPC's own jitter on each wait, a restarted
# member is seen within one short wait and a member that stays down costs few connection attempts.
# gRPC reads its "min reconnect backoff" as the least time one connection attempt is given: that one
# stays long enough for a member that is slow to answer (a loaded host, a member just started) to
# finish its handshake, or every attempt would time out before the member's first HTTP/2 frame.
RECONNECT_BACKOFF_MS = 100
MAX_RECONNECT_BACKOFF_MS = 500
MIN_CONNECT_TIMEOUT_MS = 3000
CHANNEL_OPTIONS = {
    "grpc.initial_reconnect_backoff_ms": RECONNECT_BACKOFF_MS,
    "grpc.min_reconnect_backoff_ms": MIN_CONNECT_TIMEOUT_MS,
    "grpc.max_reconnect_backoff_ms": MAX_RECONNECT_BACKOFF_MS,
}


@contextlib.contextmanager
def etcd_errors(operation: str) -> Iterator[None]:
    """Translate aetcd/gRPC failures of ``operation`` into partitioner errors."""
    try:
        yield
    except aetcd.RevisionCompactedError as exc:
        raise HistoryCompacted(int(exc.compacted_revision)) from exc
    except (aetcd.ClientError, aetcd.rpc.AioRpcError, TimeoutError, OSError) as exc:
        raise CoordinationUnavailable(f"etcd {operation} failed: {exc}") from exc


def stored_value(raw_kv: Any) -> StoredValue:
    """An aetcd key-value as a ``StoredValue``."""
    return StoredValue(bytes(raw_kv.key), bytes(raw_kv.value), int(raw_kv.create_revision),
                       int(raw_kv.mod_revision), int(raw_kv.lease))


def compares(client: Any, guards: Sequence[Guard]) -> list[Any]:
    """aetcd transaction compares for ``guards``."""
    return [(client.transactions.create(guard.key) if guard.target == "create"
             else client.transactions.mod(guard.key)) == guard.revision for guard in guards]


async def finished_within(operation: Coroutine[Any, Any, Any], timeout_s: float) -> bool:
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


def channel_credentials(tls: EtcdTls | None) -> grpc.ChannelCredentials | None:
    """gRPC channel credentials from the PEM files, None for plaintext."""
    if tls is None:
        return None
    try:
        return grpc.ssl_channel_credentials(root_certificates=_read(tls.ca_path),
                                            private_key=_read(tls.key_path),
                                            certificate_chain=_read(tls.cert_path))
    except OSError as exc:
        raise CoordinationUnavailable(
            f"etcd TLS: cannot read a certificate or key file: {exc}"
        ) from exc


def _read(path: str | None) -> bytes | None:
    if not path:
        return None
    with open(path, "rb") as file:
        return file.read()


class TlsClient(aetcd.Client):  # type: ignore[misc]  # aetcd is untyped
    """aetcd 1.0.0 only opens plaintext channels; this is its ``connect`` over a TLS channel.

    Same stubs and watcher as aetcd's own connect; etcd user/password auth is not supported here
    (the gateway authenticates to etcd with its client certificate).
    """

    # aetcd internals this relies on: the private fields _connected, _host, _port, _options,
    # _timeout and _watcher, the attributes channel, metadata and the *stub names that
    # aetcd.Client.connect fills in, and aetcd.rpc's stub classes and aetcd.watcher.Watcher.
    def __init__(self, host: str, port: int, timeout: float, tls: EtcdTls,
                 credentials: grpc.ChannelCredentials,
                 ) -> None:
        options: dict[str, Any] = dict(CHANNEL_OPTIONS)
        if tls.server_name:
            options["grpc.ssl_target_name_override"] = tls.server_name
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


def new_client(host: str, port: int, timeout_s: float, tls: EtcdTls | None,
               credentials: grpc.ChannelCredentials | None) -> Any:
    """An unconnected aetcd client (it connects on first use) that asks for a member with a
    leader."""
    if tls is None or credentials is None:
        client = aetcd.Client(host=host, port=port, timeout=timeout_s, options=CHANNEL_OPTIONS)
    else:
        client = TlsClient(host, port, timeout_s, tls, credentials)
    # aetcd has no parameter for call metadata; its calls send whatever this attribute holds
    client.metadata = REQUIRE_LEADER
    return client


async def reset_watch_stream(client: Any, timeout_s: float) -> None:
    """Drop aetcd's shared watch stream after a failed watch create.

    aetcd matches watch-create replies to requests by order: a create that timed out while etcd
    was unreachable stays queued on the stream, and when etcd answers, its reply is handed to
    the *next* watch created on this client, which then silently follows the wrong prefix from
    the wrong revision. Shutting the stream down discards the stale request; every other watch
    of this client ends too (its iterator stops) and its owner re-watches from its last
    revision + 1.
    """
    # aetcd offers no public reset: this uses its private _watcher and Watcher.shutdown
    watcher = getattr(client, "_watcher", None)
    if watcher is None:
        return
    if not await finished_within(watcher.shutdown(), timeout_s):
        # A wedged stream must not wedge its caller: start a fresh watcher instead.
        log.warning("etcd watch stream did not shut down within %.1fs; replacing it", timeout_s)
        client._watcher = aetcd.watcher.Watcher(aetcd.rpc.WatchStub(client.channel),
                                                timeout=timeout_s, metadata=client.metadata)


class EtcdWatch:
    """A live watch on a key prefix; iterate for events, ``cancel`` to stop."""

    def __init__(self, handle: Any, prefix: bytes = b"", start_revision: int = 0) -> None:
        self._handle = handle
        self._prefix = prefix
        self._start_revision = start_revision

    async def events(self) -> AsyncIterator[WatchEvent]:
        """Events in revision order; raises ``CoordinationUnavailable`` when the watch dies.

        An event outside the watched prefix or older than the start revision means aetcd bound this
        watch to another create request (see ``reset_watch_stream``); that also raises, so the
        caller re-watches instead of following the wrong keys.
        """
        with etcd_errors("watch"):
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
