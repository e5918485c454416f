"""The forced header filter each consumer group is bound to, in etcd (``<prefix>groupbindings/
<topic>/<group>``): the first member binds it, the binding outlives the members and the topic's
creation time tells it from one left by an earlier topic of the same name."""

from __future__ import annotations

from collections.abc import Mapping

import orjson

from partitioner.errors import ConcurrentModification
from partitioner.etcd.connection import EtcdConnection
from partitioner.etcd.values import DEFAULT_PREFIX, StoredValue

__all__ = ["GroupBindings"]

BIND_ATTEMPTS = 8
MAX_REMEMBERED = 100_000
Headers = dict[str, str]


def _decode(stored: StoredValue | None, created_at_ms: int) -> Headers | None:
    """The bound headers, or None when unbound (absent, unreadable or of an earlier topic)."""
    if stored is None:
        return None
    try:
        doc = orjson.loads(stored.value)
        if int(doc["topic_created_at_ms"]) != created_at_ms:
            return None
        return {str(name): str(value) for name, value in doc["headers"].items()}
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError):
        return None


def _encode(headers: Mapping[str, str], created_at_ms: int) -> bytes:
    return orjson.dumps({"headers": dict(headers), "topic_created_at_ms": created_at_ms},
                        option=orjson.OPT_SORT_KEYS)


class GroupBindings:
    """Binds groups to filters and reads the bindings; a binding never changes while its topic
    lives, so each one is read from etcd once per process."""

    def __init__(self, conn: EtcdConnection, prefix: str = DEFAULT_PREFIX) -> None:
        self._conn = conn
        self._root = f"{prefix.rstrip('/')}/groupbindings/"
        self._known: dict[tuple[str, int, str], Headers] = {}

    def key(self, topic: str, group: str) -> bytes:
        """The key of one group's binding."""
        return f"{self._root}{topic}/{group}".encode()

    async def bind(self, topic: str, created_at_ms: int, group: str,
                   headers: Mapping[str, str]) -> Headers:
        """The filter ``group`` is bound to: ``headers`` when this call bound it or it already was,
        another filter when not. ConcurrentModification when the key kept changing under us."""
        known = self._known.get((topic, created_at_ms, group))
        if known is not None:
            return known
        key = self.key(topic, group)
        for _ in range(BIND_ATTEMPTS):
            stored = await self._conn.get(key)
            bound = _decode(stored, created_at_ms)
            if bound is None and await self._swap(key, stored, _encode(headers, created_at_ms)):
                bound = dict(headers)
            if bound is not None:
                return self._remember(topic, created_at_ms, group, bound)
        raise ConcurrentModification(f"{topic} (binding of group {group})")

    async def bound(self, topic: str, created_at_ms: int, group: str) -> Headers | None:
        """The filter ``group`` is bound to; None when no member has joined it yet."""
        known = self._known.get((topic, created_at_ms, group))
        if known is not None:
            return known
        bound = _decode(await self._conn.get(self.key(topic, group)), created_at_ms)
        return bound if bound is None else self._remember(topic, created_at_ms, group, bound)

    async def forget_topic(self, topic: str) -> None:
        """Delete every binding of a deleted topic."""
        await self._conn.delete_prefix(f"{self._root}{topic}/".encode())
        for known in [k for k in self._known if k[0] == topic]:
            del self._known[known]

    def _remember(self, topic: str, created_at_ms: int, group: str, bound: Headers) -> Headers:
        if len(self._known) >= MAX_REMEMBERED:
            self._known.clear()
        self._known[(topic, created_at_ms, group)] = bound
        return bound

    async def _swap(self, key: bytes, stored: StoredValue | None, value: bytes) -> bool:
        if stored is None:
            return await self._conn.put_if_absent(key, value) is not None
        revision, _ = await self._conn.put_if_unchanged(key, value, stored.mod_revision)
        return revision is not None
