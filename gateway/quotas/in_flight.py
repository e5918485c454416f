"""Messages in flight per quota subject across gateways: a ledger of counts by ack deadline on each
gateway, shared through Redis every ``quota_sync_interval_s``.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import logging
import time
from collections.abc import Iterable
from typing import Protocol

from gateway.auth.errors import QuotaExceeded
from gateway.auth.quotas import QuotaSubject
from gateway.observe.metrics import GatewayMetrics
from partitioner.tasks import cancel_until_done
from storage.errors import StorageError

log = logging.getLogger(__name__)

KIND = "in_flight_messages"
# monotonic -> epoch: fixed once, so one monotonic deadline always lands in the same bucket
_EPOCH_OFFSET_S = time.time() - time.monotonic()
STALE_INTERVALS = 3  # another gateway's count older than this many intervals is ignored
MIN_STALE_MS = 1000
SHARE_CONCURRENCY = 16
MAX_REMEMBERED_CREDITS = 100_000  # per subject; past it a receipt settled twice credits twice


class InFlightBoard(Protocol):
    """Where gateways share their counts (storage.quota_in_flight.RedisInFlightBoard)."""

    async def share(self, subject: str, node_id: str, count: int, stale_ms: int) -> int: ...


class Holder(Protocol):
    """A WebSocket session drawing on a window: woken when room comes back, told once it is
    held."""

    def wake_credit_waiters(self) -> None: ...

    def quota_held(self, limit: int, used: int) -> None: ...


def now_ms() -> int:
    """Epoch milliseconds."""
    return int(time.time() * 1000)


def epoch_ms_of(monotonic_s: float) -> int:
    """The epoch ms of a ``time.monotonic()`` deadline."""
    return int((monotonic_s + _EPOCH_OFFSET_S) * 1000)


class InFlightWindow:
    """One subject's in-flight count on this gateway, in buckets by ack deadline (whole seconds),
    and the room left under its cap once the other gateways' counts are taken off.

    A delivery charges the bucket of its deadline; a settle credits that same bucket (a bucket
    whose deadline passed is gone, and so is what was charged to it: a timed-out delivery needs no
    event). This gateway may credit what another charged (a pull receipt acked here): its count then
    goes below zero, and the sum over gateways is still right.
    """

    def __init__(self, subject: str, limit: int) -> None:
        self.subject, self.limit = subject, limit
        self.others = 0  # what the other gateways hold, as last read
        self.shared = 0  # what this gateway wrote at its last sync
        self.synced = False  # whether ``others`` was read at least once
        self.touched_ms = now_ms()  # when a request last asked for it
        self._own = 0  # the sum of the buckets still ahead
        self._buckets: dict[int, int] = {}  # deadline second -> net count
        self._deadlines: list[int] = []  # the buckets' deadline seconds, a heap
        self._holders: set[Holder] = set()
        # pull receipts already credited here, until their deadline: a receipt nacked twice (or
        # nacked, then acked) must not give its room back twice
        self._credited: dict[str, int] = {}
        self._held = False  # whether the holders were told the window has no room

    # --- counting ---------------------------------------------------------------------------------
    @property
    def own(self) -> int:
        """This gateway's net count of deliveries whose deadline is still ahead."""
        self._prune(now_ms())
        return self._own

    @property
    def used(self) -> int:
        """What the subject holds across gateways, as far as this gateway knows."""
        return self.others + self.own

    @property
    def room(self) -> int:
        """How many more deliveries the subject may take now (never below zero)."""
        return max(0, self.limit - self.used)

    def charge(self, count: int, deadline_ms: int) -> None:
        """``count`` deliveries handed out, due back by ``deadline_ms``."""
        if count > 0 and self._add(count, deadline_ms) and self.room <= 0:
            self.tell_held()

    def credit(self, count: int, deadline_ms: int) -> None:
        """``count`` deliveries charged with ``deadline_ms`` settled (on any gateway)."""
        if count > 0:
            self._add(-count, deadline_ms)
            self.room_may_be_back()

    def credit_each(self, deadlines_ms: Iterable[int]) -> None:
        """One delivery settled per deadline."""
        for deadline_ms in deadlines_ms:
            self._add(-1, deadline_ms)
        self.room_may_be_back()

    def credit_receipts(self, receipts: Iterable[tuple[str, int]]) -> None:
        """Credit each (receipt, deadline_ms) once: a receipt credited here before counts for
        nothing."""
        credited = self._credited
        if len(credited) >= MAX_REMEMBERED_CREDITS:
            self._forget_due_credits()
        fresh: list[int] = []
        for receipt, deadline_ms in receipts:
            if receipt not in credited:
                fresh.append(deadline_ms)
                if len(credited) < MAX_REMEMBERED_CREDITS:
                    credited[receipt] = deadline_ms
        self.credit_each(fresh)

    def _forget_due_credits(self) -> None:
        at_ms, credited = now_ms(), self._credited
        for receipt in [r for r, deadline in credited.items() if deadline <= at_ms]:
            del credited[receipt]

    def move(self, count: int, old_deadline_ms: int, new_deadline_ms: int) -> None:
        """``count`` deliveries' ack timeout restarted: due back by ``new_deadline_ms`` now."""
        if count > 0:
            self._add(-count, old_deadline_ms)
            self._add(count, new_deadline_ms)

    def soonest_deadline_ms(self) -> int | None:
        """When the first bucket of this gateway falls due (None: it holds nothing here)."""
        self._prune(now_ms())
        return self._deadlines[0] * 1000 if self._deadlines else None

    def refused(self, retry_floor_s: float) -> QuotaExceeded:
        """The 429 of a pull that finds no room: retry once the soonest delivery here is due."""
        soonest = self.soonest_deadline_ms()
        wait_s = retry_floor_s if soonest is None else (soonest - now_ms()) / 1000
        return QuotaExceeded(
            f"{self.subject} holds {self.used} un-acked messages (in_flight_messages "
            f"{self.limit}); ack some before pulling more", KIND, self.subject, self.limit,
            self.used, max(1.0, wait_s))

    def idle(self, since_ms: int) -> bool:
        """Nothing to remember: no holder, nothing counted here or shared, nobody asked for it
        since ``since_ms``."""
        if self._credited:
            self._forget_due_credits()
        return (not self._holders and self.own == 0 and not self._buckets and self.shared == 0
                and self.others == 0 and self.touched_ms < since_ms and not self._credited)

    def _add(self, delta: int, deadline_ms: int) -> bool:
        second = -(-deadline_ms // 1000)  # a delivery counts until its deadline, at least
        if second * 1000 <= now_ms():
            return False  # fallen due: it left the count by itself
        if second not in self._buckets:
            self._buckets[second] = 0
            heapq.heappush(self._deadlines, second)
        self._buckets[second] += delta
        self._own += delta
        return True

    def _prune(self, at_ms: int) -> None:
        deadlines = self._deadlines
        while deadlines and deadlines[0] * 1000 <= at_ms:
            self._own -= self._buckets.pop(heapq.heappop(deadlines))

    # --- holders ----------------------------------------------------------------------------------
    def join(self, holder: Holder) -> None:
        """``holder`` draws on this window from now on."""
        self._holders.add(holder)
        if self._held:
            holder.quota_held(self.limit, self.used)

    def leave(self, holder: Holder) -> None:
        """``holder`` is gone."""
        self._holders.discard(holder)

    def room_may_be_back(self) -> None:
        """Wake every holder once the window has room (they wait for credit)."""
        if self._holders and self.room > 0:
            self._held = False
            for holder in list(self._holders):
                holder.wake_credit_waiters()

    def tell_held(self) -> None:
        """Tell the holders, once until room comes back, that the window has none."""
        if not self._held:
            self._held = True
            used = self.used
            for holder in list(self._holders):
                holder.quota_held(self.limit, used)


class InFlightQuota:
    """The windows of the subjects active on this gateway, shared every ``interval_s``; use as
    ``async with``."""

    def __init__(self, board: InFlightBoard, node_id: str, interval_s: float,
                 metrics: GatewayMetrics) -> None:
        self._board, self._node_id, self._interval_s = board, node_id, interval_s
        self._stale_ms = max(MIN_STALE_MS, int(STALE_INTERVALS * interval_s * 1000))
        self._metrics = metrics
        self._windows: dict[str, InFlightWindow] = {}
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> InFlightQuota:
        self._task = asyncio.create_task(self._keep_shared(), name="in-flight-quota-sync")
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Stop sharing; idempotent."""
        task, self._task = self._task, None
        if task is not None:
            await cancel_until_done([task])

    def window_for(self, subject: QuotaSubject) -> InFlightWindow | None:
        """The window of ``subject`` (None: no in-flight cap for it)."""
        limit = subject.in_flight_messages
        if limit is None:
            return None
        window = self._windows.get(subject.name)
        if window is None:
            window = self._windows[subject.name] = InFlightWindow(subject.name, limit)
        elif window.limit != limit:  # the auth config was reloaded
            window.limit = limit
            window.room_may_be_back()
        window.touched_ms = now_ms()
        return window

    async def known_window(self, subject: QuotaSubject) -> InFlightWindow | None:
        """``window_for``, with the other gateways' counts read first if this gateway has not
        read them yet (a subject new here must not start as if the others held nothing)."""
        window = self.window_for(subject)
        if window is not None and not window.synced:
            await self._share(window)
            return self.window_for(subject)  # the same one, unless a sync dropped it meanwhile
        return window

    def refuse(self, window: InFlightWindow) -> QuotaExceeded:
        """A pull's 429 for ``window``, counted."""
        self._metrics.quota_refused.labels(window.subject, KIND).inc()
        return window.refused(self._interval_s)

    async def sync(self) -> None:
        """Share every active subject's count once and read the others'; idle subjects go."""
        slots = asyncio.Semaphore(SHARE_CONCURRENCY)

        async def share(window: InFlightWindow) -> None:
            async with slots:
                await self._share(window)

        await asyncio.gather(*(share(w) for w in list(self._windows.values())))
        since_ms = now_ms() - self._stale_ms
        for name, window in list(self._windows.items()):
            if window.idle(since_ms):
                del self._windows[name]
                self._forget_series(name)

    async def _share(self, window: InFlightWindow) -> None:
        own = window.own
        try:
            window.others = await self._board.share(window.subject, self._node_id, own,
                                                    self._stale_ms)
        except StorageError as exc:  # the last counts read stand until the next round
            log.warning("in-flight quota of %s not shared: %s", window.subject, exc)
            window.room_may_be_back()  # deliveries here may have fallen due all the same
            return
        window.shared, window.synced = own, True
        self._metrics.quota_used.labels(window.subject, KIND).set(window.used)
        self._metrics.quota_limit.labels(window.subject, KIND).set(window.limit)
        if window.room <= 0:
            window.tell_held()
        else:
            window.room_may_be_back()  # others settled, or deliveries here fell due

    async def _keep_shared(self) -> None:
        while True:
            await asyncio.sleep(self._interval_s)
            try:
                await self.sync()
            except Exception:  # a failed round must not end the sharing
                log.exception("in-flight quota sync failed")

    def _forget_series(self, subject: str) -> None:
        for gauge in (self._metrics.quota_used, self._metrics.quota_limit):
            with contextlib.suppress(KeyError):
                gauge.remove(subject, KIND)

