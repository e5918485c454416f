"""A key_shared reader's dispatch: the backlog handed out by key (``KeyOrder``), keys of failed
messages parked visibly in the store, parked keys settled on another gateway freed, and keys still
held by members when the reader started fenced (``key_fence``)."""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Iterable, Sequence
from operator import attrgetter

from gateway.delivery.expiry import now_ms
from gateway.delivery.group_config import ReaderScope
from gateway.delivery.key_fence import HandOverFence, gone_from_pending
from gateway.delivery.key_order import KeyOrder
from gateway.delivery.session import Session
from gateway.delivery.settler import Settler
from gateway.observe.metrics import GatewayMetrics
from gateway.observe.tracing import delivery_span
from storage.errors import StorageError
from storage.groups_protocol import GroupStore
from storage.models import Delivery, ParkedKey

RECONCILE_S = 1.0  # how often a key-ordered reader looks for parked keys settled elsewhere
MAX_HELD = 10_000  # a key-ordered reader's messages waiting behind their keys before it reads on
_DELIVERY_COUNT = attrgetter("delivery_count")


class KeyedDispatch:
    """One message of a key in flight at a time; what is released goes to the front of the
    reader's backlog and wakes its loop (``credit``)."""

    def __init__(self, store: GroupStore, scope: ReaderScope, backlog: deque[Delivery],
                 credit: asyncio.Event, settler: Settler, metrics: GatewayMetrics) -> None:
        self._store = store
        self._scope = scope
        self._backlog = backlog
        self._credit = credit
        self._settler = settler
        self._metrics = metrics
        self._keys = KeyOrder()
        self._fence = HandOverFence(store, scope, self.settled)
        self._open = True
        self._last_reconcile = 0.0  # when parked keys were last checked against the group
        self._parked = metrics.group_parked_keys.labels(scope.topic, scope.group,
                                                        str(scope.partition))

    @property
    def in_flight(self) -> bool:
        """Some key has a message in flight."""
        return bool(self._keys.in_flight)

    def held_here(self) -> set[str]:
        """Offsets of messages waiting here behind their keys."""
        return set(self._keys.held_offsets())

    @property
    def may_read(self) -> bool:
        """Fewer than ``MAX_HELD`` messages wait behind their keys."""
        return self._keys.held_total < MAX_HELD

    def sessions_changed(self) -> None:
        """A session joined: the hash chooses again."""
        self._keys.sessions_changed()

    def forget_session(self, session: Session) -> None:
        """A session left: its keys go to whoever gets their redelivered message."""
        self._keys.forget_session(session)

    async def start(self) -> None:
        """A new owner of the partition: what it parks, it records afresh; keys with pending
        entries go on from the first of them, in order (``key_fence``)."""
        await self._unpark_all()
        await self._fence.raise_on(self._keys)

    async def aclose(self) -> list[str]:
        """Forget every key; the offsets of messages held behind their keys, for release. Once:
        the partition's parked keys belong to its next owner by then."""
        if not self._open:
            return []
        self._open = False
        await self._fence.aclose()
        held = self._keys.held_offsets()
        self._keys = KeyOrder()
        self._parked.set(0)
        with contextlib.suppress(StorageError):  # no longer parked here: the next owner's
            await self._unpark_all()
        return held

    def dispatch(self, sessions: Sequence[Session]) -> None:
        """Hand the backlog out by key (``KeyOrder.route``); what no session has credit for stays
        in front, in order."""
        backlog = self._backlog
        if not backlog or not sessions:
            return
        credit = {session: session.credit for session in sessions if session.has_credit}
        pages, waiting = self._keys.route(backlog, sessions, credit)
        backlog.clear()
        backlog.extend(waiting)
        delivery_counts: list[int] = []
        scope = self._scope
        for session, page in pages.items():
            taken = session.offer_page(page)
            if taken < len(page):
                self._keys.untaken(page[taken:])
                backlog.extendleft(reversed(page[taken:]))
                page = page[:taken]
            delivery_counts.extend(map(_DELIVERY_COUNT, page))
            delivery_span(scope.topic, scope.group, scope.labels[2], page)
        self._metrics.count_deliveries(*scope.labels, delivery_counts)

    def settled(self, offsets: Iterable[str]) -> None:
        """Settled in-flight messages: each key's next message goes first."""
        released, unparked = self._keys.settled(offsets)
        if released:
            self._backlog.extendleft(reversed(released))
        if unparked:
            scope = self._scope
            self._settler.beside_the_loop(self._store.unpark(scope.topic, scope.partition,
                                                             scope.group, unparked))
        self._parked.set(len(self._keys.parked))
        self._credit.set()

    def failed(self, offsets: Iterable[str]) -> None:
        """Failed in-flight messages: their keys park, visibly."""
        newly = self._keys.failed(offsets)
        if newly:
            since_ms, scope = now_ms(), self._scope
            self._settler.beside_the_loop(self._store.park(
                scope.topic, scope.partition, scope.group,
                [ParkedKey(key, offset, since_ms) for key, offset in newly]))
        self._parked.set(len(self._keys.parked))

    async def reconcile(self, now_s: float) -> None:
        """At most every ``RECONCILE_S``: free parked keys whose failed message is no longer
        pending (the partition owner's sweep dead-lettered it, or another gateway acked it)."""
        keys = self._keys
        if not keys.parked or now_s - self._last_reconcile < RECONCILE_S:
            return
        self._last_reconcile = now_s
        offsets = [keys.in_flight[key] for key in keys.parked if key in keys.in_flight]
        gone = await gone_from_pending(self._store, self._scope, offsets)
        if gone:
            self.settled(gone)

    async def _unpark_all(self) -> None:
        scope = self._scope
        await self._store.unpark(scope.topic, scope.partition, scope.group, [])
