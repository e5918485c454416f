"""The producer: messages batched per lane into one POST each, several lanes in flight, with
client-side idempotency keys and retries.

Every batch gets an ``Idempotency-Key`` ``<producer id>-<batch number>`` when it is cut (the gateway
keys its message ``i`` as ``<that>:<i>``); a batch is retried as it is, with the same key, so a
retry after a timeout, a dropped connection or a 503 never writes a message twice (the gateway
answers it with the first offset and ``duplicate: true``).
Messages are spread over ``max_in_flight`` lanes by key (or partition), each with one batch in
flight and its retries in order, so a key's messages are written in the order they were sent.
Batches leave as frames over one WebSocket when the gateway offers it, else as HTTP requests.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import logging
import random
import uuid
from collections import deque
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from ssl import SSLContext
from typing import Any, Literal

import aiohttp
import orjson

from streamgate_client.compression import Compression, compress_body
from streamgate_client.credentials import Credentials, TokenProvider, authorized_body
from streamgate_client.errors import ClientError, ProblemError
from streamgate_client.publish_socket import PublishSocket

log = logging.getLogger(__name__)

Acks = Literal["0", "1", "all"]
Transport = Literal["auto", "websocket", "http"]
_MISSING: Any = object()
_dumps = orjson.dumps
IDEMPOTENCY_HEADER = "Idempotency-Key"


@dataclass(slots=True)
class SendResult:
    """Where a message was written. With ``acks="0"`` the gateway only queues it: partition and
    offset are None."""

    partition: int | None
    offset: str | None
    duplicate: bool = False


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Exponential backoff with full jitter, capped, and at least what ``Retry-After`` asks for."""

    max_retries: int = 5
    base_s: float = 0.1
    max_s: float = 5.0

    def delay_s(self, attempt: int, retry_after_s: float | None = None) -> float:
        """How long to wait before retry number ``attempt`` (1-based)."""
        backoff = random.uniform(0, min(self.max_s, self.base_s * 2 ** (attempt - 1)))
        return max(backoff, retry_after_s or 0.0)

    def should_retry(self, attempt: int, error: ClientError) -> bool:
        """Whether a failed attempt number ``attempt`` (1-based) is worth another try."""
        return error.retriable and attempt <= self.max_retries


@dataclass(slots=True)
class _Batch:
    """Encoded messages that leave in one request, answered through a future per message (``send``)
    or one for the whole batch (``send_many``)."""

    encoded: list[bytes] = field(default_factory=list)
    futures: list[asyncio.Future[SendResult]] = field(default_factory=list)
    whole: asyncio.Future[list[SendResult]] | None = None
    size_bytes: int = 0
    idempotency_key: str = ""  # given when the batch is cut; a retry sends it again


@dataclass(slots=True)
class _Lane:
    """Messages of some keys: the open batch, batches cut and waiting, and at most one in flight."""

    open: _Batch = field(default_factory=_Batch)
    ready: deque[_Batch] = field(default_factory=deque)
    busy: bool = False  # a batch of this lane is in flight (or about to leave)
    timer: asyncio.Handle | None = None  # the kick scheduled for its open batch


def encode_message(value: Any = _MISSING, *, value_b64: bytes | str | None = None,
                   key: str | None = None, headers: Mapping[str, str] | None = None,
                   partition: int | None = None, expected_offset: str | None = None,
                   ttl_ms: int | None = None) -> bytes:
    """One message of a publish body as JSON; ``bytes`` values go as ``value_b64``."""
    if (value_b64 is None and headers is None and partition is None and value is not _MISSING
            and expected_offset is None and ttl_ms is None
            and not isinstance(value, bytes | bytearray)):
        return _dumps({"value": value} if key is None else {"key": key, "value": value})
    doc: dict[str, Any] = {}
    if isinstance(value, bytes | bytearray):
        value, value_b64 = _MISSING, bytes(value)
    if (value is _MISSING) == (value_b64 is None):
        raise ValueError("give exactly one of value and value_b64")
    if value_b64 is not None:
        doc["value_b64"] = (
            value_b64 if isinstance(value_b64, str) else base64.b64encode(value_b64).decode()
        )
    else:
        doc["value"] = value
    for name, item in (("key", key), ("headers", dict(headers) if headers else None),
                       ("partition", partition), ("expected_offset", expected_offset),
                       ("ttl_ms", ttl_ms)):
        if item is not None:
            doc[name] = item
    return _dumps(doc)


class Producer:
    """Publishes to one topic. Use as ``async with Producer(url, topic) as producer:``, then

    - ``future = await producer.send(...)``: returns once the message is queued (waiting only
      while ``max_buffer_bytes`` are queued already); await the future for its result later, or
      ``await producer.flush()`` and read ``future.result()``;
    - ``await producer.send_many([...])``: many messages, their results in input order, without
      a future per message (the fastest way);
    - ``await producer.send_and_wait(value=..., key=...)``: one message's ``SendResult``.

    Adaptive batching: a message queued while its lane has nothing in flight leaves at once (with
    the others queued in the same event-loop turn); while a batch is in flight the next one gathers
    messages, up to ``batch_size`` messages or ``max_batch_bytes``. ``linger_ms`` > 0 makes an idle
    lane wait that long first, for fewer, larger requests. ``max_in_flight`` lanes send at once.

    ``acks``: ``"0"`` (queued in the gateway, no offsets returned), ``"1"`` (written on the
    primary) or ``"all"`` (confirmed by the replicas). ``compression`` (``"gzip"`` or ``"zstd"``)
    sends each batch body compressed; ``max_batch_bytes`` still counts the uncompressed body. A
    batch that fails for good (after ``max_retries``) fails its messages; later messages go on.

    ``transport``: ``"auto"`` sends batches as frames over one WebSocket (``/v1/publish``, opened
    at the first publish, reopened after a close; unanswered frames are resent under their
    idempotency keys), or over HTTP for the producer's life when the gateway does not offer it;
    ``"websocket"`` raises ``PublishNotOffered`` then; ``"http"`` always posts. A frame larger
    than the gateway takes goes over HTTP. With ``compression`` the socket offers
    permessage-deflate (the gateway may decline it) and HTTP bodies use that coding.

    ``token`` is a JWT or a provider of them (``Callable[[], str | Awaitable[str]]``): its token
    is cached, asked for again shortly before its ``exp`` and when the gateway refuses it (a 401,
    a publish socket closed with 4401), and the refused request is retried once with the fresh
    one. ``ssl``: an ``SSLContext`` for HTTPS and WSS (a private CA, a client certificate for
    mutual TLS), or False to skip verification; with a given ``session`` it overrides that
    session's setting.
    """

    def __init__(self, base_url: str, topic: str, *, acks: Acks = "1", batch_size: int = 1000,
                 max_batch_bytes: int = 4 * 1024 * 1024, linger_ms: float = 0,
                 max_in_flight: int = 4, max_buffer_bytes: int = 32 * 1024 * 1024,
                 max_retries: int = 5, timeout_s: float = 10, retry: RetryPolicy | None = None,
                 api_key: str | None = None, token: str | TokenProvider | None = None,
                 session: aiohttp.ClientSession | None = None,
                 compression: Compression | None = None, transport: Transport = "auto",
                 ssl: SSLContext | bool | None = None) -> None:
        if acks not in ("0", "1", "all"):
            raise ValueError("acks must be '0', '1' or 'all'")
        if transport not in ("auto", "websocket", "http"):
            raise ValueError("transport must be 'auto', 'websocket' or 'http'")
        self.topic = topic
        self.acks: Acks = acks
        self.producer_id = uuid.uuid4().hex
        self._topic_url = f"{base_url.rstrip('/')}/v1/topics/{topic}"
        self._url = f"{self._topic_url}/messages"
        self._base_url = base_url
        self._credentials = Credentials(api_key, token)
        self._ssl: SSLContext | bool = True if ssl is None else ssl
        self._headers = {"Content-Type": "application/json"}
        self._transport = transport
        self._socket: PublishSocket | None = None
        self._compression = compression
        if compression is not None:
            compress_body(b"", compression)  # an unknown coding fails here, not at the first send
            self._headers["Content-Encoding"] = compression
        self._body_head = b'{"acks":"' + acks.encode() + b'","messages":['
        self._batch_size = max(1, batch_size)
        self._max_batch_bytes = max_batch_bytes
        self._linger_s = linger_ms / 1000
        self._max_buffer_bytes = max(max_buffer_bytes, max_batch_bytes)
        self._retry = retry or RetryPolicy(max_retries=max_retries)
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._timeout_s = timeout_s
        self._session = session
        self._owns_session = session is None
        self._batch_numbers = itertools.count(1)
        self._lanes = [_Lane() for _ in range(max(1, max_in_flight))]
        self._next_keyless = itertools.cycle(range(len(self._lanes)))
        self._buffered_bytes = 0
        self._room = asyncio.Event()
        self._room.set()
        self._queue_order = asyncio.Lock()
        self._drained = asyncio.Event()
        self._drained.set()
        self._senders: set[asyncio.Task[None]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False
        self._cut_since_yield = False
        self._lanes_known = False
        self._learning: asyncio.Future[int | None] | None = None

    async def __aenter__(self) -> Producer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def start(self) -> None:
        """Open the HTTP session (unless one was given); the socket opens at the first publish."""
        if self._session is None:
            self._session = aiohttp.ClientSession()
        if self._transport != "http" and self._socket is None:
            self._socket = PublishSocket(self._session, self._base_url, self.topic,
                                         self._credentials,
                                         required=self._transport == "websocket",
                                         timeout_s=self._timeout_s,
                                         deflate=self._compression is not None, ssl=self._ssl)
        self._loop = asyncio.get_running_loop()

    async def _until_queueable(self) -> None:
        """Wait until a message may be queued: started, not closed, the lanes known, room in the
        buffer."""
        if self._closed or self._loop is None:
            raise RuntimeError("the producer is not started (use 'async with Producer(...)')")
        await self._learn_lanes()
        await self._room.wait()

    async def _learn_lanes(self) -> None:
        """Before the first message: a topic of one partition gets one lane, so all its messages
        keep their send order. Concurrent callers share one request."""
        if self._lanes_known:
            return
        if self._learning is None:
            self._learning = asyncio.ensure_future(self._partition_count())
        if await asyncio.shield(self._learning) == 1 and len(self._lanes) > 1:
            self._lanes = self._lanes[:1]
            self._next_keyless = itertools.cycle([0])
        self._lanes_known = True

    async def _partition_count(self) -> int | None:
        """The topic's partitions, or None when the caller may not describe it (a publish-only
        principal) or the gateway does not answer: then only each key's order is kept."""
        assert self._session is not None
        try:
            payload = await authorized_body(self._credentials, self._session, "GET",
                                            self._topic_url, timeout=self._timeout,
                                            ssl=self._ssl)
            count = orjson.loads(payload).get("partitions")
        except (ClientError, orjson.JSONDecodeError, AttributeError):
            return None
        return count if isinstance(count, int) else None

    async def aclose(self) -> None:
        """Send what is queued, then close the socket and the session it opened; idempotent."""
        if self._closed:
            return
        with contextlib.suppress(ClientError):
            await self.flush()
        self._closed = True
        for sender in list(self._senders):
            sender.cancel()
        for sender in list(self._senders):
            with contextlib.suppress(asyncio.CancelledError):
                await sender
        if self._socket is not None:
            await self._socket.aclose()
        if self._owns_session and self._session is not None:
            await self._session.close()

    async def send(self, value: Any = _MISSING, *, value_b64: bytes | str | None = None,
                   key: str | None = None, headers: Mapping[str, str] | None = None,
                   partition: int | None = None,
                   ttl_ms: int | None = None) -> asyncio.Future[SendResult]:
        """Queue one message; returns the future of its ``SendResult`` (which raises
        ``ProblemError`` or ``ConnectionFailed``). Waits only while the buffer is full.
        ``ttl_ms``: not delivered once that long has passed since it was written."""
        if not (self._lanes_known and self._room.is_set()) or self._closed:
            await self._until_queueable()
        future = self._enqueue(encode_message(value, value_b64=value_b64, key=key,
                                              headers=headers, partition=partition,
                                              ttl_ms=ttl_ms),
                               self._lane_of(key, partition))
        if self._cut_since_yield:
            # a batch is ready: let its lane's sender (and answers that came in) run, even when
            # the caller's loop never waits
            self._cut_since_yield = False
            await asyncio.sleep(0)
        return future

    async def send_and_wait(self, value: Any = _MISSING, *, value_b64: bytes | str | None = None,
                            key: str | None = None, headers: Mapping[str, str] | None = None,
                            partition: int | None = None,
                            ttl_ms: int | None = None) -> SendResult:
        """Publish one message and wait for its result; raises ``ProblemError`` or
        ``ConnectionFailed``. When its lane is idle the request leaves from the caller's task, at
        once."""
        if self._lanes_known and self._room.is_set() and not self._closed and not self._linger_s:
            lane = self._lanes[self._lane_of(key, partition)]
            if not (lane.busy or lane.ready or lane.open.encoded or lane.timer):
                encoded = encode_message(value, value_b64=value_b64, key=key, headers=headers,
                                         partition=partition, ttl_ms=ttl_ms)
                return (await self._send_alone(lane, encoded))[0]
        return await (await self.send(value, value_b64=value_b64, key=key, headers=headers,
                                      partition=partition, ttl_ms=ttl_ms))

    async def _send_alone(self, lane: _Lane, encoded: bytes) -> list[SendResult]:
        """Deliver one message on an idle lane from the caller's task (no sender task, no future);
        what queued on the lane meanwhile leaves after it."""
        batch = self._numbered(_Batch(encoded=[encoded], size_bytes=len(encoded) + 1))
        lane.busy = True
        self._buffered_bytes += batch.size_bytes
        self._drained.clear()
        try:
            return await self._post_with_retries(self._body_head + encoded + b"]}", 1,
                                                 batch.idempotency_key)
        finally:
            self._release(batch)
            lane.busy = False
            self._kick(lane)
            self._note_if_drained()

    async def send_many(self, messages: Iterable[Mapping[str, Any]]) -> list[SendResult]:
        """Publish messages given as dicts of ``send`` arguments; their results in input order.
        Each batch has one future, not each message: the fastest way to publish many."""
        async with self._whole_calls():
            by_lane: dict[int, tuple[list[bytes], list[int]]] = {}
            count = 0
            for m in messages:
                key, partition = m.get("key"), m.get("partition")
                encoded, positions = by_lane.setdefault(self._lane_of(key, partition), ([], []))
                encoded.append(encode_message(m.get("value", _MISSING),
                                              value_b64=m.get("value_b64"), key=key,
                                              headers=m.get("headers"), partition=partition,
                                              ttl_ms=m.get("ttl_ms")))
                positions.append(count)
                count += 1
            answers = [(positions, self._queue_whole(lane, encoded))
                       for lane, (encoded, positions) in by_lane.items()]
        results: list[Any] = [None] * count
        for positions, futures in answers:
            lane_results = [result for future in futures for result in await future]
            for position, result in zip(positions, lane_results, strict=True):
                results[position] = result
        return results

    async def send_conditional(self, messages: Iterable[Mapping[str, Any]], *,
                               expected_last_offset: str | None = None) -> list[SendResult]:
        """Publish messages (dicts of ``send`` arguments, each may add ``expected_offset``: its
        key's newest offset, or ``"none"``) in one request, written only if every expectation
        holds, else nothing: ``UnexpectedOffset`` says what moved. They must all go to one
        partition. The request keeps one idempotency key through its retries, so a retry of a
        write that landed answers ``duplicate``, never a conflict with itself. It leaves at once,
        not ordered with messages queued by ``send``: ``flush()`` first when that matters."""
        if self._closed or self._session is None:
            raise RuntimeError("the producer is not open (use 'async with Producer(...)')")
        encoded = [encode_message(m.get("value", _MISSING), value_b64=m.get("value_b64"),
                                  key=m.get("key"), headers=m.get("headers"),
                                  partition=m.get("partition"),
                                  expected_offset=m.get("expected_offset"))
                   for m in messages]
        expected = b"" if expected_last_offset is None else (
            b',"expected_last_offset":' + _dumps(expected_last_offset))
        document = (b'{"acks":' + _dumps(self.acks) + expected + b',"messages":['
                    + b",".join(encoded) + b"]}")
        return await self._post_with_retries(document, len(encoded), f"{uuid.uuid4().hex}-c")

    async def send_request(self, encoded: Sequence[bytes], idempotency_key: str
                           ) -> list[SendResult]:
        """Publish messages already encoded (``encode_message``) in one request under the caller's
        ``Idempotency-Key``, retried under it; their results in order. It leaves at once, not
        ordered with messages queued by ``send``. Sending the same messages under the same key
        again (a batch replayed after a crash) writes nothing twice: the gateway answers each with
        its first offset and ``duplicate``."""
        if self._closed or self._session is None:
            raise RuntimeError("the producer is not open (use 'async with Producer(...)')")
        return await self._post_with_retries(self._body_head + b",".join(encoded) + b"]}",
                                             len(encoded), idempotency_key)

    async def send_encoded(self, encoded: Sequence[bytes], key: str | None = None
                           ) -> list[SendResult]:
        """Publish messages already encoded as JSON objects of the publish API (``encode_message``
        makes them), all of key ``key`` (only their lane: the key must also be in each message);
        their results in order."""
        async with self._whole_calls():
            futures = self._queue_whole(self._lane_of(key, None), encoded)
        results: list[SendResult] = []
        for future in futures:
            results += await future
        return results

    @contextlib.asynccontextmanager
    async def _whole_calls(self) -> AsyncIterator[None]:
        """Held while a ``send_many`` or ``send_encoded`` queues its batches: the calls queue in
        the order they were made (FIFO), another call's batches never between theirs, once the
        lanes are known and the buffer has room."""
        if self._closed or self._loop is None:
            await self._until_queueable()  # raises
        async with self._queue_order:
            await self._learn_lanes()
            await self._room.wait()
            yield

    async def flush(self) -> None:
        """Send every open batch now and wait until everything queued so far is answered."""
        for lane in self._lanes:
            self._cut(lane)
            self._kick(lane)
        await self._drained.wait()

    def _enqueue(self, encoded: bytes, lane_index: int) -> asyncio.Future[SendResult]:
        assert self._loop is not None
        future: asyncio.Future[SendResult] = self._loop.create_future()
        lane = self._lanes[lane_index]
        batch = lane.open
        size = len(encoded) + 1
        if batch.encoded and batch.size_bytes + size > self._max_batch_bytes:
            self._cut(lane)
            batch = lane.open
        batch.encoded.append(encoded)
        batch.futures.append(future)
        batch.size_bytes += size
        self._buffered_bytes += size
        self._drained.clear()
        if self._buffered_bytes >= self._max_buffer_bytes:
            self._room.clear()
        if len(batch.encoded) >= self._batch_size:
            self._cut(lane)
        if not lane.busy and lane.timer is None:
            # with the other messages of this loop turn, or after the linger
            lane.timer = (self._loop.call_later(self._linger_s, self._kick, lane)
                          if self._linger_s else self._loop.call_soon(self._kick, lane))
        return future

    def _queue_whole(self, lane_index: int, encoded: Sequence[bytes]
                     ) -> list[asyncio.Future[list[SendResult]]]:
        """Queue ``encoded`` on a lane as batches of their own, behind its open batch, each with
        one future (inside ``_whole_calls``)."""
        assert self._loop is not None
        lane = self._lanes[lane_index]
        self._cut(lane)
        futures = []
        start = 0
        while start < len(encoded):
            batch = _Batch(whole=self._loop.create_future())
            for message in itertools.islice(encoded, start, start + self._batch_size):
                size = len(message) + 1
                if batch.encoded and batch.size_bytes + size > self._max_batch_bytes:
                    break
                batch.encoded.append(message)
                batch.size_bytes += size
            start += len(batch.encoded)
            lane.ready.append(self._numbered(batch))
            self._buffered_bytes += batch.size_bytes
            assert batch.whole is not None
            futures.append(batch.whole)
        if futures:
            self._drained.clear()
            if self._buffered_bytes >= self._max_buffer_bytes:
                self._room.clear()
            self._kick(lane)
        return futures

    def _lane_of(self, key: str | None, partition: int | None) -> int:
        """The lane of a message: one per key (or partition), so their order holds; keyless
        messages, which the gateway spreads anyway, go round the lanes."""
        if partition is not None:
            return partition % len(self._lanes)
        if key is not None:
            return hash(key) % len(self._lanes)
        return next(self._next_keyless)

    def _numbered(self, batch: _Batch) -> _Batch:
        """The batch with its idempotency key: ``<producer id>-<batch number>``; the gateway keys
        its message ``i`` as ``<that>:<i>``, so a retry of the batch writes nothing twice."""
        batch.idempotency_key = f"{self.producer_id}-{next(self._batch_numbers)}"
        return batch

    def _cut(self, lane: _Lane) -> None:
        """Close the lane's open batch: it leaves after those before it."""
        if lane.open.encoded:
            lane.ready.append(self._numbered(lane.open))
            lane.open = _Batch()
            self._cut_since_yield = True

    def _kick(self, lane: _Lane) -> None:
        """Start the lane's sender unless one is running."""
        if lane.timer is not None:
            lane.timer.cancel()
            lane.timer = None
        if lane.busy or not (lane.ready or lane.open.encoded):
            return
        lane.busy = True
        sender = asyncio.ensure_future(self._send_lane(lane))
        self._senders.add(sender)
        sender.add_done_callback(self._senders.discard)

    async def _send_lane(self, lane: _Lane) -> None:
        """Send the lane's batches one after another; what gathered meanwhile leaves next."""
        try:
            while True:
                if not lane.ready:
                    self._cut(lane)
                if not lane.ready:
                    return
                batch = lane.ready.popleft()
                await self._deliver(batch)
                self._release(batch)
        finally:
            lane.busy = False
            self._note_if_drained()

    def _note_if_drained(self) -> None:
        if not any(lane.busy or lane.ready or lane.open.encoded for lane in self._lanes):
            self._drained.set()

    def _release(self, batch: _Batch) -> None:
        self._buffered_bytes -= batch.size_bytes
        if self._buffered_bytes < self._max_buffer_bytes:
            self._room.set()

    async def _deliver(self, batch: _Batch) -> None:
        body = self._body_head + b",".join(batch.encoded) + b"]}"
        try:
            results = await self._post_with_retries(body, len(batch.encoded),
                                                    batch.idempotency_key)
        except Exception as exc:
            if batch.whole is not None:
                batch.whole.set_exception(exc)
            for future in batch.futures:
                if not future.done():
                    future.set_exception(exc)
            return
        if batch.whole is not None:
            batch.whole.set_result(results)
        for future, result in zip(batch.futures, results, strict=False):
            if not future.done():
                future.set_result(result)

    async def _post_with_retries(self, body: bytes, count: int,
                                 idempotency_key: str) -> list[SendResult]:
        attempt = 0
        refreshed = False
        while True:
            try:
                return await self._publish(body, count, idempotency_key)
            except ClientError as exc:
                if not refreshed and self._credentials.fresh_token_may_fix(exc):
                    refreshed = True  # expired or revoked: once more, with a fresh token
                    continue
                attempt += 1
                if not self._retry.should_retry(attempt, exc):
                    raise
                retry_after = exc.retry_after_s if isinstance(exc, ProblemError) else None
                delay = self._retry.delay_s(attempt, retry_after)
                log.warning("publish to %s failed (%s); retry %d in %.2fs", self.topic, exc,
                            attempt, delay)
                await asyncio.sleep(delay)

    async def _publish(self, body: bytes, count: int, idempotency_key: str) -> list[SendResult]:
        """One attempt: a frame over the socket, or a POST when the socket does not take it."""
        if self._socket is not None:
            answer = await self._socket.publish(body, idempotency_key)
            if answer is not None:
                return self._results(answer, count)
        return await self._post(body, count, idempotency_key)

    async def _post(self, body: bytes, count: int, idempotency_key: str) -> list[SendResult]:
        assert self._session is not None
        if self._compression is not None:
            body = compress_body(body, self._compression)
        payload = await authorized_body(
            self._credentials, self._session, "POST", self._url, data=body, refresh_once=False,
            timeout=self._timeout, ssl=self._ssl,
            headers={**self._headers, IDEMPOTENCY_HEADER: idempotency_key})
        return self._results(None if self.acks == "0" else orjson.loads(payload), count)

    def _results(self, answer: dict[str, Any] | None, count: int) -> list[SendResult]:
        """The results of an answered batch (none to read with ``acks="0"``)."""
        if self.acks == "0" or answer is None:
            return [SendResult(None, None) for _ in range(count)]
        return [SendResult(r["partition"], r["offset"], r["duplicate"])
                for r in answer["results"]]
