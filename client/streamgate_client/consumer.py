"""The consumer: a WebSocket subscription as an async iterator, with batched acks and
reconnect-and-resume.

Group subscriptions (exclusive, shared) simply rejoin after a dropped connection: the group keeps
its position and un-acked messages are redelivered. Broadcast subscriptions resume with
``from=<cursor>`` built from the last offset per partition this consumer yielded (or the cursor the
gateway puts in a 4008 close), so a reconnect neither skips nor repeats a message.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections import deque
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from ssl import SSLContext
from typing import Any, Generic, Literal

import aiohttp
import orjson

from streamgate_client.credentials import Credentials, TokenProvider, authorized_body, tls_hint
from streamgate_client.cursors import (
    cursor_from_close_reason,
    format_cursor,
    merge_cursors,
    parse_cursor,
    retry_delay_from_close_reason,
)
from streamgate_client.errors import (
    ClientError,
    ConnectionFailed,
    ProblemError,
    SubscriptionClosed,
    problem_of,
)
from streamgate_client.received import Assignment, Gap, Message, T
from streamgate_client.settle import Settler
from streamgate_client.token_refresh import SocketTokenRefresh
from streamgate_client.typed import decoders_for

log = logging.getLogger(__name__)

Mode = Literal["exclusive", "shared", "key_shared", "broadcast"]
RECONNECT_CODES = frozenset({1001, 1006, 1012, 1013, 4008, 4429, 4503})
FATAL_CODES = frozenset({4401, 4403, 4404, 4409})
# what ``compress=True`` offers: permessage-deflate with the full 32 KiB window
WS_DEFLATE_WINDOW_BITS = 15


class Consumer(Generic[T]):
    """Subscribes to a topic. ``async with Consumer(url, topic, group="g") as c:``, then
    ``async for batch in c.batches(): ...; await c.ack(batch)`` (what has arrived, at once: the
    fastest) or ``async for m in c: ...; await m.ack()``. Messages arrive as batch frames.

    ``mode`` defaults to ``exclusive`` with a group and ``broadcast`` without. ``from_`` is
    ``earliest``, ``latest`` or a cursor ``<partition>:<offset>,...``; for a group it only matters
    when the group is created. ``filters`` are ``"<header>:<v1>,<v2>"`` strings (all must match).
    With ``auto_ack`` the gateway acks as it sends (at-most-once) and ``ack()`` does nothing. After
    ``max_reconnects`` failed attempts in a row the iterator raises ``ConnectionFailed``; a 4429
    reconnects no sooner than the ``retry in <n> s`` it names; 4401, 4403, 4404 (topic deleted) and
    4409 (group conflict) raise ``SubscriptionClosed`` at once.
    ``token`` is a JWT or a provider of them (``Callable[[], str | Awaitable[str]]``): with a
    provider, a 4401 (the token expired) reconnects at once with a fresh token and resumes like
    any reconnect, and an upgrade refused with 401 is tried once more with a fresh one; shortly
    before its ``exp`` a fresh token goes over the open socket (an ``auth`` frame), so the
    connection outlives its token: no reconnect, no redelivery of what waited for its ack.
    ``ssl``: an ``SSLContext`` for WSS and HTTPS (a private CA, a client certificate), or False
    to skip verification.
    ``decode_as`` (a dataclass, a pydantic model or a msgspec Struct; or one per topic) makes each
    message's ``data`` that type, or ``DecodeFailed`` naming the message.
    ``compress=True`` offers permessage-deflate (fewer bytes on the wire for CPU on both ends); the
    gateway accepts it unless its ``ws_compression`` is off (see ``compressed``).
    ``retry_backoff_ms`` (with ``retry_backoff_multiplier`` and ``retry_backoff_max_ms``) makes a
    group's failed deliveries (a ``nack()`` without a delay, an ack timeout) wait longer each time.
    A resume (a cursor, a reconnect, a group's reader starting again) past what retention kept is
    never a silent jump: each lost range is a ``Gap`` in ``gaps`` and goes to ``on_gap``.
    While an operator has the group paused (``Admin.pause_group``), ``paused`` is True (until
    ``paused_until_ms``, when set) and no message arrives; acks of what arrived still work.
    """

    def __init__(self, base_url: str, topic: str, *, group: str | None = None,
                 mode: Mode | None = None, from_: str | None = None,
                 from_time_ms: int | None = None, max_in_flight: int = 100,
                 ack_timeout_ms: int | None = None, max_deliveries: int | None = None,
                 auto_ack: bool = False, filters: Sequence[str] = (), ack_linger_ms: float = 5,
                 max_reconnects: int = 10, backoff_base_s: float = 0.1, backoff_max_s: float = 5.0,
                 heartbeat_s: float | None = 20.0, api_key: str | None = None,
                 token: str | TokenProvider | None = None,
                 session: aiohttp.ClientSession | None = None,
                 compress: bool = False, on_gap: Callable[[Gap], None] | None = None,
                 retry_backoff_ms: int | None = None,
                 retry_backoff_multiplier: float | None = None,
                 retry_backoff_max_ms: int | None = None,
                 ssl: SSLContext | bool | None = None,
                 decode_as: type[T] | Mapping[str, type[Any]] | None = None) -> None:
        self.topic = topic
        self._decoders = decoders_for(decode_as)
        self.group = group
        self.mode: Mode = mode or ("exclusive" if group else "broadcast")
        self.assignment: Assignment | None = None
        # Broadcast: the last offset yielded per partition (seeded by a cursor ``from_``); what a
        # resume sends.
        self.cursor: dict[int, str] = (
            parse_cursor(from_) if from_ not in (None, "earliest", "latest") else {}
        )
        self.last_error: dict[str, Any] | None = None
        self.gaps: list[Gap] = []  # every range found lost on a resume, in arrival order
        # the group is paused (a ``paused`` frame, until ``resumed``): no message comes meanwhile
        self.paused = False
        self.paused_until_ms: int | None = None  # when the pause ends by itself (None: resumed)
        self._on_gap = on_gap
        self.connections = 0  # successful connects: more than 1 means it reconnected
        self._base_url = base_url.rstrip("/")
        self._credentials = Credentials(api_key, token)
        self._sent_auth: dict[str, str] = {}  # the headers of the last upgrade
        self._ssl: SSLContext | bool = True if ssl is None else ssl
        self._start = from_
        self._from_time_ms = from_time_ms
        self._max_in_flight = max_in_flight
        self._options: list[tuple[str, str]] = [("max_in_flight", str(max_in_flight))]
        for name, item in (("ack_timeout_ms", ack_timeout_ms), ("max_deliveries", max_deliveries),
                           ("retry_backoff_ms", retry_backoff_ms),
                           ("retry_backoff_multiplier", retry_backoff_multiplier),
                           ("retry_backoff_max_ms", retry_backoff_max_ms)):
            if item is not None:
                self._options.append((name, str(item)))
        if auto_ack:
            self._options.append(("auto_ack", "true"))
        self._options += [("filter", spec) for spec in filters]
        self._auto_ack = auto_ack
        self._ack_linger_s = ack_linger_ms / 1000
        self._max_reconnects = max_reconnects
        self._backoff = (backoff_base_s, backoff_max_s)
        # the next reconnect waits at least this long (a 4429's "retry in <n> s")
        self._min_delay_s = 0.0
        self._heartbeat_s = heartbeat_s
        self._compress = compress
        self._session = session
        self._owns_session = session is None
        self._ws: aiohttp.ClientWebSocketResponse | None = None
        self._settler: Settler | None = None
        self._token_refresh: SocketTokenRefresh | None = None
        self._failures = 0
        self._closed = False
        self._received: deque[Message[T]] = deque()  # decoded, not yet yielded

    @property
    def compressed(self) -> bool:
        """Whether the current connection negotiated permessage-deflate (asked with
        ``compress=True``)."""
        return self._ws is not None and bool(self._ws.compress)

    @property
    def is_broadcast(self) -> bool:
        """Whether this is a broadcast (group-less) subscription."""
        return self.mode == "broadcast"

    async def __aenter__(self) -> Consumer[T]:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __aiter__(self) -> Consumer[T]:
        return self

    async def start(self) -> None:
        """Open the session (unless one was given) and connect; a bad request raises
        ``ProblemError``."""
        if self._session is None:
            self._session = aiohttp.ClientSession()
        if self.is_broadcast and self._start in (None, "latest") and self._from_time_ms is None:
            await self._pin_latest()
        await self._connect_with_retries()

    async def aclose(self) -> None:
        """Send pending acks, close the socket and the session it opened; idempotent."""
        if self._closed:
            return
        self._closed = True
        await self._drop_connection()
        if self._owns_session and self._session is not None:
            await self._session.close()

    async def __anext__(self) -> Message[T]:
        if not self._received:
            await self._receive()
        return self._received.popleft()

    async def batches(self, max_messages: int = 1000) -> AsyncIterator[list[Message[T]]]:
        """Iterate over lists of messages: each holds what has arrived (at least one, at most
        ``max_messages``); ``await consumer.ack(batch)`` settles a whole list at once."""
        while True:
            try:
                if not self._received:
                    await self._receive()
            except StopAsyncIteration:
                return
            received = self._received
            if len(received) <= max_messages:
                batch = list(received)
                received.clear()
            else:
                batch = [received.popleft() for _ in range(max_messages)]
            yield batch

    async def ack(self, messages: Sequence[Message[Any]]) -> None:
        """Settle ``messages`` (from this consumer) as one, batched like ``Message.ack``."""
        self._settle("ack", messages)

    async def nack(self, messages: Sequence[Message[Any]]) -> None:
        """Give ``messages`` back for redelivery at once."""
        self._settle("nack", messages)

    def _settle(self, action: str, messages: Sequence[Message[Any]]) -> None:
        settlers = {m._settler for m in messages if m._settler is not None}
        for settler in settlers:
            settler.add_many(action, messages)

    async def _receive(self) -> None:
        """Wait until some message is decoded into ``_received``; StopAsyncIteration once
        closed."""
        while not self._closed:
            if self._ws is None:
                await self._connect_with_retries()
                continue
            frame = await self._ws.receive()
            if frame.type is aiohttp.WSMsgType.TEXT:
                self._handle(orjson.loads(frame.data))
                if self._received:
                    return
            elif frame.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSING,
                                aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.ERROR):
                await self._on_close(frame)
        raise StopAsyncIteration

    # --- frames -----------------------------------------------------------------------------------
    def _handle(self, doc: dict[str, Any]) -> None:
        kind = doc.get("type")
        if kind == "messages":
            self._failures = 0
            self._take(doc["messages"])
        elif kind == "message":
            self._failures = 0
            self._take([doc])
        elif kind == "authenticated" and self._token_refresh is not None:
            self._token_refresh.authenticated(doc)
            self._sent_auth = self._token_refresh.auth
        elif kind == "assignment":
            self.assignment = Assignment(int(doc["generation"]), tuple(doc["partitions"]))
        elif kind == "gap":
            gap = Gap(int(doc["partition"]), str(doc["first_lost"]), doc.get("first_kept"),
                      doc.get("count"))
            self.gaps.append(gap)
            log.warning("partition %d resumed past retention: %s up to %s are gone",
                        gap.partition, gap.first_lost, gap.first_kept)
            if self._on_gap is not None:
                self._on_gap(gap)
        elif kind in ("paused", "resumed"):
            self.paused, self.paused_until_ms = kind == "paused", doc.get("until_ms")
            log.info("group %s %s on %s", self.group, kind, self.topic)
        elif kind == "error":
            self.last_error = doc
            log.warning("gateway reported %s: %s", doc.get("code"), doc.get("detail"))

    def _take(self, docs: list[dict[str, Any]]) -> None:
        """Message frames' documents into ``_received`` (and, broadcast, the cursor)."""
        broadcast = self.is_broadcast
        settler = None if broadcast or self._auto_ack else self._settler
        topic, decoders = self.topic, self._decoders
        self._received.extend([
            Message(d.get("topic", topic), d["partition"], d["offset"], d.get("key"),
                    d.get("value"), d.get("value_b64"), d.get("headers") or {},
                    d.get("timestamp_ms", 0), d.get("delivery_count", 1), settler,
                    decoders(d.get("topic", topic)))
            for d in docs])
        if broadcast:
            cursor = self.cursor
            for d in docs:
                cursor[d["partition"]] = d["offset"]

    async def _on_close(self, frame: aiohttp.WSMessage) -> None:
        explicit = frame.type is aiohttp.WSMsgType.CLOSE
        code = int(frame.data) if explicit and frame.data is not None else 1006
        reason = str(frame.extra or "") if explicit else ""
        await self._drop_connection()
        if self._closed:
            return
        if code == 4401 and self._credentials.refreshable:
            # the token expired: no failure, a fresh token right away
            self._credentials.forget(self._sent_auth)
            log.info("subscription to %s: token expired; reconnecting", self.topic)
            return
        if code in FATAL_CODES:
            raise SubscriptionClosed(code, reason)
        if explicit and code not in RECONNECT_CODES:
            if code == 1000:
                self._closed = True
                return
            raise SubscriptionClosed(code, reason)
        if code == 4008:
            self.cursor = merge_cursors(self.cursor, cursor_from_close_reason(reason))
        if code == 4429:
            self._min_delay_s = retry_delay_from_close_reason(reason)
        self._failures += 1
        log.info("subscription to %s closed (%s %s); reconnecting", self.topic, code, reason)

    # --- connecting -------------------------------------------------------------------------------
    async def _pin_latest(self) -> None:
        """Turn broadcast ``latest`` into an explicit cursor so a resume never skips what came
        meanwhile."""
        assert self._session is not None
        body = await authorized_body(self._credentials, self._session, "GET",
                                     f"{self._base_url}/v1/topics/{self.topic}", ssl=self._ssl)
        details = orjson.loads(body).get("partition_details", [])
        self.cursor = {d["partition"]: d["last_offset"] for d in details if d.get("last_offset")}
        self._start = "earliest"  # partitions that were empty: everything in them is new

    def _query(self) -> list[tuple[str, str]]:
        query = [("topic", self.topic), ("mode", self.mode), ("batch", "true"), *self._options]
        if self.group is not None:
            query.append(("group", self.group))
        start = self._start
        if self.is_broadcast:
            start = format_cursor(self.cursor) if self.cursor else start
            if self._from_time_ms is not None:
                query.append(("from_time_ms", str(self._from_time_ms)))
        if start is not None:
            query.append(("from", start))
        return query

    async def _connect_with_retries(self) -> None:
        """Connect, backing off after drops and failures; give up after ``max_reconnects`` failures
        in a row; an upgrade refused with 401 is tried once more with a provider's fresh token."""
        refreshed = False
        while True:
            if self._failures:
                base_s, max_s = self._backoff
                jittered = random.uniform(base_s, min(max_s, base_s * 2 ** self._failures))
                await asyncio.sleep(max(jittered, self._min_delay_s))
                self._min_delay_s = 0.0
            try:
                await self._connect()
                return
            except ClientError as exc:
                if not refreshed and self._credentials.fresh_token_may_fix(exc):
                    refreshed = True
                    continue
                self._failures += 1
                if not exc.retriable or self._failures > self._max_reconnects:
                    raise
                log.warning("connecting to %s failed (%s); retrying", self.topic, exc)

    async def _connect(self) -> None:
        assert self._session is not None
        url = f"{self._base_url}/v1/subscribe"
        query = self._query()
        self._sent_auth = auth = await self._credentials.headers()
        try:
            ws = await self._session.ws_connect(
                url, params=query, heartbeat=self._heartbeat_s, headers=auth, ssl=self._ssl,
                compress=WS_DEFLATE_WINDOW_BITS if self._compress else 0)
        except aiohttp.WSServerHandshakeError as exc:
            problem = await self._handshake_problem(url, query, exc)
            if problem.status == 401:
                self._credentials.forget(auth)
            raise problem from exc
        except (aiohttp.ClientConnectionError, TimeoutError) as exc:
            raise ConnectionFailed(f"connect {url}: {type(exc).__name__}: {exc}"
                                   f"{tls_hint(url, exc)}") from exc
        self._ws = ws
        self.paused, self.paused_until_ms = False, None  # a paused group says so again on join
        self._settler = Settler(ws, self._ack_linger_s, self._max_in_flight // 2)
        self._token_refresh = SocketTokenRefresh(self._credentials, auth,
                                                 lambda frame: ws.send_str(frame.decode()))
        self.connections += 1

    async def _handshake_problem(self, url: str, query: list[tuple[str, str]],
                                 exc: aiohttp.WSServerHandshakeError) -> ProblemError:
        """The problem document behind a refused upgrade (parameters are checked before the
        upgrade)."""
        assert self._session is not None
        with contextlib.suppress(aiohttp.ClientError, TimeoutError):
            async with self._session.get(url, params=query, headers=self._sent_auth,
                                         ssl=self._ssl) as response:
                if response.status == exc.status:
                    return problem_of(response.status, await response.read(), response.headers)
        return ProblemError(exc.status, {"status": exc.status, "detail": exc.message})

    async def _drop_connection(self) -> None:
        ws, self._ws = self._ws, None
        settler, self._settler = self._settler, None
        if self._token_refresh is not None:
            self._token_refresh.cancel()
            self._token_refresh = None
        if settler is not None:
            await settler.aclose()
        if ws is not None and not ws.closed:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(ws.close(), 5)
