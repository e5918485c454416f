"""A group reader's sessions, credit and backlog: fresh deliveries routed (expired and filtered-out
ones acked, exhausted ones to the dead letters) and handed out, round-robin or by key."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Sequence
from operator import attrgetter

from gateway.delivery.expiry import deliveries_may_expire, is_expired, now_ms, report_expired
from gateway.delivery.group_config import GroupConfig, ReaderScope
from gateway.delivery.key_dispatch import KeyedDispatch
from gateway.delivery.retry_policy import EXHAUSTED, DeadLetter
from gateway.delivery.session import MessageRef, Session
from gateway.delivery.settler import Settler
from gateway.observe.metrics import GatewayMetrics
from gateway.observe.tracing import delivery_span
from storage.models import Delivery, StoredEntry

# exhausted (or unconvertible) deliveries with why, moved to the dead letters beside the loop
DeadLetterLater = Callable[[Sequence[DeadLetter]], None]
_DELIVERY_COUNT = attrgetter("delivery_count")
_ENTRY_OFFSET = attrgetter("entry.offset")


class Dispatcher:
    """The sessions attached to a reader and the deliveries read for them but not handed out."""

    def __init__(self, scope: ReaderScope, config: GroupConfig, settler: Settler,
                 keyed: KeyedDispatch | None, dead_letter_later: DeadLetterLater,
                 metrics: GatewayMetrics, backlog: deque[Delivery],
                 credit: asyncio.Event, paused: Callable[[], bool] | None = None) -> None:
        self.sessions: list[Session] = []
        # the group is paused: what a read in flight at the pause returned waits in the backlog
        self._paused = paused
        self.backlog = backlog
        self.credit = credit  # set whenever a session gains credit (or the loop must look again)
        self._next_session = 0
        self._scope = scope
        self._config = config
        self._settler = settler
        self._keyed = keyed
        self._dead_letter_later = dead_letter_later
        self._metrics = metrics

    # --- sessions and their credit ----------------------------------------------------------------
    def attach(self, session: Session) -> None:
        """Hand deliveries to ``session`` from now on."""
        self.sessions.append(session)
        session.watch_credit(self.credit)
        if self._keyed is not None:
            self._keyed.sessions_changed()
            self.credit.set()

    def detach(self, session: Session) -> None:
        """Hand ``session`` nothing more."""
        if session in self.sessions:
            self.sessions.remove(session)
        session.unwatch_credit(self.credit)
        if self._keyed is not None:
            self._keyed.forget_session(session)

    def any_credit(self) -> bool:
        """Some session may take a delivery."""
        return any(session.has_credit for session in self.sessions)

    def worth_a_read(self) -> bool:
        """Some session has enough credit for a read (``Session.worth_a_read``)."""
        return any(session.worth_a_read for session in self.sessions)

    def total_credit(self) -> int:
        """How many deliveries a read should fetch for all sessions (at least one)."""
        return max(1, sum(session.read_allowance for session in self.sessions))

    def forget_everywhere(self, ref: MessageRef) -> None:
        """A delivery claimed again: no session holds it any longer."""
        for session in self.sessions:
            session.forget(ref)

    # --- routing ----------------------------------------------------------------------------------
    async def accept_new(self, deliveries: list[Delivery]) -> None:
        """Route first deliveries: without a filter every one goes out (a delivery count of 1 is
        always within max_deliveries, which is at least 1), so the whole read joins the backlog at
        once."""
        config = self._config
        if (config.filter.is_empty and self._keyed is None
                and not deliveries_may_expire(deliveries)):
            if config.pinned is None:
                self.backlog.extend(deliveries)
            else:  # the page converted at once, with no walk of its own before
                live, unconverted = config.pinned.split(deliveries)
                self.backlog.extend(live)
                if unconverted:
                    self._dead_letter_later(unconverted)
            await self.dispatch()
        else:
            await self.accept(deliveries)

    async def accept(self, deliveries: Sequence[Delivery]) -> None:
        """Route fresh deliveries: expired and filtered-out ones acked, dead letters (also those a
        pinned schema version cannot be given), the rest to the backlog and out."""
        to_ack: list[str] = []
        expired: list[StoredEntry] = []
        dead: list[DeadLetter] = []
        live: list[Delivery] = []
        at_ms = now_ms()
        config = self._config
        for delivery in deliveries:
            entry = delivery.entry
            if entry.headers and is_expired(entry.headers, at_ms):
                expired.append(entry)
                to_ack.append(entry.offset)
            elif delivery.delivery_count > config.max_deliveries:
                dead.append((delivery, EXHAUSTED))
            elif not config.filter.matches(entry.headers):
                to_ack.append(entry.offset)
            else:
                live.append(delivery)
        if config.pinned is not None:
            live, unconverted = config.pinned.split(live)
            dead += unconverted
        self.backlog.extend(live)
        if to_ack:
            await self._settler.ack_now(to_ack)
            if self._keyed is not None:
                self._keyed.settled(to_ack)
        scope = self._scope
        report_expired(self._metrics.expired.labels(*scope.labels), scope.topic, scope.group,
                       expired)
        if dead:
            self._dead_letter_later(dead)
        await self.dispatch()

    async def dispatch(self) -> None:
        """Hand backlog entries to sessions with credit, round-robin, a page per session.

        A page is at most the backlog's even share over the attached sessions (so a shared group
        still spreads a small backlog over its members) and at most the session's credit.
        """
        if self._paused is not None and self._paused():
            return
        if self._keyed is not None:
            self._keyed.dispatch(self.sessions)
            return
        auto_acked: list[str] = []
        delivery_counts: list[int] = []
        backlog, scope = self.backlog, self._scope
        while backlog and self.sessions:
            session = self._session_with_credit()
            if session is None:
                break
            share = -(-len(backlog) // len(self.sessions))
            page = _take_front(backlog, min(share, session.credit))
            taken = session.offer_page(page)
            if taken < len(page):
                # not taken (the session started closing): back in front
                backlog.extendleft(reversed(page[taken:]))
                page = page[:taken]
            delivery_span(scope.topic, scope.group, scope.labels[2], page)
            delivery_counts.extend(map(_DELIVERY_COUNT, page))
            if self._config.auto_ack:
                auto_acked.extend(map(_ENTRY_OFFSET, page))
            if not taken:
                break
        self._metrics.count_deliveries(*scope.labels, delivery_counts)
        if auto_acked:  # at-most-once: acked as handed out, before the client has it
            await self._settler.ack_now(auto_acked)
            self._metrics.acks.labels(*scope.labels).inc(len(auto_acked))

    def _session_with_credit(self) -> Session | None:
        for _ in range(len(self.sessions)):
            self._next_session = (self._next_session + 1) % len(self.sessions)
            session = self.sessions[self._next_session]
            if session.has_credit:
                return session
        return None


def _take_front(backlog: deque[Delivery], count: int) -> list[Delivery]:
    """The first ``count`` deliveries of the backlog, removed from it (all of it in one step when it
    fits)."""
    if count >= len(backlog):
        page = list(backlog)
        backlog.clear()
        return page
    return [backlog.popleft() for _ in range(count)]
