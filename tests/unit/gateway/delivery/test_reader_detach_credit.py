"""A session that stops being served by one reader (its partition moved to another member of an
exclusive group) gets that reader's un-acked deliveries' credit back, so its other partitions keep
flowing."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

import orjson
from multidict import MultiDict

from gateway.delivery.filters import HeaderFilter
from gateway.delivery.group_config import GroupConfig
from gateway.delivery.group_reader import GroupReader
from gateway.delivery.params import parse_subscribe_params
from gateway.delivery.session import Session
from storage.models import Delivery, GroupPartitionState, StoredEntry, ValueFormat


class EndlessPartition:
    """A partition that always has more entries; records the offsets handed back to the group."""

    def __init__(self, partition: int) -> None:
        self.partition = partition
        self.next = 0
        self.released: list[str] = []

    async def ensure_group(self, topic: str, partition: int, group: str, start: str) -> None:
        return None

    async def state(self, topic: str, partition: int, group: str) -> GroupPartitionState:
        return GroupPartitionState(partition, True, None, 0, None, None)

    async def expired(
        self, topic: str, partition: int, group: str, *, min_idle_ms: int, count: int
    ) -> list[str]:
        return []

    async def read_new(self, topic: str, partition: int, group: str, consumer: str, *, count: int,
                       block_ms: int, until: str | None = None, last_read: str | None = None,
                       lost: bool = False) -> list[StoredEntry]:
        first, self.next = self.next, self.next + count
        return [
            StoredEntry(
                partition=self.partition, offset=f"{1000 + n}-0", value=orjson.dumps(n),
                value_format=ValueFormat.JSON, key=None, headers={}, timestamp_ms=1000 + n
            )
            for n in range(first, self.next)
        ]

    async def set_idle(
        self, topic: str, partition: int, group: str, consumer: str, offsets: Sequence[str],
        idle_ms: int
    ) -> None:
        self.released.extend(offsets)

    async def ack(self, topic: str, partition: int, group: str, offsets: Sequence[str]) -> int:
        return len(offsets)


async def no_dead_letters(topic: str, group: str, delivery: Delivery, reason: str) -> None:
    raise AssertionError("no dead letters here")


async def wait_until(condition: Callable[[], bool], what: str) -> None:
    for _ in range(500):
        if condition():
            return
        await asyncio.sleep(0.002)
    raise AssertionError(what)


async def test_detached_readers_unacked_deliveries_return_credit() -> None:
    config = GroupConfig(30_000, 5, HeaderFilter(), "earliest", auto_ack=False, exclusive=True)
    stores = [EndlessPartition(0), EndlessPartition(1)]
    readers = [
        GroupReader("t", p, "g", config, stores[p], "c", no_dead_letters)  # type: ignore[arg-type]
        for p in (0, 1)
    ]
    received: dict[int, int] = {0: 0, 1: 0}

    async def send(frames: Sequence[bytes]) -> None:  # a client that acks nothing
        for frame in frames:
            received[orjson.loads(frame)["partition"]] += 1

    params = parse_subscribe_params(MultiDict({"topic": "t", "group": "g", "max_in_flight": "100"}))
    async with Session("s", "t", params, send, slow_client_timeout_s=5) as session:
        readers[0].attach(session)
        try:
            await wait_until(lambda: received[0] == 100, "partition 0 fills the window")
            readers[1].attach(session)
            await asyncio.sleep(0.02)
            assert session.credit == 0, "a full window"
            assert received[1] == 0, "partition 1 waits for credit"

            await readers[0].detach(session)  # partition 0 moved to another member
            assert len(stores[0].released) == 100, "its un-acked entries went back to the group"
            assert not session.in_flight.keys() & {(0, offset) for offset in stores[0].released}
            await wait_until(lambda: received[1] == 100, "partition 1 gets the whole window")
            assert session.credit == 0
            assert len(session.in_flight) == 100
        finally:
            for reader in readers:
                await reader.aclose()
