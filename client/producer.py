"""The producer: batches messages into one POST per batch, with client-side idempotency keys and
retries.

Every message gets an idempotency key ``<producer id>-<sequence>`` when it is handed to ``send``; a
batch is retried with exactly the same keys, so a retry after a timeout, a dropped connection or a
503 can never write a message twice (the gateway answers the retry with the first offset and
``duplicate: true``). Batches are sent one at a time, in order, which keeps per-key order across
retries.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import random
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import aiohttp
import orjson

from client.compression import Compression, compress_body
from client.credentials import auth_headers
from client.errors import ClientError, ProblemError, request_body

log = logging.getLogger(__name__)

Acks = Literal["0", "1", "all"]
_MISSING: Any = object()


@dataclass(frozen=True, slots=True)
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
class _Pending:
    encoded: bytes
    future: asyncio.Future[SendResult]


@dataclass(slots=True)
class _Batch:
    items: list[_Pending] = field(default_factory=list)
    size_bytes: int = 0


def encode_message(value: Any = _MISSING, *, value_b64: bytes | str | None = None,
                   key: str | None = None, headers: Mapping[str, str] | None = None,
                   partition: int | None = None, idempotency_key: str | None = None) -> bytes:
    """One message of a publish body as JSON; ``bytes`` values go as ``value_b64``."""
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
                       ("partition", partition), ("idempotency_key", idempotency_key)):
        if item is not None:
            doc[name] = item
    return orjson.dumps(doc)


class Producer:
    """Publishes to one topic. Use as
    ``async with Producer(url, topic) as p: await p.send(value=...)``.

    ``send`` waits for the batch its message went out in (up to ``batch_size`` messages or
    ``linger_ms``); call it from many tasks (or use ``send_many``) to fill batches. ``acks``:
    ``"0"`` (queued in the gateway, no offsets returned), ``"1"`` (written on the primary) or
    ``"all"`` (confirmed by the replicas). ``compression`` (``"gzip"`` or ``"zstd"``) sends each
    batch body compressed (``Content-Encoding``): fewer bytes on the wire for some client CPU;
    ``max_batch_bytes`` still counts the uncompressed body.
    """

    def __init__(self, base_url: str, topic: str, *, acks: Acks = "1", batch_size: int = 500,
                 max_batch_bytes: int = 4 * 1024 * 1024, linger_ms: float = 5, max_retries: int = 5,
                 timeout_s: float = 10, retry: RetryPolicy | None = None,
                 api_key: str | None = None, token: str | None = None,
                 session: aiohttp.ClientSession | None = None,
                 compression: Compression | None = None) -> None:
        if acks not in ("0", "1", "all"):
            raise ValueError("acks must be '0', '1' or 'all'")
        self.topic = topic
        self.acks: Acks = acks
        self.producer_id = uuid.uuid4().hex
        self._url = f"{base_url.rstrip('/')}/v1/topics/{topic}/messages"
        self._headers = {**auth_headers(api_key, token), "Content-Type": "application/json"}
        self._compression = compression
        if compression is not None:
            compress_body(b"", compression)  # an unknown coding fails here, not at the first send
            self._headers["Content-Encoding"] = compression
        self._batch_size = max(1, batch_size)
        self._max_batch_bytes = max_batch_bytes
        self._linger_s = linger_ms / 1000
        self._retry = retry or RetryPolicy(max_retries=max_retries)
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._session = session
        self._owns_session = session is None
        self._sequence = 0
        self._open = _Batch()
        self._linger: asyncio.TimerHandle | None = None
        self._ready: asyncio.Queue[_Batch] = asyncio.Queue()
        self._sender: asyncio.Task[None] | None = None
        self._closed = False

    async def __aenter__(self) -> Producer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def start(self) -> None:
        """Open the HTTP session (unless one was given) and start the sender task."""
        if self._sender is not None:
            return
        if self._session is None:
            self._session = aiohttp.ClientSession()
        self._sender = asyncio.create_task(self._send_batches(),
                                           name=f"producer-{self.producer_id[:8]}")

    async def aclose(self) -> None:
        """Send what is buffered, stop the sender and close the session it opened; idempotent."""
        if self._closed:
            return
        with contextlib.suppress(ClientError):
            await self.flush()
        self._closed = True
        sender, self._sender = self._sender, None
        if sender is not None:
            sender.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sender
        if self._owns_session and self._session is not None:
            await self._session.close()

    def next_idempotency_key(self) -> str:
        """The key of the next message: ``<producer id>-<sequence>``, unique per producer
        instance."""
        self._sequence += 1
        return f"{self.producer_id}-{self._sequence}"

    async def send(self, value: Any = _MISSING, *, value_b64: bytes | str | None = None,
                   key: str | None = None, headers: Mapping[str, str] | None = None,
                   partition: int | None = None) -> SendResult:
        """Publish one message and wait for its result; raises ``ProblemError`` or
        ``ConnectionFailed``."""
        return await self._enqueue(value, value_b64=value_b64, key=key, headers=headers,
                                   partition=partition)

    async def send_many(self, messages: Iterable[Mapping[str, Any]]) -> list[SendResult]:
        """Publish messages given as dicts of ``send`` arguments; results in input order."""
        futures = [self._enqueue(m.get("value", _MISSING), value_b64=m.get("value_b64"),
                                 key=m.get("key"), headers=m.get("headers"),
                                 partition=m.get("partition")) for m in messages]
        return list(await asyncio.gather(*futures))

    async def flush(self) -> None:
        """Send the open batch now and wait until every batch handed over so far has been
        answered."""
        self._cut()
        await self._ready.join()

    def _enqueue(self, value: Any, **options: Any) -> asyncio.Future[SendResult]:
        if self._closed or self._sender is None:
            raise RuntimeError("the producer is not started (use 'async with Producer(...)')")
        encoded = encode_message(value, idempotency_key=self.next_idempotency_key(), **options)
        future: asyncio.Future[SendResult] = asyncio.get_running_loop().create_future()
        if self._open.size_bytes + len(encoded) > self._max_batch_bytes:
            self._cut()
        self._open.items.append(_Pending(encoded, future))
        self._open.size_bytes += len(encoded) + 1
        if len(self._open.items) >= self._batch_size:
            self._cut()
        elif self._linger is None:
            self._linger = asyncio.get_running_loop().call_later(self._linger_s, self._cut)
        return future

    def _cut(self) -> None:
        """Close the open batch and hand it to the sender."""
        if self._linger is not None:
            self._linger.cancel()
            self._linger = None
        if self._open.items:
            batch, self._open = self._open, _Batch()
            self._ready.put_nowait(batch)

    async def _send_batches(self) -> None:
        while True:
            batch = await self._ready.get()
            try:
                await self._deliver(batch)
            finally:
                self._ready.task_done()

    async def _deliver(self, batch: _Batch) -> None:
        body = b'{"acks":"' + self.acks.encode() + b'","messages":[' + b",".join(
            item.encoded for item in batch.items) + b"]}"
        try:
            results = await self._post_with_retries(body, len(batch.items))
        except Exception as exc:
            for item in batch.items:
                if not item.future.done():
                    item.future.set_exception(exc)
            return
        for item, result in zip(batch.items, results, strict=True):
            if not item.future.done():
                item.future.set_result(result)

    async def _post_with_retries(self, body: bytes, count: int) -> list[SendResult]:
        if self._compression is not None:
            body = compress_body(body, self._compression)
        attempt = 0
        while True:
            attempt += 1
            try:
                return await self._post(body, count)
            except ClientError as exc:
                if not self._retry.should_retry(attempt, exc):
                    raise
                retry_after = exc.retry_after_s if isinstance(exc, ProblemError) else None
                delay = self._retry.delay_s(attempt, retry_after)
                log.warning("publish to %s failed (%s); retry %d in %.2fs", self.topic, exc,
                            attempt, delay)
                await asyncio.sleep(delay)

    async def _post(self, body: bytes, count: int) -> list[SendResult]:
        assert self._session is not None
        payload = await request_body(self._session, "POST", self._url, data=body,
                                     timeout=self._timeout, headers=self._headers)
        document = orjson.loads(payload)
        if self.acks == "0":
            return [SendResult(None, None)] * count
        return [SendResult(r["partition"], r["offset"], r["duplicate"])
                for r in document["results"]]
