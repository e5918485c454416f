"""A scripted partition for group reader tests: what each XREADGROUP asked for and returned."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import orjson
from multidict import MultiDict

from gateway.delivery.group_reader import GroupReader
from gateway.delivery.params import parse_subscribe_params
from gateway.delivery.session import Session
from storage.models import Delivery, GroupPartitionState, StoredEntry, ValueFormat


def entry(n: int) -> StoredEntry:
    return StoredEntry(partition=0, offset=f"{1000 + n}-0", value=orjson.dumps({"n": n}),
                       value_format=ValueFormat.JSON, key=None, headers={}, timestamp_ms=1000 + n)


class ScriptedStream:
    """A partition of ``total`` entries; records each XREADGROUP's count and block, acks every
    delivery."""

    def __init__(self, total: int) -> None:
        self.entries = [entry(n) for n in range(total)]
        self.reads: list[tuple[int, int, int]] = []  # (count, block_ms, entries returned)
        self.read_all = asyncio.Event()

    async def ensure_group(self, topic: str, partition: int, group: str, start: str) -> None:
        return None

    async def state(self, topic: str, partition: int, group: str) -> GroupPartitionState:
        return GroupPartitionState(partition, True, None, 0, None, None)

    async def expired(self, topic: str, partition: int, group: str, *, min_idle_ms: int,
                      count: int) -> list[str]:
        return []

    async def read_new(self, topic: str, partition: int, group: str, consumer: str, *, count: int,
                       block_ms: int, until: str | None = None, last_read: str | None = None,
                       lost: bool = False) -> list[StoredEntry]:
        taken, self.entries = self.entries[:count], self.entries[count:]
        self.reads.append((count, block_ms, len(taken)))
        if not taken:
            self.read_all.set()
            await asyncio.sleep(block_ms / 1000)
        return taken

    async def ack(self, topic: str, partition: int, group: str, offsets: Sequence[str]) -> int:
        return len(offsets)


async def no_dead_letters(topic: str, group: str, delivery: Delivery, reason: str) -> None:
    raise AssertionError("no dead letters here")


async def deliver_all(reader: GroupReader, store: ScriptedStream, max_in_flight: int,
                      timeout_s: float = 5) -> list[int]:
    """The ``n`` of every message a session attached to ``reader`` gets until ``store`` has been
    read to its end, acking each page as it comes."""
    delivered: list[int] = []
    session_ref: list[Session] = []

    async def send(frames: Sequence[bytes]) -> None:
        refs = [(0, orjson.loads(frame)["offset"]) for frame in frames]
        delivered.extend(orjson.loads(frame)["value"]["n"] for frame in frames)
        for held in session_ref[0].settle(refs).values():
            await reader.ack(held)

    params = parse_subscribe_params(MultiDict({"topic": "t", "group": "g",
                                               "max_in_flight": str(max_in_flight)}))
    async with Session("s", "t", params, send, slow_client_timeout_s=5) as session:
        session_ref.append(session)
        reader.attach(session)
        try:
            await asyncio.wait_for(store.read_all.wait(), timeout_s)
        finally:
            await reader.aclose()
    return delivered
