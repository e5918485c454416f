"""The producer: one session and one publish socket for any topic, each topic's messages batched
on its own lanes (``lanes``), batches sent with client-side idempotency keys and retries
(``batch_sender``)."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Iterable, Mapping, Sequence
from ssl import SSLContext
from typing import Any, Literal

import aiohttp
import orjson

from streamgate_client.batch_sender import BatchSender, Connection, RetryPolicy
from streamgate_client.compression import Compression, compress_body
from streamgate_client.credentials import Credentials, TokenProvider
from streamgate_client.errors import ClientError
from streamgate_client.lanes import Batching, Buffer, TopicLanes
from streamgate_client.messages import (
    MISSING,
    Acks,
    SendResult,
    encode_mapping,
    encode_message,
)
from streamgate_client.publish_socket import PublishSocket

__all__ = ["Acks", "Producer", "RetryPolicy", "SendResult", "Transport", "encode_message"]

Transport = Literal["auto", "websocket", "http"]


class Producer:
    """Publishes to any topic. Use as ``async with Producer(url) as producer:`` and name the topic
    of each call (``topic="orders"``), or bind a default with ``Producer(url, "orders")``; then

    - ``future = await producer.send(...)``: returns once the message is queued (waiting only
      while ``max_buffer_bytes`` are queued already); await the future for its result later, or
      ``await producer.flush()`` and read ``future.result()``;
    - ``await producer.send_many([...])``: many messages, their results in input order, without
      a future per message (the fastest way);
    - ``await producer.send_and_wait(value=..., key=...)``: one message's ``SendResult``.

    Each topic has its own ``max_in_flight`` lanes (a key's messages in one, so each (topic, key)
    keeps its send order; a topic's failure fails only its own messages); ``max_buffer_bytes``
    bounds what is queued or in flight across all topics together.

    Adaptive batching: a message queued while its lane has nothing in flight leaves at once (with
    the others queued in the same event-loop turn); while a batch is in flight the next one gathers
    messages, up to ``batch_size`` messages or ``max_batch_bytes``. ``linger_ms`` > 0 makes an idle
    lane wait that long first, for fewer, larger requests.

    ``acks``: ``"0"`` (queued in the gateway, no offsets returned), ``"1"`` (written on the
    primary) or ``"all"`` (confirmed by the replicas). ``compression`` (``"gzip"`` or ``"zstd"``)
    sends each batch body compressed; ``max_batch_bytes`` still counts the uncompressed body. A
    batch that fails for good (after ``max_retries``) fails its messages; later messages go on.

    ``transport``: ``"auto"`` sends batches as frames over one WebSocket (``/v1/publish``, every
    topic's on the one connection, opened at the first publish, reopened after a close; unanswered
    frames are resent under their idempotency keys), or over HTTP (each topic's URL) for the
    producer's life when the gateway does not offer it; ``"websocket"`` raises
    ``PublishNotOffered`` then; ``"http"`` always posts. A frame larger than the gateway takes
    goes over HTTP. With ``compression`` the socket offers permessage-deflate (the gateway may
    decline it) and HTTP bodies use that coding.

    ``token`` is a JWT or a provider of them (``Callable[[], str | Awaitable[str]]``): its token
    is cached, asked for again shortly before its ``exp`` and when the gateway refuses it (a 401,
    a publish socket closed with 4401), and the refused request is retried once with the fresh
    one. ``ssl``: an ``SSLContext`` for HTTPS and WSS (a private CA, a client certificate for
    mutual TLS), or False to skip verification; with a given ``session`` it overrides that
    session's setting.
    """

    def __init__(self, base_url: str, topic: str | None = None, *, acks: Acks = "1",
                 batch_size: int = 1000, max_batch_bytes: int = 4 * 1024 * 1024,
                 linger_ms: float = 0, max_in_flight: int = 4,
                 max_buffer_bytes: int = 32 * 1024 * 1024, max_retries: int = 5,
                 timeout_s: float = 10, retry: RetryPolicy | None = None,
                 api_key: str | None = None, token: str | TokenProvider | None = None,
                 session: aiohttp.ClientSession | None = None,
                 compression: Compression | None = None, transport: Transport = "auto",
                 ssl: SSLContext | bool | None = None) -> None:
        if acks not in ("0", "1", "all"):
            raise ValueError("acks must be '0', '1' or 'all'")
        if transport not in ("auto", "websocket", "http"):
            raise ValueError("transport must be 'auto', 'websocket' or 'http'")
        if compression is not None:
            compress_body(b"", compression)  # an unknown coding fails here, not at the first send
        self.topic = topic  # the default of every call that names none
        self.acks: Acks = acks
        self.producer_id = uuid.uuid4().hex
        self._base_url = base_url
        self._credentials = Credentials(api_key, token)
        self._ssl: SSLContext | bool = True if ssl is None else ssl
        self._transport = transport
        self._compression = compression
        self._timeout_s = timeout_s
        self._retry = retry or RetryPolicy(max_retries=max_retries)
        self._batching = Batching(max(1, batch_size), max_batch_bytes, linger_ms / 1000,
                                  max(1, max_in_flight))
        self._max_buffer_bytes = max(max_buffer_bytes, max_batch_bytes)
        self._session = session
        self._owns_session = session is None
        self._socket: PublishSocket | None = None
        self._buffer: Buffer | None = None
        self._topics: dict[str | None, TopicLanes] = {}  # never a None key: a miss
        self._closed = False

    async def __aenter__(self) -> Producer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def start(self) -> None:
        """Open the HTTP session (unless one was given); the socket opens at the first publish."""
        if self._buffer is not None:
            return
        if self._session is None:
            self._session = aiohttp.ClientSession()
        if self._transport != "http":
            self._socket = PublishSocket(self._session, self._base_url, self._credentials,
                                         required=self._transport == "websocket",
                                         timeout_s=self._timeout_s,
                                         deflate=self._compression is not None, ssl=self._ssl)
        connection = Connection(self._base_url, self._session, self._socket, self._credentials,
                                self._ssl, self._timeout_s, self._compression)
        self._buffer = Buffer(self._batching, BatchSender(connection, self.acks, self._retry),
                              self._max_buffer_bytes, self.producer_id)

    async def aclose(self) -> None:
        """Send what is queued, then close the socket and the session it opened; idempotent."""
        if self._closed:
            return
        with contextlib.suppress(ClientError):
            await self.flush()
        self._closed = True
        senders = list(self._buffer.senders) if self._buffer is not None else []
        for sender in senders:
            sender.cancel()
        for sender in senders:
            with contextlib.suppress(asyncio.CancelledError):
                await sender
        if self._socket is not None:
            await self._socket.aclose()
        if self._owns_session and self._session is not None:
            await self._session.close()

    def _lanes_of(self, topic: str | None) -> TopicLanes:
        """The lanes of ``topic`` (else the default topic), made at its first message."""
        name = self.topic if topic is None else topic
        lanes = self._topics.get(name)
        if lanes is not None and not self._closed:
            return lanes
        if name is None:
            raise ValueError("no topic: pass topic= to the call, or a default topic to "
                             "Producer(base_url, topic)")
        if self._closed or self._buffer is None:
            raise RuntimeError("the producer is not started (use 'async with Producer(...)')")
        lanes = self._topics[name] = TopicLanes(name, self._buffer)
        return lanes

    async def send(self, value: Any = MISSING, *, value_b64: bytes | str | None = None,
                   key: str | None = None, headers: Mapping[str, str] | None = None,
                   partition: int | None = None, ttl_ms: int | None = None,
                   topic: str | None = None) -> asyncio.Future[SendResult]:
        """Queue one message to ``topic`` (else the default topic); returns the future of its
        ``SendResult`` (which raises ``ProblemError`` or ``ConnectionFailed``). Waits only while
        the buffer is full. ``ttl_ms``: not delivered once that long has passed since it was
        written."""
        lanes = self._topics.get(self.topic if topic is None else topic)
        if lanes is None or self._closed:
            lanes = self._lanes_of(topic)
        if not (lanes.known and lanes.buffer.room.is_set()):
            await lanes.until_queueable()
        future = lanes.enqueue(encode_message(value, value_b64=value_b64, key=key,
                                              headers=headers, partition=partition,
                                              ttl_ms=ttl_ms),
                               lanes.lane_of(key, partition))
        if lanes.cut_since_yield:
            # a batch is ready: let its lane's sender (and answers that came in) run, even when
            # the caller's loop never waits
            lanes.cut_since_yield = False
            await asyncio.sleep(0)
        return future

    async def send_and_wait(self, value: Any = MISSING, *, value_b64: bytes | str | None = None,
                            key: str | None = None, headers: Mapping[str, str] | None = None,
                            partition: int | None = None, ttl_ms: int | None = None,
                            topic: str | None = None) -> SendResult:
        """Publish one message to ``topic`` (else the default topic) and wait for its result;
        raises ``ProblemError`` or ``ConnectionFailed``. When its lane is idle the request leaves
        from the caller's task, at once."""
        lanes = self._lanes_of(topic)
        lane = lanes.idle_lane(key, partition)
        if lane is not None:
            return await lanes.send_alone(lane, encode_message(
                value, value_b64=value_b64, key=key, headers=headers, partition=partition,
                ttl_ms=ttl_ms))
        return await (await self.send(value, value_b64=value_b64, key=key, headers=headers,
                                      partition=partition, ttl_ms=ttl_ms, topic=topic))

    async def send_many(self, messages: Iterable[Mapping[str, Any]], *,
                        topic: str | None = None) -> list[SendResult]:
        """Publish messages given as dicts of ``send`` arguments to ``topic`` (else the default
        topic); their results in input order. Each batch has one future, not each message: the
        fastest way to publish many."""
        lanes = self._lanes_of(topic)
        async with lanes.whole_calls():
            by_lane: dict[int, tuple[list[bytes], list[int]]] = {}
            count = 0
            for message in messages:
                lane = lanes.lane_of(message.get("key"), message.get("partition"))
                encoded, positions = by_lane.setdefault(lane, ([], []))
                encoded.append(encode_mapping(message))
                positions.append(count)
                count += 1
            answers = [(positions, lanes.queue_whole(lane, encoded))
                       for lane, (encoded, positions) in by_lane.items()]
        results: list[Any] = [None] * count
        for positions, futures in answers:
            lane_results = [result for future in futures for result in await future]
            for position, result in zip(positions, lane_results, strict=True):
                results[position] = result
        return results

    async def send_conditional(self, messages: Iterable[Mapping[str, Any]], *,
                               expected_last_offset: str | None = None,
                               topic: str | None = None) -> list[SendResult]:
        """Publish messages (dicts of ``send`` arguments, each may add ``expected_offset``: its
        key's newest offset, or ``"none"``) to ``topic`` (else the default topic) in one request,
        written only if every expectation holds, else nothing: ``UnexpectedOffset`` says what
        moved. They must all go to one partition. The request keeps one idempotency key through
        its retries, so a retry of a write that landed answers ``duplicate``, never a conflict
        with itself. It leaves at once, not ordered with messages queued by ``send``:
        ``flush()`` first when that matters."""
        lanes = self._lanes_of(topic)
        encoded = [encode_mapping(m, conditional=True) for m in messages]
        expected = b"" if expected_last_offset is None else (
            b',"expected_last_offset":' + orjson.dumps(expected_last_offset))
        document = (b'{"acks":' + orjson.dumps(self.acks) + expected + b',"messages":['
                    + b",".join(encoded) + b"]}")
        return await lanes.buffer.sender.publish(lanes.topic, document, len(encoded),
                                                 f"{uuid.uuid4().hex}-c")

    async def send_request(self, encoded: Sequence[bytes], idempotency_key: str, *,
                           topic: str | None = None) -> list[SendResult]:
        """Publish messages already encoded (``encode_message``) to ``topic`` (else the default
        topic) in one request under the caller's ``Idempotency-Key``, retried under it; their
        results in order. It leaves at once, not ordered with messages queued by ``send``.
        Sending the same messages under the same key again (a batch replayed after a crash)
        writes nothing twice: the gateway answers each with its first offset and
        ``duplicate``."""
        lanes = self._lanes_of(topic)
        body = lanes.buffer.body_head + b",".join(encoded) + b"]}"
        return await lanes.buffer.sender.publish(lanes.topic, body, len(encoded),
                                                 idempotency_key)

    async def send_encoded(self, encoded: Sequence[bytes], key: str | None = None, *,
                           topic: str | None = None) -> list[SendResult]:
        """Publish messages already encoded as JSON objects of the publish API (``encode_message``
        makes them) to ``topic`` (else the default topic), all of key ``key`` (only their lane:
        the key must also be in each message); their results in order."""
        lanes = self._lanes_of(topic)
        async with lanes.whole_calls():
            futures = lanes.queue_whole(lanes.lane_of(key, None), encoded)
        results: list[SendResult] = []
        for future in futures:
            results += await future
        return results

    async def flush(self) -> None:
        """Send every topic's open batches now and wait until everything queued so far is
        answered."""
        topics = list(self._topics.values())
        for lanes in topics:
            lanes.send_open_batches()
        for lanes in topics:
            await lanes.drained.wait()
