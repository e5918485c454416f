"""A group reader whose read failed after Redis handed it entries (a reply lost with its primary)
delivers those entries next, in offset order, not after their ack timeout behind newer ones."""

from __future__ import annotations

from gateway.delivery.filters import HeaderFilter
from gateway.delivery.group_config import GroupConfig
from gateway.delivery.group_reader import GroupReader
from gateway.delivery.session import FIRST_READ_FRAMES
from storage.errors import StorageUnavailable
from storage.models import StoredEntry
from tests.unit.gateway.delivery.scripted_stream import (
    ScriptedStream,
    deliver_all,
    no_dead_letters,
)


class LosesOneReply(ScriptedStream):
    """Hands the entries of its second read to the consumer, then fails it; returns a consumer's
    handed entries after ``last_read`` first when told a read was lost, as XREADGROUP does."""

    def __init__(self, total: int) -> None:
        super().__init__(total)
        self.handed: list[StoredEntry] = []
        self.calls: list[tuple[str | None, bool]] = []

    async def read_new(self, topic: str, partition: int, group: str, consumer: str, *, count: int,
                       block_ms: int, until: str | None = None, last_read: str | None = None,
                       lost: bool = False) -> list[StoredEntry]:
        self.calls.append((last_read, lost))
        if lost and last_read is not None:
            after = [e for e in self.handed if _key(e.offset) > _key(last_read)][:count]
            if after:
                return after
        taken = await super().read_new(topic, partition, group, consumer, count=count,
                                       block_ms=block_ms)
        self.handed.extend(taken)
        if len(self.calls) == 2:
            raise StorageUnavailable("read_new: connection lost before the reply")
        return taken


def _key(offset: str) -> tuple[int, int]:
    ms, _, seq = offset.partition("-")
    return int(ms), int(seq)


async def test_entries_of_a_lost_read_are_delivered_next_in_order() -> None:
    store = LosesOneReply(30)
    config = GroupConfig(30_000, 5, HeaderFilter(), "earliest", auto_ack=False, exclusive=False)
    reader = GroupReader("t", 0, "g", config, store, "c", no_dead_letters)  # type: ignore[arg-type]
    delivered = await deliver_all(reader, store, max_in_flight=10, timeout_s=10)
    assert delivered == list(range(30))
    assert store.calls[0] == ("0-0", False), "a new group's reader starts from the beginning"
    # the first read fetched a session's first few, its last one is where the lost read started
    last_read = f"{1000 + FIRST_READ_FRAMES - 1}-0"
    assert store.calls[2] == (last_read, True), "the read after the failure says so"
    assert all(not lost for _, lost in store.calls[3:])
