"""Partition ownership in etcd: which gateway runs the duties of which partition, decided by
rendezvous hashing over the live nodes and held through leased owner keys."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from types import TracebackType

from partitioner.backoff import Backoff
from partitioner.errors import CoordinationUnavailable
from partitioner.etcd.connection import EtcdConnection
from partitioner.etcd.values import DEFAULT_PREFIX, Guard, StoredValue, WatchEvent
from partitioner.ownership_keys import ClusterView, NodeRecord, OwnershipKeys, Partition
from partitioner.prefix_mirror import PrefixMirror
from partitioner.rendezvous import desired_partitions
from partitioner.tasks import cancel_until_done

__all__ = ["PartitionOwnership"]

log = logging.getLogger(__name__)

RECONCILE_POLL_S = 1.0  # partitions() may change without any etcd event: look at least this often
ACQUIRE_CONCURRENCY = 32
_TIMER_SLACK_S = 0.001  # the expiry timer fires just after the deadline, never just before


class PartitionOwnership:
    """This node's registration (with ``address``, the URL clients reach it at, written with each
    new lease) and the partitions it owns. An async context manager; ``aclose`` is idempotent.

    ``partitions()`` returns ``{topic: partition count}`` (the gateway passes its topic cache); it
    is read on every reconcile. Use ``owned`` before every duty action and ``wait_changed`` to
    start/stop duty tasks.

    Every node computes the same target from the live node set with rendezvous hashing
    (``partitioner.rendezvous``). A node deletes the owner keys it no longer wins (a node joined, a
    topic vanished) and creates the keys it wins once they are free; it never takes a key someone
    else holds, it waits for the holder to release it or for the holder's lease to expire.

    Safety on the node's own clock: ``owned`` is empty unless the last successful keepalive was
    *sent* less than ``lease_ttl_s - lease_ttl_s / 4`` ago. etcd refreshed the lease no earlier than
    that send, to at least ``lease_ttl_s``, so every owner key of ours outlives our right to act by
    at least a quarter TTL (the margin absorbs clock-rate differences and an action already under
    way). Keepalives go out every TTL/3, so one failed or slow keepalive does not interrupt
    ownership. When keepalives recover and etcd still knows the lease, ownership resumes; when the
    lease expired, the node takes a new lease, registers again and re-acquires. A released
    partition leaves ``owned`` before its key is deleted; an acquired one enters ``owned`` after its
    key was created. So no partition is ever in two nodes' ``owned`` at once (given clocks that
    agree on a second).
    """

    def __init__(self, conn: EtcdConnection, *, node_id: str,
                 partitions: Callable[[], Mapping[str, int]], prefix: str = DEFAULT_PREFIX,
                 lease_ttl_s: float = 10.0, address: str | None = None) -> None:
        if not node_id or "/" in node_id or not node_id.isprintable():
            raise ValueError(f"node_id must be printable and without '/', got {node_id!r}")
        if lease_ttl_s <= 0:
            raise ValueError("lease_ttl_s must be positive")
        self._conn = conn
        self.node_id, self.address = node_id, address
        self._partitions = partitions
        self._keys = OwnershipKeys(prefix)
        self.lease_ttl_s = lease_ttl_s
        self.safety_margin_s = lease_ttl_s / 4
        self._keepalive_interval_s = lease_ttl_s / 3
        self._lease_id = 0
        self._fresh_until = 0.0  # loop clock: we may act until then
        self._expiry_timer: asyncio.TimerHandle | None = None
        self._registered_revision = 0
        self._held: dict[Partition, int] = {}  # our owner keys -> their create_revision
        self._held_view: frozenset[Partition] = frozenset()
        self._published: frozenset[Partition] = frozenset()
        self._changed = asyncio.Event()
        self._dirty = asyncio.Event()
        self._desired_cache: tuple[object, frozenset[Partition]] | None = None
        self._nodes = PrefixMirror(conn, self._keys.nodes, self._on_nodes_change)
        self._owners = PrefixMirror(conn, self._keys.owners, self._on_owners_change)
        self._tasks: list[asyncio.Task[None]] = []
        self._keepalive_suspended = False
        self._failed = False
        self._closed = False

    # -- lifetime ----------------------------------------------------------------------------------

    async def __aenter__(self) -> PartitionOwnership:
        await self._start_lease()
        try:
            await self._nodes.load()
            await self._owners.load()
        except CoordinationUnavailable:
            await self._revoke(self._lease_id)
            raise
        for name, duty in (("keepalive", self._keep_alive), ("nodes-watch", self._nodes.follow),
                           ("owners-watch", self._owners.follow),
                           ("reconcile", self._reconcile_loop)):
            self._tasks.append(asyncio.create_task(
                self._supervise(name, duty), name=f"streamgate-ownership-{name}-{self.node_id}"))
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Stop acting at once, stop the background tasks and revoke the lease (our keys vanish, so
        the survivors take over without waiting for a TTL). Safe to call more than once."""
        if self._closed:
            return
        self._closed = True
        self._notify(force=True)
        await self._cancel_tasks()
        if self._expiry_timer is not None:
            self._expiry_timer.cancel()
        lease_id, self._lease_id = self._lease_id, 0
        await self._revoke(lease_id)

    async def _revoke(self, lease_id: int) -> None:
        if not lease_id:
            return
        try:
            await self._conn.revoke_lease(lease_id)
        except CoordinationUnavailable as exc:
            log.warning("node %s: could not revoke its lease (retried until etcd answers): %s",
                        self.node_id, exc)
            self._conn.revoke_when_reachable(lease_id)

    async def _cancel_tasks(self) -> None:
        """Cancel and await every task but the caller; repeated because a cancel landing inside a
        gRPC call can surface as an RPC error that a retry loop would otherwise survive."""
        await cancel_until_done(self._tasks)

    async def _supervise(self, name: str, duty: Callable[[], Awaitable[None]]) -> None:
        """Run a duty; a crash stops all ownership (and flips ``healthy``) instead of dying
        silently."""
        try:
            await duty()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("node %s: ownership %s crashed; giving up every partition", self.node_id,
                          name)
            self._failed = True
            self._release_all_locally()
            self._notify(force=True)
            await self._cancel_tasks()
            lease_id, self._lease_id = self._lease_id, 0
            await self._revoke(lease_id)

    # -- what the gateway reads --------------------------------------------------------------------

    @property
    def owned(self) -> frozenset[Partition]:
        """The (topic, partition) pairs this node may act on now; empty while its lease is not
        fresh."""
        if self._closed or self._failed or not self._fresh():
            return frozenset()
        return self._held_view

    def epoch(self, topic: str, partition: int) -> int | None:
        """The fencing token of an owned partition (its owner key's create_revision), else None."""
        if (topic, partition) not in self.owned:
            return None
        return self._held.get((topic, partition))

    async def wait_changed(self, known: frozenset[Partition] | None = None) -> frozenset[Partition]:
        """Wait until ``owned`` differs from ``known`` (default: its current value) and return the
        new value.

        Returns at once when ``owned`` already differs, or when the ownership is closed.
        """
        baseline = self.owned if known is None else known
        while (current := self.owned) == baseline and not self._closed and not self._failed:
            await self._changed.wait()
        return current

    @property
    def live_nodes(self) -> list[str]:
        """The registered node ids as this node sees them, sorted."""
        return sorted(key[len(self._keys.nodes):].decode(errors="replace")
                      for key in self._nodes.values)

    @property
    def cluster(self) -> ClusterView | None:
        """Every live node and partition owner as this node's watches mirror them; None while a
        watch is down (the mirror may be stale then)."""
        if not (self._nodes.healthy and self._owners.healthy):
            return None
        return self._keys.view(self._nodes.values.values(), self._owners.values.values())

    @property
    def healthy(self) -> bool:
        """True while the lease is fresh and both watches are established."""
        return (not self._closed and not self._failed and self._fresh()
                and self._nodes.healthy and self._owners.healthy)

    def simulate_keepalive_failure(self, failing: bool = True) -> None:
        """Test hook: stop (or resume) refreshing the lease as if etcd were unreachable."""
        self._keepalive_suspended = failing

    # -- the lease ---------------------------------------------------------------------------------

    def _fresh(self) -> bool:
        return self._lease_id != 0 and asyncio.get_running_loop().time() < self._fresh_until

    def _mark_fresh(self, sent: float) -> None:
        """A keepalive sent at ``sent`` (loop clock) succeeded: we may act until sent + TTL -
        margin."""
        loop = asyncio.get_running_loop()
        self._fresh_until = max(self._fresh_until, sent + self.lease_ttl_s - self.safety_margin_s)
        if self._expiry_timer is not None:
            self._expiry_timer.cancel()
        self._expiry_timer = loop.call_at(self._fresh_until + _TIMER_SLACK_S, self._notify)
        self._notify()

    async def _start_lease(self) -> None:
        """Grant a lease and register the node with it; raises ``CoordinationUnavailable``."""
        sent = asyncio.get_running_loop().time()
        lease_id, _ = await self._conn.grant_lease(self.lease_ttl_s)
        try:
            self._registered_revision = await self._conn.put(
                self._keys.node(self.node_id), self._registration(), lease_id=lease_id)
        except CoordinationUnavailable:
            await self._revoke(lease_id)
            raise
        self._lease_id = lease_id
        self._mark_fresh(sent)
        self._dirty.set()
        log.info("node %s registered with lease %x", self.node_id, lease_id)

    def _lose_lease(self) -> None:
        """etcd forgot our lease: every key of ours is gone; start over with a new lease."""
        log.warning("node %s: its lease expired; registering again", self.node_id)
        self._lease_id = 0
        self._fresh_until = 0.0
        self._release_all_locally()

    async def _keep_alive(self) -> None:
        """Refresh the lease every TTL/3; take a new one when etcd no longer knows it."""
        loop = asyncio.get_running_loop()
        backoff = Backoff()
        while True:
            if self._keepalive_suspended:
                await asyncio.sleep(self._keepalive_interval_s)
                continue
            try:
                if not self._lease_id:
                    await self._start_lease()
                sent = loop.time()
                remaining_s = await asyncio.wait_for(self._conn.keep_alive(self._lease_id),
                                                     self._keepalive_interval_s)
            except (TimeoutError, CoordinationUnavailable) as exc:
                log.warning("node %s: keepalive failed: %s", self.node_id,
                            exc or type(exc).__name__)
                await backoff.sleep()
                continue
            if remaining_s <= 0:
                self._lose_lease()
                continue
            backoff.reset()
            self._mark_fresh(sent)
            await asyncio.sleep(self._keepalive_interval_s)

    # -- held keys and change notification ---------------------------------------------------------

    def _hold(self, partition: Partition, epoch: int) -> None:
        self._held[partition] = epoch
        self._held_view = frozenset(self._held)
        self._notify()

    def _unhold(self, partition: Partition) -> None:
        if self._held.pop(partition, None) is not None:
            self._held_view = frozenset(self._held)
            self._notify()

    def _release_all_locally(self) -> None:
        self._held.clear()
        self._held_view = frozenset()
        self._notify()

    def _notify(self, *, force: bool = False) -> None:
        """Wake ``wait_changed`` callers when ``owned`` changed since the last notification (or
        ``force``)."""
        current = self.owned
        if force or current != self._published:
            self._published = current
            event, self._changed = self._changed, asyncio.Event()
            event.set()

    def _is_ours(self, stored: StoredValue) -> bool:
        return stored.value == self.node_id.encode() and stored.lease_id == self._lease_id != 0

    def _on_nodes_change(self, event: WatchEvent | None) -> None:
        self._dirty.set()

    def _on_owners_change(self, event: WatchEvent | None) -> None:
        """Forget a held key that was deleted or taken over behind our back (e.g. our lease
        expired)."""
        if event is None:
            for partition, epoch in list(self._held.items()):
                stored = self._owners.values.get(self._keys.owner(partition))
                if self._owners.revision > epoch and (stored is None
                                                      or stored.create_revision != epoch):
                    self._unhold(partition)
        else:
            self._check_held(event)
        self._dirty.set()

    def _check_held(self, event: WatchEvent) -> None:
        partition = self._keys.parse_owner(event.key)
        epoch = None if partition is None else self._held.get(partition)
        if partition is None or epoch is None or event.mod_revision <= epoch:
            return
        stored = self._owners.values.get(event.key)
        if stored is None or stored.create_revision != epoch or not self._is_ours(stored):
            self._unhold(partition)

    # -- reconcile ---------------------------------------------------------------------------------

    async def _reconcile_loop(self) -> None:
        backoff = Backoff()
        while True:
            self._dirty.clear()
            try:
                await self._reconcile()
            except CoordinationUnavailable as exc:
                log.warning("node %s: reconcile failed: %s", self.node_id, exc)
                await backoff.sleep()
                continue
            backoff.reset()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._dirty.wait(), RECONCILE_POLL_S)

    async def _reconcile(self) -> None:
        """Release what we no longer win, then take what we win and is free."""
        lease_id = self._lease_id
        if not self._fresh():
            return
        topics = self._read_partitions()
        if topics is None:
            return
        await self._ensure_registered(lease_id)
        desired = self._desired(topics)
        await self._release(desired)
        await self._acquire(desired, lease_id)

    def _read_partitions(self) -> dict[str, int] | None:
        try:
            return {str(topic): max(0, int(count)) for topic, count in self._partitions().items()}
        except Exception:
            log.exception("node %s: partitions() failed; reconcile postponed", self.node_id)
            return None

    def _desired(self, topics: dict[str, int]) -> frozenset[Partition]:
        nodes = tuple(self.live_nodes)
        cache_key = (nodes, tuple(sorted(topics.items())))
        if self._desired_cache is None or self._desired_cache[0] != cache_key:
            self._desired_cache = (cache_key, desired_partitions(nodes, topics, self.node_id))
        return self._desired_cache[1]

    async def _ensure_registered(self, lease_id: int) -> None:
        """Put our node key back if the registry, newer than our registration, lacks it."""
        key = self._keys.node(self.node_id)
        if self._nodes.revision > self._registered_revision and key not in self._nodes.values:
            self._registered_revision = await self._conn.put(key, self._registration(),
                                                              lease_id=lease_id)

    def _registration(self) -> bytes:
        return NodeRecord(self.node_id, time.time_ns() // 1_000_000, self.address).value()

    async def _release(self, desired: frozenset[Partition]) -> None:
        """Stop acting on partitions we no longer win, then delete their keys (guarded on being
        ours)."""
        doomed = {p: epoch for p, epoch in self._held.items() if p not in desired}
        for partition in doomed:
            self._unhold(partition)  # owned shrinks before the key is deleted
        for key, stored in self._owners.values.items():  # leftovers of an earlier failed delete
            leftover = self._keys.parse_owner(key)
            if leftover is not None and leftover not in desired and self._is_ours(stored):
                doomed.setdefault(leftover, stored.create_revision)
        for partition, epoch in sorted(doomed.items()):
            key = self._keys.owner(partition)
            if await self._conn.delete_if(key, guards=[Guard(key, epoch)]):
                log.info("node %s released %s/%d (epoch %d)", self.node_id, *partition, epoch)

    async def _acquire(self, desired: frozenset[Partition], lease_id: int) -> None:
        """Create the owner keys we win that nobody holds, ``ACQUIRE_CONCURRENCY`` at a time."""
        wanted = [p for p in sorted(desired) if p not in self._held and not self._held_by_other(p)]
        for start in range(0, len(wanted), ACQUIRE_CONCURRENCY):
            results = await asyncio.gather(*(self._try_acquire(p, lease_id)
                                             for p in wanted[start:start + ACQUIRE_CONCURRENCY]),
                                           return_exceptions=True)
            errors = [result for result in results if isinstance(result, BaseException)]
            if errors:
                raise errors[0]

    def _held_by_other(self, partition: Partition) -> bool:
        stored = self._owners.values.get(self._keys.owner(partition))
        return stored is not None and not self._is_ours(stored)

    async def _try_acquire(self, partition: Partition, lease_id: int) -> None:
        key = self._keys.owner(partition)
        epoch = await self._conn.put_if(key, self.node_id.encode(), guards=[Guard(key, 0)],
                                        lease_id=lease_id)
        # taken, or ours already (a create whose reply was lost): only etcd can tell
        if epoch is None:
            stored = await self._conn.get(key)
            if (stored is None or stored.value != self.node_id.encode()
                    or stored.lease_id != lease_id):
                return
            epoch = stored.create_revision
        if lease_id != self._lease_id:  # the lease was lost meanwhile: the key went with it
            return
        self._hold(partition, epoch)
        log.info("node %s owns %s/%d (epoch %d)", self.node_id, *partition, epoch)
