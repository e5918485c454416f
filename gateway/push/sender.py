"""A push subscription's endpoint as seen from one gateway: its share of the request slots and
rate, its circuit breaker, and one request's outcome (ack, reject or retry) from the answer."""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from email.utils import parsedate_to_datetime

import aiohttp
import yarl

from gateway.observe.metrics import GatewayMetrics
from gateway.push.breaker import CircuitBreaker, RequestRate
from gateway.push.definition import PushDefinition
from gateway.push.endpoint import EndpointPolicy, EndpointRefused, connect_check, same_origin
from gateway.push.payload import PushRequest

MAX_RETRY_AFTER_S = 3600
ANSWER_READ_BYTES = 64 * 1024  # read (and dropped) so the connection can be used again
RETRY_STATUSES = frozenset({408, 425, 429})


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one request came to: ``action`` ack, reject or nack; for a nack, the wait the
    endpoint asked for; ``label`` for the metric; ``error`` what went wrong (empty when fine)."""

    action: str
    label: str
    status: int | None = None
    retry_after_s: float | None = None
    error: str = ""


def outcome_of(status: int, retry_after: str | None, location: str | None,
               endpoint: yarl.URL) -> Outcome:
    """The outcome of an answer: 2xx acks; 408, 425, 429, 5xx and redirects retry (a redirect is
    never followed); any other 4xx rejects to the dead letters."""
    if 200 <= status < 300:
        return Outcome("ack", "ok", status)
    wait = parse_retry_after(retry_after)
    if 300 <= status < 400:
        target = "" if location is None else f" to {_host_of(endpoint, location)}"
        return Outcome("nack", "retried", status, wait,
                       f"HTTP {status}: redirect{target} not followed")
    if status in RETRY_STATUSES or status >= 500:
        return Outcome("nack", "retried", status, wait, f"HTTP {status}")
    return Outcome("reject", "rejected", status, None, f"HTTP {status}")


def parse_retry_after(raw: str | None, now_s: float | None = None) -> float | None:
    """``Retry-After`` in seconds (delay seconds or an HTTP date), at most an hour; None when
    absent or unreadable."""
    if raw is None:
        return None
    raw = raw.strip()
    if raw.isdigit():
        return float(min(int(raw), MAX_RETRY_AFTER_S))
    try:
        when = parsedate_to_datetime(raw).timestamp()
    except (TypeError, ValueError, IndexError):
        return None
    return min(max(0.0, when - (time.time() if now_s is None else now_s)), MAX_RETRY_AFTER_S)


def _host_of(endpoint: yarl.URL, location: str) -> str:
    try:
        target = endpoint.join(yarl.URL(location))
    except ValueError:
        return "an unreadable location"
    return "the same origin" if same_origin(endpoint, target) else str(target.host)


class Endpoint:
    """One subscription's endpoint on this gateway: every owned partition's member takes a turn
    here before each request."""

    def __init__(self, definition: PushDefinition, http: aiohttp.ClientSession,
                 policy: EndpointPolicy, metrics: GatewayMetrics, share: float) -> None:
        self.definition = definition
        self.url = yarl.URL(definition.endpoint)
        self._http, self._metrics = http, metrics
        self.breaker = CircuitBreaker()
        self.rate = RequestRate(None)
        self.slots = 1
        self.busy = 0
        self._changed = asyncio.Event()
        # the policy is the process's: an endpoint admitted elsewhere is checked here once
        self._refused: str | None = None
        try:
            connect_check(self.url, policy)
        except EndpointRefused as exc:
            self._refused = f"endpoint refused: {exc}"
        self.reshare(share)

    def reshare(self, share: float) -> None:
        """This gateway's part of the caps: ``share`` of the topic's partitions are owned here."""
        definition = self.definition
        slots = max(1, math.ceil(definition.max_in_flight * share))
        rate = definition.rate_per_s
        rate = None if rate is None else max(rate * share, 0.01)
        if (slots, rate) == (self.slots, self.rate.rate_per_s):
            return  # asked every reconcile round: waiters are woken by changes only
        self.slots = slots
        self.rate.set_rate(rate)
        self._wake()

    async def take_turn(self, keep_alive: Callable[[], Awaitable[None]],
                        keep_alive_s: float) -> None:
        """Wait for a free slot, the rate's next token and the breaker's leave, calling
        ``keep_alive`` every ``keep_alive_s`` meanwhile (the held deliveries' ack timeouts must not
        pass while the endpoint cannot take them); returns holding a slot."""
        next_keep_alive = time.monotonic() + keep_alive_s
        while True:
            wait = self._wait_s()
            if wait == 0.0:
                if self.breaker.allow():
                    self.rate.take()
                    self.busy += 1
                    return
                wait = None  # a half-open breaker's probe is out: its outcome wakes this
            changed = self._changed
            until_keep_alive = next_keep_alive - time.monotonic()
            if until_keep_alive <= 0:
                await keep_alive()
                next_keep_alive = time.monotonic() + keep_alive_s
                continue
            timeout = until_keep_alive if wait is None else min(wait, until_keep_alive)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), max(timeout, 0.001))

    def _wait_s(self) -> float | None:
        """0 when a request may go now; else how long until it may (None: until a slot frees)."""
        if self.busy >= self.slots:
            return None
        breaker_wait = self.breaker.wait_s()
        if breaker_wait > 0:
            return breaker_wait
        return self.rate.delay_s()

    def unused(self) -> None:
        """A turn given back unused (what it was for went back to the group meanwhile)."""
        self.busy -= 1
        self.breaker.cancel_probe()
        self._wake()

    def done(self, outcome: Outcome) -> None:
        """A request's slot back, its outcome told to the breaker."""
        self.busy -= 1
        if outcome.action == "nack":
            self.breaker.failed(outcome.retry_after_s)
        else:
            self.breaker.succeeded()
        self._metrics.push_breaker_open.labels(self.definition.topic, self.definition.group).set(
            1 if self.breaker.state == "open" else 0)
        self._wake()

    def _wake(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    async def send(self, request: PushRequest) -> Outcome:
        """POST ``request``; never raises for the endpoint's faults (they are outcomes)."""
        definition = self.definition
        started = time.monotonic()
        if self._refused is not None:
            outcome = Outcome("nack", "refused", error=self._refused)
            self._metrics.push_requests.labels(definition.topic, definition.group,
                                               outcome.label).inc()
            return outcome
        try:
            async with self._http.post(
                    self.url, data=request.body, headers=request.headers, allow_redirects=False,
                    timeout=aiohttp.ClientTimeout(total=definition.timeout_ms / 1000)) as answer:
                await answer.content.read(ANSWER_READ_BYTES)
                outcome = outcome_of(answer.status, answer.headers.get("Retry-After"),
                                     answer.headers.get("Location"), self.url)
        except TimeoutError:
            outcome = Outcome("nack", "timeout",
                              error=f"no answer within {definition.timeout_ms} ms")
        except (aiohttp.ClientError, OSError) as exc:
            outcome = Outcome("nack", "error", error=f"{type(exc).__name__}: {exc}"[:300])
        except (ValueError, UnicodeError) as exc:  # the client cannot write it: never will
            outcome = Outcome("reject", "rejected", error=f"not sendable: {exc}"[:300])
        labels = (definition.topic, definition.group)
        self._metrics.push_requests.labels(*labels, outcome.label).inc()
        self._metrics.push_request_seconds.labels(*labels).observe(time.monotonic() - started)
        return outcome
