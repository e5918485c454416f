"""How much a group reader reads once a session's window is full: not a sliver per ack (silly-window
avoidance), and never held back longer than the coalescing time when the credit does not grow."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import orjson
import pytest
from multidict import MultiDict

from gateway.delivery import read_loop
from gateway.delivery.filters import HeaderFilter
from gateway.delivery.group_config import GroupConfig
from gateway.delivery.group_reader import GroupReader
from gateway.delivery.params import parse_subscribe_params
from gateway.delivery.session import FIRST_READ_FRAMES, MessageRef, Session
from tests.unit.gateway.delivery.scripted_stream import ScriptedStream, no_dead_letters

WINDOW = 100


def exclusive_reader(store: ScriptedStream) -> GroupReader:
    config = GroupConfig(30_000, 5, HeaderFilter(), "earliest", auto_ack=False, exclusive=True)
    return GroupReader("t", 0, "g", config, store, "c", no_dead_letters)  # type: ignore[arg-type]


def window_params() -> object:
    return parse_subscribe_params(
        MultiDict({"topic": "t", "group": "g", "max_in_flight": str(WINDOW)})
    )


async def ack_one(session: Session, reader: GroupReader, ref: MessageRef) -> None:
    for held in session.settle([ref]).values():
        await reader.ack(held)


async def test_one_by_one_acker_gets_reads_of_half_its_window(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # the client acks far faster: no timer in the way
    monkeypatch.setattr(read_loop, "READ_COALESCE_S", 1.0)
    store = ScriptedStream(1_000)
    reader = exclusive_reader(store)
    received: asyncio.Queue[MessageRef] = asyncio.Queue()

    async def send(frames: Sequence[bytes]) -> None:
        for frame in frames:
            received.put_nowait((0, orjson.loads(frame)["offset"]))

    async with Session("s", "t", window_params(), send, slow_client_timeout_s=5) as session:  # type: ignore[arg-type]
        # one ack per message, each awaited (an XACK per event-loop tick at most)
        async def client() -> None:
            while True:
                await ack_one(session, reader, await received.get())

        reader.attach(session)
        acking = asyncio.create_task(client())
        try:
            await asyncio.wait_for(store.read_all.wait(), 10)
        finally:
            acking.cancel()
            await reader.aclose()
    counts = [count for count, _, returned in store.reads if returned]
    assert sum(returned for _, _, returned in store.reads) == 1_000
    # a session's first read fetches a few (their size unknown), the rest of its window next
    assert counts[:2] == [FIRST_READ_FRAMES, WINDOW - FIRST_READ_FRAMES]
    # without the wait for credit: reads of 1 or 2, one per ack
    assert min(counts[1:]) >= WINDOW // 2, counts
    assert len(counts) <= 2 * 1_000 // WINDOW, counts


async def test_read_waits_at_most_coalescing_time_without_credit(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # longer than 10 acks take, even on a busy machine
    monkeypatch.setattr(read_loop, "READ_COALESCE_S", 0.2)
    store = ScriptedStream(WINDOW + 10)
    reader = exclusive_reader(store)
    received: list[MessageRef] = []
    window_full, more = asyncio.Event(), asyncio.Event()

    async def send(frames: Sequence[bytes]) -> None:
        received.extend((0, orjson.loads(frame)["offset"]) for frame in frames)
        if len(received) >= WINDOW:
            window_full.set()
        if len(received) > WINDOW:
            more.set()

    async with Session("s", "t", window_params(), send, slow_client_timeout_s=5) as session:  # type: ignore[arg-type]
        reader.attach(session)
        try:
            await asyncio.wait_for(window_full.wait(), 5)
            for ref in received[:10]:  # 10 acked, 90 held: a sliver of the window, and never more
                await ack_one(session, reader, ref)
            # the read comes once the coalescing time is over
            await asyncio.wait_for(more.wait(), 5)
        finally:
            await reader.aclose()
    # the 10 that fit were read and delivered although 90 are still held
    assert len(received) == WINDOW + 10
    # one read of 10, not 10 of 1
    assert [count for count, _, returned in store.reads if returned] == [
        FIRST_READ_FRAMES, WINDOW - FIRST_READ_FRAMES, 10]
