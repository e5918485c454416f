"""JSON Web Key Sets: parsing one (from the auth config's file or an identity provider's URL), and
``RemoteJwks``, which keeps a URL's key set fresh: fetched at start, every ``refresh_s``, and at
once (rate-limited, one fetch in flight) when a token names a key id it does not hold."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import logging
import ssl
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import jwt
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gateway.auth.errors import AuthConfigError

log = logging.getLogger(__name__)

FETCH_TIMEOUT_S = 5.0
# how long a token naming an unknown key id waits for the refresh it asked for
UNKNOWN_KID_WAIT_S = 2.0
# a failed fetch is retried sooner than refresh_s (the key set may be empty), but never in a loop
RETRY_FLOOR_S = 1.0
# a key set is a few kilobytes; a bigger answer is not one
MAX_JWKS_BYTES = 1 << 20
LOOPBACK_NAMES = frozenset({"localhost", "localhost."})


@dataclass(frozen=True, slots=True)
class JwksUrl:
    """Where the identity provider publishes its keys and how often to read them."""

    url: str
    ca_file: Path | None = None  # https: the CA bundle to verify with (default: the system's)
    refresh_s: float = 300.0
    min_refresh_s: float = 30.0  # the least time between two fetches


def jwks_keys(document: Mapping[str, Any]) -> dict[str, jwt.PyJWK]:
    """The public keys of a JWKS document by key id; AuthConfigError for a symmetric or bad key."""
    raw = document.get("keys")
    if not isinstance(raw, list):
        raise AuthConfigError("jwks: expected {\"keys\": [...]}")
    keys: dict[str, jwt.PyJWK] = {}
    for index, item in enumerate(raw):
        try:
            key = jwt.PyJWK(item)
        except (jwt.PyJWKError, jwt.InvalidKeyError, TypeError, ValueError) as exc:
            raise AuthConfigError(f"jwks key {index}: {exc}") from exc
        if key.key_type == "oct":
            raise AuthConfigError(f"jwks key {index}: symmetric keys do not belong in a JWKS (use "
                                  "the HMAC secret)")
        keys[key.key_id or f"#{index}"] = key
    return keys


def checked_jwks_url(url: str) -> str:
    """``url`` when it is https, or http to a loopback host; AuthConfigError otherwise."""
    parts = urlsplit(url)
    if parts.scheme == "https" and parts.hostname:
        return url
    if parts.scheme == "http" and parts.hostname and _is_loopback(parts.hostname):
        return url
    raise AuthConfigError(f"jwt.jwks_url {url!r}: expected an https:// URL (http:// only to a "
                          "loopback host)")


def _is_loopback(host: str) -> bool:
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class RemoteJwks:
    """The key set published at a URL, kept fresh while entered (an async context manager).

    A failed fetch keeps the last good key set; a key that vanished from the document stops
    verifying once the fetch that dropped it lands.
    """

    def __init__(self, source: JwksUrl) -> None:
        self.source = source
        self.keys: Mapping[str, jwt.PyJWK] = {}
        self.fetched = False  # a key set has been read at least once
        self.failures = 0
        self.last_error: str | None = None
        self._ssl = _ssl_context(source)
        self._session: aiohttp.ClientSession | None = None
        self._in_flight: asyncio.Task[None] | None = None
        self._last_start = -float("inf")
        self._loop_task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> RemoteJwks:
        self._session = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=FETCH_TIMEOUT_S),
            connector=aiohttp.TCPConnector(ssl=self._ssl if self._ssl is not None else True))
        await self.refresh()
        self._loop_task = asyncio.create_task(self._refresh_periodically())
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        traceback: TracebackType | None) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Stop refreshing and close the HTTP session (idempotent)."""
        for task in (self._loop_task, self._in_flight):
            if task is not None and not task.done():
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        self._loop_task = self._in_flight = None
        if self._session is not None:
            await self._session.close()
            self._session = None

    def refresh_soon(self) -> asyncio.Task[None] | None:
        """The fetch to wait for: the one in flight, or a new one unless the last began less than
        ``min_refresh_s`` ago (None then, and when not entered)."""
        if self._in_flight is not None:
            return self._in_flight
        now = time.monotonic()
        if self._session is None or now - self._last_start < self.source.min_refresh_s:
            return None
        self._last_start = now
        self._in_flight = asyncio.create_task(self._fetch(self._session))
        self._in_flight.add_done_callback(self._landed)
        return self._in_flight

    async def refresh(self) -> None:
        """Fetch now (or join the fetch in flight) unless rate-limited."""
        task = self.refresh_soon()
        if task is not None:
            await asyncio.shield(task)

    async def refresh_for_unknown_kid(self) -> None:
        """A token named a key id not in the set: wait (bounded) for one refresh."""
        task = self.refresh_soon()
        if task is not None:
            # past the wait the token is refused; the fetch still lands for the next one
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(task), UNKNOWN_KID_WAIT_S)

    async def check_ready(self) -> None:
        """A readiness check: RuntimeError until a key set has been read."""
        if not self.fetched:
            raise RuntimeError(self.missing_reason())
        if self._loop_task is not None and self._loop_task.done():
            raise RuntimeError(f"JWKS refreshes from {self.source.url} stopped")

    def missing_reason(self) -> str:
        """Why there is no key set (before the first successful fetch)."""
        return f"no JWKS read from {self.source.url} yet: {self.last_error or 'fetching'}"

    def collector(self) -> Collector:
        """Prometheus metrics of the refreshes, read at each scrape."""
        return _JwksCollector(self)

    def _landed(self, task: asyncio.Task[None]) -> None:
        if self._in_flight is task:
            self._in_flight = None

    async def _refresh_periodically(self) -> None:
        source = self.source
        retry_s = min(source.refresh_s, max(source.min_refresh_s, RETRY_FLOOR_S))
        while True:
            await asyncio.sleep(retry_s if self.last_error is not None else source.refresh_s)
            await self.refresh()

    async def _fetch(self, session: aiohttp.ClientSession) -> None:
        try:
            keys = jwks_keys(await _download(session, self.source.url))
        except Exception as exc:  # whatever went wrong, the last good key set still serves
            self.failures += 1
            self.last_error = getattr(exc, "message", None) or str(exc) or type(exc).__name__
            log.warning("JWKS refresh from %s failed (%s); keeping the %d keys read before",
                        self.source.url, self.last_error, len(self.keys))
            return
        if keys.keys() != self.keys.keys():
            log.info("JWKS from %s: key ids %s (were %s)", self.source.url, sorted(keys),
                     sorted(self.keys))
        self.keys, self.fetched, self.last_error = keys, True, None


async def _download(session: aiohttp.ClientSession, url: str) -> dict[str, Any]:
    async with session.get(url, headers={"Accept": "application/json"},
                           allow_redirects=False) as response:
        if response.status != 200:
            raise ValueError(f"HTTP {response.status}")
        body = bytearray()
        async for chunk in response.content.iter_chunked(64 * 1024):
            body += chunk
            if len(body) > MAX_JWKS_BYTES:
                raise ValueError(f"the document is larger than {MAX_JWKS_BYTES} bytes")
    document = json.loads(body)
    if not isinstance(document, dict):
        raise ValueError("expected a JSON object")
    return document


def _ssl_context(source: JwksUrl) -> ssl.SSLContext | None:
    if source.ca_file is None:
        return None
    try:
        return ssl.create_default_context(cafile=str(source.ca_file))
    except (OSError, ssl.SSLError) as exc:
        raise AuthConfigError(f"jwt.jwks_ca_file {source.ca_file}: {exc}") from exc


class _JwksCollector(Collector):
    def __init__(self, jwks: RemoteJwks) -> None:
        self._jwks = jwks

    def collect(self) -> Iterator[Metric]:
        failures = CounterMetricFamily("streamgate_jwks_refresh_failures",
                                       "JWKS fetches that failed (the last good key set is kept)",
                                       value=self._jwks.failures)
        keys = GaugeMetricFamily("streamgate_jwks_keys", "Keys in the JWKS read from the URL",
                                 value=len(self._jwks.keys))
        yield from (failures, keys)
