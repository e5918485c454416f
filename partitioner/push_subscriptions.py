"""Push subscriptions' definitions in etcd (``<prefix>pushsubs/<topic>/<group>``, one JSON object
each), mirrored by a watch so every gateway sees a subscription appear, change or go within a
moment; changes are atomic read-modify-writes so concurrent editors never lose one another's."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import orjson

from partitioner.errors import ConcurrentModification
from partitioner.etcd.connection import EtcdConnection
from partitioner.etcd.values import DEFAULT_PREFIX, Guard, StoredValue, WatchEvent
from partitioner.prefix_mirror import PrefixMirror

__all__ = ["UPDATE_ATTEMPTS", "Change", "Listener", "PushSubscriptions"]

log = logging.getLogger(__name__)

# (topic, group) whose definition changed; None: any may have (the mirror was reloaded)
Listener = Callable[[tuple[str, str] | None], None]
# the definition as stored (None: absent) -> what to store instead (None: delete it)
Change = Callable[[dict[str, Any] | None], dict[str, Any] | None]

# a read-modify-write that kept losing to other writers gives up after this many tries
UPDATE_ATTEMPTS = 10


def decode(raw: bytes) -> dict[str, Any] | None:
    """The definition in a stored value; None when it is not a JSON object (logged, never fatal)."""
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError:
        doc = None
    if isinstance(doc, dict):
        return doc
    log.warning("ignoring a malformed push subscription: %r", raw[:200])
    return None


def encode(doc: dict[str, Any]) -> bytes:
    """The stored form of a definition."""
    return orjson.dumps(doc)


class PushSubscriptions:
    """Stores and mirrors push subscriptions' definitions (async context manager: loads, then
    follows the watch). The mirror's documents are shared: read them, never mutate them."""

    def __init__(self, conn: EtcdConnection, prefix: str = DEFAULT_PREFIX) -> None:
        self._conn = conn
        self._root = f"{prefix.rstrip('/')}/pushsubs/".encode()
        self._mirror = PrefixMirror(conn, self._root, self._changed)
        self._listeners: list[Listener] = []
        self._docs: dict[tuple[str, str], dict[str, Any]] = {}  # decoded once, as they change

    async def __aenter__(self) -> PushSubscriptions:
        await self._mirror.start("push-subscription-watch")
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self._mirror.stop()

    @property
    def healthy(self) -> bool:
        """Whether the mirror's watch is established (else the mirror may be behind)."""
        return self._mirror.healthy

    def key(self, topic: str, group: str) -> bytes:
        """The key of one subscription's definition."""
        return self._root + f"{topic}/{group}".encode()

    def listen(self, listener: Listener) -> None:
        """Call ``listener`` on every change seen through the watch."""
        self._listeners.append(listener)

    def all(self) -> dict[tuple[str, str], dict[str, Any]]:
        """Every definition as last seen, by (topic, group)."""
        return dict(self._docs)

    def of(self, topic: str, group: str) -> dict[str, Any] | None:
        """One definition as last seen; None when there is none."""
        return self._docs.get((topic, group))

    def count(self) -> int:
        """How many definitions the mirror holds."""
        return len(self._docs)

    async def read(self, topic: str, group: str) -> dict[str, Any] | None:
        """One definition fresh from etcd; None when absent or malformed."""
        stored = await self._conn.get(self.key(topic, group))
        return None if stored is None else decode(stored.value)

    async def create(self, topic: str, group: str, doc: dict[str, Any]) -> bool:
        """Store a definition only if the subscription has none; False when it has one."""
        return await self._conn.put_if_absent(self.key(topic, group), encode(doc)) is not None

    async def update(self, topic: str, group: str, change: Change) -> dict[str, Any] | None:
        """Apply ``change`` to the stored definition atomically (retried when another writer came
        first); returns what is stored afterwards (None: deleted or absent).

        ``change`` may be called several times and gets a private copy each time. Raises
        ConcurrentModification when the key kept changing under us.
        """
        key = self.key(topic, group)
        for _ in range(UPDATE_ATTEMPTS):
            stored = await self._conn.get(key)
            current = None if stored is None else decode(stored.value)
            wanted = change(None if current is None else orjson.loads(encode(current)))
            if wanted == current and (wanted is not None or stored is None):
                return wanted
            if await self._swap(key, stored, wanted):
                return wanted
        raise ConcurrentModification(f"push subscription {topic}/{group}")

    async def delete(self, topic: str, group: str) -> bool:
        """Delete one definition; whether there was one."""
        return await self._conn.delete(self.key(topic, group)) is not None

    async def forget_topic(self, topic: str) -> None:
        """Delete every definition of a deleted topic."""
        await self._conn.delete_prefix(self._root + f"{topic}/".encode())

    async def _swap(self, key: bytes, stored: StoredValue | None,
                    wanted: dict[str, Any] | None) -> bool:
        """Write ``wanted`` (None: delete) only if ``key`` is still as ``stored`` saw it."""
        if stored is None:
            return wanted is None or await self._conn.put_if_absent(key, encode(wanted)) is not None
        if wanted is None:
            return await self._conn.delete_if(
                key, guards=[Guard(key, stored.mod_revision, target="mod")])
        revision, _ = await self._conn.put_if_unchanged(key, encode(wanted), stored.mod_revision)
        return revision is not None

    def _changed(self, event: WatchEvent | None) -> None:
        changed = None if event is None else self._subscription_of(event.key)
        if changed is None:
            self._docs = {key: doc for stored in self._mirror.values.values()
                          if (doc := decode(stored.value)) is not None
                          and (key := self._subscription_of(stored.key)) is not None}
        elif event is not None and event.kind != "delete" \
                and (doc := decode(event.value)) is not None:
            self._docs[changed] = doc
        else:
            self._docs.pop(changed, None)
        for listener in self._listeners:
            listener(changed)

    def _subscription_of(self, key: bytes) -> tuple[str, str] | None:
        topic, _, group = key[len(self._root):].decode(errors="replace").partition("/")
        return (topic, group) if group else None
