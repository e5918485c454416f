"""The quota ledger: per subject (an opaque string) one hash of bytes charged, field -> count,
shared by every gateway; each operation is one pipeline per node."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from storage.cluster import ClusterRouter
from storage.keys import PREFIX, slot_of_key
from storage.wire.connection import NodeAddress
from storage.wire.lanes import NodeLanes

# Takes back what a reader counted in each field and removes the fields left with nothing, so a
# charge that lands between the read and the drop is kept (HDEL would lose it). Sent as EVAL: a
# drop is rare (a bucket leaves once).
FORGET = """
for i, field in ipairs(ARGV) do
  if i % 2 == 1 then
    local left = redis.call('HINCRBY', KEYS[1], field, -tonumber(ARGV[i + 1]))
    if left <= 0 then redis.call('HDEL', KEYS[1], field) end
  end
end
return 1
"""


def ledger_key(subject: str) -> str:
    """The hash of a subject's charges; the hash tag is a digest of the subject, which may hold any
    character (braces included)."""
    digest = hashlib.sha256(subject.encode()).hexdigest()
    return f"{PREFIX}:{{quota:{digest}}}:retained"


class RedisQuotaLedger:
    """Charges, reads and forgets subjects' counted bytes on the store's connections
    (``RedisStreamStore.quotas``)."""

    def __init__(self, router: ClusterRouter, lanes: NodeLanes) -> None:
        self._router, self._lanes = router, lanes

    async def charge(self, charges: Mapping[str, Mapping[str, int]]) -> None:
        """Add ``charges[subject][field]`` bytes to each subject's fields (HINCRBY)."""
        def commands(subject: str) -> list[tuple[Any, ...]]:
            key = ledger_key(subject)
            return [("HINCRBY", key, field, n) for field, n in charges[subject].items() if n]

        await self._per_node("quota_charge", self._router.settings.write_deadline_s,
                             charges, commands)

    async def buckets(self, subjects: Iterable[str]) -> dict[str, dict[str, int]]:
        """Every field of each subject's hash with its bytes (none: an empty dict)."""
        wanted = list(dict.fromkeys(subjects))
        replies = await self._per_node("quota_read", self._router.settings.read_deadline_s,
                                       wanted, lambda s: [("HGETALL", ledger_key(s))])
        return {subject: _fields(reply[0]) for subject, reply in replies.items()}

    async def forget(self, counted: Mapping[str, Mapping[str, int]]) -> None:
        """Take back ``counted[subject][field]`` bytes, removing the fields left with nothing."""
        def commands(subject: str) -> list[tuple[Any, ...]]:
            args: list[Any] = []
            for field, n in counted[subject].items():
                args += [field, n]
            return [("EVAL", FORGET, 1, ledger_key(subject), *args)] if args else []

        await self._per_node("quota_forget", self._router.settings.write_deadline_s,
                             counted, commands)

    async def _per_node(self, what: str, budget_s: float, subjects: Iterable[str],
                        commands: Callable[[str], list[tuple[Any, ...]]],
                        ) -> dict[str, list[Any]]:
        """Each subject's commands, one pipeline per node (retried whole inside ``budget_s``); the
        replies per subject."""
        wanted = [subject for subject in subjects if commands(subject)]

        async def op() -> dict[str, list[Any]]:
            by_node: dict[NodeAddress, list[str]] = {}
            for subject in wanted:
                node = self._router.node_for_slot(slot_of_key(ledger_key(subject)))
                by_node.setdefault(node, []).append(subject)
            answers = await asyncio.gather(*(self._on_node(node, group, commands)
                                             for node, group in by_node.items()))
            return {s: r for answer in answers for s, r in answer.items()}

        return await self._router.call(what, budget_s, op) if wanted else {}

    async def _on_node(self, node: NodeAddress, subjects: list[str],
                       commands: Callable[[str], list[tuple[Any, ...]]],
                       ) -> dict[str, list[Any]]:
        per_subject = [commands(subject) for subject in subjects]
        replies = await self._lanes.execute(node, [c for cs in per_subject for c in cs],
                                            exclusive=False)
        for reply in replies:
            if isinstance(reply, BaseException):
                raise reply
        found, at = {}, 0
        for subject, sent in zip(subjects, per_subject, strict=True):
            found[subject], at = replies[at:at + len(sent)], at + len(sent)
        return found


def _fields(reply: Any) -> dict[str, int]:
    """An HGETALL reply (a flat list, or a map under RESP3) as field -> int."""
    pairs = reply.items() if isinstance(reply, dict) else zip(reply[::2], reply[1::2],
                                                               strict=True)
    return {(f.decode() if isinstance(f, bytes) else str(f)): int(n) for f, n in pairs}


__all__ = ["FORGET", "RedisQuotaLedger", "ledger_key"]
