"""The producer's I/O: a batch body to any topic as a frame over the one publish socket, else a
POST to the topic's URL, retried under its idempotency key by one retry policy."""

from __future__ import annotations

import asyncio
import logging
import random
from dataclasses import dataclass
from ssl import SSLContext

import aiohttp
import orjson

from streamgate_client.compression import Compression, compress_body
from streamgate_client.credentials import Credentials, authorized_body
from streamgate_client.errors import ClientError, ProblemError
from streamgate_client.messages import Acks, SendResult, results_of
from streamgate_client.publish_socket import PublishSocket

log = logging.getLogger(__name__)

IDEMPOTENCY_HEADER = "Idempotency-Key"


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


@dataclass(frozen=True, slots=True)
class Connection:
    """What every topic's batches share: the session, the publish socket (None: HTTP only), the
    credentials and how requests go."""

    base_url: str
    session: aiohttp.ClientSession
    socket: PublishSocket | None
    credentials: Credentials
    ssl: SSLContext | bool
    timeout_s: float
    compression: Compression | None


class BatchSender:
    """Publishes batch bodies of one ``acks`` to any topic over one ``Connection``: a frame over
    its socket when the socket takes it, else a POST; a retriable failure is retried as it is,
    under the same idempotency key, so nothing is written twice."""

    def __init__(self, connection: Connection, acks: Acks, retry: RetryPolicy) -> None:
        self.connection = connection
        self.acks: Acks = acks
        self._retry = retry
        self._timeout = aiohttp.ClientTimeout(total=connection.timeout_s)
        self._headers = {"Content-Type": "application/json"}
        if connection.compression is not None:
            self._headers["Content-Encoding"] = connection.compression

    def topic_url(self, topic: str) -> str:
        return f"{self.connection.base_url.rstrip('/')}/v1/topics/{topic}"

    async def publish(self, topic: str, body: bytes, count: int,
                      idempotency_key: str) -> list[SendResult]:
        """The results of ``body`` (``count`` messages) published to ``topic``, retried by the
        policy (and once with a fresh token when the gateway refused the token)."""
        attempt = 0
        refreshed = False
        while True:
            try:
                return await self._publish(topic, body, count, idempotency_key)
            except ClientError as exc:
                if not refreshed and self.connection.credentials.fresh_token_may_fix(exc):
                    refreshed = True  # expired or revoked: once more, with a fresh token
                    continue
                attempt += 1
                if not self._retry.should_retry(attempt, exc):
                    raise
                retry_after = exc.retry_after_s if isinstance(exc, ProblemError) else None
                delay = self._retry.delay_s(attempt, retry_after)
                log.warning("publish to %s failed (%s); retry %d in %.2fs", topic, exc,
                            attempt, delay)
                await asyncio.sleep(delay)

    async def partition_count(self, topic: str) -> int | None:
        """The topic's partitions, or None when the caller may not describe it (a publish-only
        principal), it does not exist or the gateway does not answer."""
        connection = self.connection
        try:
            payload = await authorized_body(connection.credentials, connection.session, "GET",
                                            self.topic_url(topic), timeout=self._timeout,
                                            ssl=connection.ssl)
            count = orjson.loads(payload).get("partitions")
        except (ClientError, orjson.JSONDecodeError, AttributeError):
            return None
        return count if isinstance(count, int) else None

    async def _publish(self, topic: str, body: bytes, count: int,
                       idempotency_key: str) -> list[SendResult]:
        """One attempt: a frame over the socket, or a POST when the socket does not take it."""
        socket = self.connection.socket
        if socket is not None:
            answer = await socket.publish(topic, body, idempotency_key)
            if answer is not None:
                return results_of(None if self.acks == "0" else answer, count)
        return await self._post(topic, body, count, idempotency_key)

    async def _post(self, topic: str, body: bytes, count: int,
                    idempotency_key: str) -> list[SendResult]:
        connection = self.connection
        if connection.compression is not None:
            body = compress_body(body, connection.compression)
        payload = await authorized_body(
            connection.credentials, connection.session, "POST",
            f"{self.topic_url(topic)}/messages", data=body, refresh_once=False,
            timeout=self._timeout, ssl=connection.ssl,
            headers={**self._headers, IDEMPOTENCY_HEADER: idempotency_key})
        return results_of(None if self.acks == "0" else orjson.loads(payload), count)
