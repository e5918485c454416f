"""How a group reader reads: without blocking while its reads come back full, blocking once one
comes back short."""

from __future__ import annotations

from gateway.delivery.filters import HeaderFilter
from gateway.delivery.group_config import GroupConfig
from gateway.delivery.group_reader import GroupReader
from gateway.delivery.read_loop import READ_BLOCK_MS
from gateway.delivery.session import FIRST_READ_FRAMES
from tests.unit.gateway.delivery.scripted_stream import (
    ScriptedStream,
    deliver_all,
    no_dead_letters,
)


async def test_reads_block_only_after_a_short_one() -> None:
    store = ScriptedStream(250)
    config = GroupConfig(30_000, 5, HeaderFilter(), "earliest", auto_ack=False, exclusive=True)
    reader = GroupReader("t", 0, "g", config, store, "c", no_dead_letters)  # type: ignore[arg-type]
    delivered = await deliver_all(reader, store, max_in_flight=100)
    assert delivered == list(range(250))
    first, *rest = store.reads
    assert first[:2] == (FIRST_READ_FRAMES, READ_BLOCK_MS), (
        "the first read (a session's first few) blocks: nothing says more is waiting yet"
    )
    assert any(block == 0 for _, block, _ in rest), (
        "full reads were followed by reads that do not block"
    )
    for previous, (_, block, _) in zip(store.reads, rest, strict=False):
        full = previous[2] == previous[0]
        assert block == (0 if full else READ_BLOCK_MS), store.reads
