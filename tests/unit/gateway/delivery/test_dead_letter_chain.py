"""Exhausted deliveries move to the dead letters beside the loop, one move after the other (the
partition's order), and are acked only once written."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from gateway.delivery.group_config import ReaderScope
from gateway.delivery.reclaim import DeadLetterChain
from gateway.delivery.retry_policy import EXHAUSTED
from gateway.delivery.settler import Settler
from partitioner.errors import PartitionerError
from storage.models import Delivery, StoredEntry, ValueFormat

SCOPE = ReaderScope("t", 0, "g", "c", ("t", "g", "shared"))


class AckRecorder:
    def __init__(self) -> None:
        self.acks: list[list[str]] = []

    async def ack(self, topic: str, partition: int, group: str, offsets: Sequence[str]) -> int:
        self.acks.append(list(offsets))
        return len(offsets)


def exhausted(offset: int) -> tuple[Delivery, str]:
    return (Delivery(StoredEntry(0, f"1-{offset}", b"v", ValueFormat.JSON, None, {}, 1), 6),
            EXHAUSTED)


async def until_settled(chain_store: AckRecorder, count: int) -> None:
    for _ in range(100):
        if len(chain_store.acks) >= count:
            return
        await asyncio.sleep(0.001)


async def test_moves_keep_partition_order_when_earlier_is_slower() -> None:
    written: list[str] = []

    async def sink(topic: str, group: str, delivery: Delivery, reason: str) -> None:
        if delivery.entry.offset == "1-0":
            await asyncio.sleep(0.01)
        written.append(delivery.entry.offset)

    store = AckRecorder()
    chain = DeadLetterChain(SCOPE, sink, Settler(store, SCOPE), None)  # type: ignore[arg-type]
    chain.later([exhausted(0)])
    chain.later([exhausted(1), exhausted(2)])
    await until_settled(store, 2)
    assert written == ["1-0", "1-1", "1-2"]
    assert store.acks == [["1-0"], ["1-1", "1-2"]]


async def test_failed_move_leaves_deliveries_pending_for_reclaim() -> None:
    async def sink(topic: str, group: str, delivery: Delivery, reason: str) -> None:
        raise PartitionerError("dead-letter topic unavailable")

    store = AckRecorder()
    chain = DeadLetterChain(SCOPE, sink, Settler(store, SCOPE), None)  # type: ignore[arg-type]
    chain.later([exhausted(0)])
    for _ in range(5):
        await asyncio.sleep(0)
    assert store.acks == []
