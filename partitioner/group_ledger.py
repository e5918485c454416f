"""Which consumer groups each principal created, in etcd, so a cap on groups per principal holds
across every gateway replica.

Key ``<prefix>groupledger/<principal, percent-encoded>`` holds
``{"groups": [[topic, group], ...]}``. A claim is one compare-and-swap on the principal's key, so
concurrent claims of one principal on several replicas cannot pass the cap together; claims of
different principals never contend.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from urllib.parse import quote

import orjson

from partitioner.errors import ConcurrentModification
from partitioner.etcd.connection import EtcdConnection
from partitioner.etcd.values import DEFAULT_PREFIX, StoredValue

Pair = tuple[str, str]
CLAIM_ATTEMPTS = 8


def admit(held: Sequence[Pair], wanted: Pair, cap: int,
          still_exists: Callable[[Pair], bool]) -> list[Pair] | None:
    """The principal's pairs after claiming ``wanted`` (unchanged when already held), or None when
    that would pass ``cap`` (0: no cap). Pairs that no longer exist are dropped only at the cap, so
    a claim rarely checks them."""
    pairs = list(dict.fromkeys(held))
    if wanted in pairs:
        return pairs
    if cap and len(pairs) >= cap:
        pairs = [pair for pair in pairs if still_exists(pair)]
        if len(pairs) >= cap:
            return None
    return [*pairs, wanted]


def _decode(stored: StoredValue | None) -> list[Pair]:
    if stored is None:
        return []
    try:
        return [(str(topic), str(group)) for topic, group in orjson.loads(stored.value)["groups"]]
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        return []  # unreadable: start over rather than lock the principal out


def _encode(pairs: Sequence[Pair]) -> bytes:
    return orjson.dumps({"groups": [list(pair) for pair in pairs]})


class GroupLedger:
    """The groups each principal created, read and changed with compare-and-swap."""

    def __init__(self, conn: EtcdConnection, prefix: str = DEFAULT_PREFIX) -> None:
        self._conn = conn
        self._root = f"{prefix.rstrip('/')}/groupledger/"

    def key(self, principal: str) -> bytes:
        """The key of one principal's groups (the name is percent-encoded: it may hold ``/``)."""
        return (self._root + quote(principal, safe="")).encode()

    async def held(self, principal: str) -> list[Pair]:
        """The (topic, group) pairs recorded for ``principal``."""
        return _decode(await self._conn.get(self.key(principal)))

    async def claim(self, principal: str, topic: str, group: str, cap: int,
                    still_exists: Callable[[Pair], bool] = lambda _: True) -> bool:
        """Record that ``principal`` created ``group`` on ``topic``; False when it already holds
        ``cap`` others.

        Raises ConcurrentModification when the key kept changing under us, CoordinationUnavailable
        without etcd.
        """
        key = self.key(principal)
        for _ in range(CLAIM_ATTEMPTS):
            stored = await self._conn.get(key)
            held = _decode(stored)
            pairs = admit(held, (topic, group), cap, still_exists)
            if pairs is None:
                return False
            if pairs == held or await self._swap(key, stored, pairs):
                return True
        raise ConcurrentModification(f"group ledger of {principal}")

    async def release(self, principal: str, topic: str, group: str) -> None:
        """Forget one pair of ``principal`` (absent is fine)."""
        key = self.key(principal)
        for _ in range(CLAIM_ATTEMPTS):
            stored = await self._conn.get(key)
            held = _decode(stored)
            if (topic, group) not in held or await self._swap(
                    key, stored, [p for p in held if p != (topic, group)]):
                return
        raise ConcurrentModification(f"group ledger of {principal}")

    async def _swap(self, key: bytes, stored: StoredValue | None, pairs: Sequence[Pair]) -> bool:
        if stored is None:
            return await self._conn.put_if_absent(key, _encode(pairs)) is not None
        revision, _ = await self._conn.put_if_unchanged(key, _encode(pairs), stored.mod_revision)
        return revision is not None


__all__ = ["GroupLedger", "admit"]
