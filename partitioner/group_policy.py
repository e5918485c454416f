"""Each group's delivery policy (ack timeout, max deliveries) in etcd, so partition owners can act
for groups whose members are all gone.

Key ``<prefix>grouppolicies/<topic>/<group>`` holds
``{"ack_timeout_ms", "max_deliveries", "updated_at_ms"}``. The latest subscriber or puller of a
group writes it (last writer wins). Writing is off the request path: ``note`` is synchronous and a
background task flushes changed policies with backoff, so an etcd outage never slows or fails a
subscribe or a pull; what was noted is written once etcd answers again. Owners read a topic's
policies with ``for_topic`` (one prefix read, cached for ``cache_ttl_s``).
"""

from __future__ import annotations

import asyncio
import logging
import time
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from types import TracebackType

import orjson

from partitioner.backoff import Backoff
from partitioner.errors import CoordinationUnavailable
from partitioner.etcd.connection import EtcdConnection
from partitioner.etcd.values import DEFAULT_PREFIX
from partitioner.tasks import cancel_until_done

log = logging.getLogger(__name__)

MAX_REMEMBERED = 100_000


@dataclass(frozen=True, slots=True)
class RetryBackoff:
    """How long a failed delivery waits before the next: ``initial_ms`` after the first, times
    ``multiplier`` after each further one, at most ``max_ms``, with jitter (half to all of it);
    ``initial_ms`` 0 is off (redelivered as soon as due)."""

    initial_ms: int = 0
    multiplier: float = 2.0
    max_ms: int = 300_000

    def delay_ms(self, delivery_count: int, offset: str) -> int:
        """The wait after the ``delivery_count``-th delivery of ``offset`` failed. The jitter is
        a hash of both, so every reader and every look at the same entry agrees on it."""
        if not self.initial_ms:
            return 0
        exponent = max(0, delivery_count - 1)
        # capped before the power: a large count must not overflow a float
        base = min(float(self.max_ms),
                   self.initial_ms * self.multiplier ** min(exponent, MAX_EXPONENT))
        spread = zlib.crc32(f"{offset}/{delivery_count}".encode()) / 0xFFFFFFFF
        return int(base * (0.5 + 0.5 * spread))

    def to_dict(self) -> dict[str, float]:
        """The JSON form kept in the group's policy."""
        return {"initial_ms": self.initial_ms, "multiplier": self.multiplier,
                "max_ms": self.max_ms}


NO_BACKOFF = RetryBackoff()
MAX_EXPONENT = 64


@dataclass(frozen=True, slots=True)
class GroupPolicy:
    """How long a delivery may stay un-acked, how many deliveries an entry gets before the DLQ,
    and how failed deliveries back off."""

    ack_timeout_ms: int
    max_deliveries: int
    retry_backoff: RetryBackoff = NO_BACKOFF

    def encode(self) -> bytes:
        """The stored JSON document."""
        return orjson.dumps({"ack_timeout_ms": self.ack_timeout_ms,
                             "max_deliveries": self.max_deliveries,
                             "retry_backoff": self.retry_backoff.to_dict(),
                             "updated_at_ms": int(time.time() * 1000)})

    @classmethod
    def decode(cls, raw: bytes) -> GroupPolicy | None:
        """The policy in a stored document; None when it is not one (logged, never fatal)."""
        try:
            doc = orjson.loads(raw)
            backoff = doc.get("retry_backoff") or {}
            policy = cls(int(doc["ack_timeout_ms"]), int(doc["max_deliveries"]),
                         RetryBackoff(int(backoff.get("initial_ms", 0)),
                                      float(backoff.get("multiplier", 2.0)),
                                      int(backoff.get("max_ms", NO_BACKOFF.max_ms))))
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
            log.warning("ignoring a malformed group policy: %r", raw[:200])
            return None
        return policy if policy.ack_timeout_ms > 0 and policy.max_deliveries > 0 else None


class GroupPolicyKeys:
    """The etcd keys of group policies under one prefix."""

    def __init__(self, prefix: str = DEFAULT_PREFIX) -> None:
        self.root = f"{prefix.rstrip('/')}/grouppolicies/".encode()

    def topic(self, topic: str) -> bytes:
        """The prefix holding every policy of ``topic``."""
        return self.root + f"{topic}/".encode()

    def group(self, topic: str, group: str) -> bytes:
        """The key of one group's policy."""
        return self.topic(topic) + group.encode()


class GroupPolicies:
    """Writes noted policies in the background and reads them per topic (async context manager)."""

    def __init__(self, conn: EtcdConnection, prefix: str = DEFAULT_PREFIX,
                 cache_ttl_s: float = 2.0) -> None:
        self._conn = conn
        self._keys = GroupPolicyKeys(prefix)
        self._cache_ttl_s = cache_ttl_s
        self._written: dict[tuple[str, str], GroupPolicy] = {}
        self._unwritten: dict[tuple[str, str], GroupPolicy] = {}
        self._wake = asyncio.Event()
        self._cache: dict[str, tuple[float, dict[str, GroupPolicy]]] = {}
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> GroupPolicies:
        self._task = asyncio.create_task(self._flush_forever(), name="group-policy-writer")
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Stop the writer; policies not yet written are dropped (the next subscriber notes them
        again)."""
        task, self._task = self._task, None
        if task is not None:
            await cancel_until_done([task])

    @property
    def unwritten(self) -> int:
        """Policies noted but not yet in etcd."""
        return len(self._unwritten)

    def note(self, topic: str, group: str, policy: GroupPolicy) -> None:
        """Record that ``group`` on ``topic`` is served with ``policy``; written soon unless already
        stored."""
        key = (topic, group)
        if self._written.get(key) == policy and key not in self._unwritten:
            return
        self._unwritten[key] = policy
        self._wake.set()

    async def of(self, topic: str, group: str) -> GroupPolicy | None:
        """``group``'s policy: as this process noted it last, else as stored (None: unknown);
        raises CoordinationUnavailable when it must read etcd and etcd does not answer."""
        key = (topic, group)
        noted = self._unwritten.get(key) or self._written.get(key)
        return noted if noted is not None else (await self.for_topic(topic)).get(group)

    async def for_topic(self, topic: str) -> Mapping[str, GroupPolicy]:
        """Every group's policy on ``topic``; raises CoordinationUnavailable when etcd does not
        answer."""
        now = time.monotonic()
        cached = self._cache.get(topic)
        if cached is not None and cached[0] > now:
            return cached[1]
        prefix = self._keys.topic(topic)
        snapshot = await self._conn.get_prefix(prefix)
        policies = {stored.key[len(prefix):].decode(errors="replace"): policy
                    for stored in snapshot.values
                    if (policy := GroupPolicy.decode(stored.value)) is not None}
        self._cache[topic] = (now + self._cache_ttl_s, policies)
        return policies

    async def forget_topic(self, topic: str) -> None:
        """Delete every policy of a deleted topic."""
        await self._conn.delete_prefix(self._keys.topic(topic))
        self._cache.pop(topic, None)
        for key in [k for k in self._written if k[0] == topic]:
            del self._written[key]
        for key in [k for k in self._unwritten if k[0] == topic]:
            del self._unwritten[key]

    async def flush(self) -> None:
        """Write every noted policy now; CoordinationUnavailable leaves the rest for the next
        attempt."""
        while self._unwritten:
            key, policy = next(iter(self._unwritten.items()))
            await self._conn.put(self._keys.group(*key), policy.encode())
            if self._unwritten.get(key) == policy:
                del self._unwritten[key]
            if len(self._written) >= MAX_REMEMBERED:
                self._written.clear()
            self._written[key] = policy
            self._cache.pop(key[0], None)

    async def _flush_forever(self) -> None:
        backoff = Backoff(max_s=2.0)
        while True:
            await self._wake.wait()
            self._wake.clear()
            try:
                await self.flush()
                backoff.reset()
            except CoordinationUnavailable as exc:
                log.warning("group policies not written yet (%d waiting): %s", len(self._unwritten),
                            exc)
                self._wake.set()
                await backoff.sleep()


__all__ = ["GroupPolicies", "GroupPolicy", "GroupPolicyKeys"]
