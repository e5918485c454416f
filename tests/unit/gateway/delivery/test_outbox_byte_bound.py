"""A subscription's outbox is bounded in encoded bytes: past the bound it takes no delivery, and it
keeps nothing once closed."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest
from multidict import MultiDict

from gateway.delivery import heap
from gateway.delivery.params import parse_subscribe_params
from gateway.delivery.session import Session
from storage.models import Delivery, StoredEntry, ValueFormat

PARAMS = parse_subscribe_params(MultiDict({"topic": "t", "max_in_flight": "10000"}))
GROUP_PARAMS = parse_subscribe_params(MultiDict({"topic": "t", "group": "g", "mode": "shared",
                                                 "max_in_flight": "10000"}))


async def never_drains(frames: Sequence[bytes]) -> None:
    # a client that never reads: the transport stays above its high-water mark
    await asyncio.sleep(3600)


def delivery(offset: int, value_bytes: int) -> Delivery:
    entry = StoredEntry(partition=0, offset=f"{offset}-0", key=None, headers={}, timestamp_ms=1,
                        value=b'"' + b"x" * value_bytes + b'"', value_format=ValueFormat.JSON)
    return Delivery(entry, 1)


async def test_broadcast_page_is_taken_up_to_byte_bound() -> None:
    async with Session(
        "s", "t", PARAMS, never_drains, slow_client_timeout_s=60, max_outbox_bytes=1000
    ) as session:
        frames = [b"f" * 300] * 10
        taken = session.offer_frames(0, frames, [f"{n}-0" for n in range(10)])
        assert taken == 3, "300, 600, 900 bytes fit; the fourth frame would pass the bound"
        assert session.outbox_bytes == 900
        assert session.has_credit, "room is left: the next page takes at least one frame"
        assert session.offer_frames(0, frames[:2], ["10-0", "11-0"]) == 1
        assert not session.has_credit, "over the bound: no more delivery, whatever the credit"
        assert session.credit == 10_000 - 4


async def test_group_page_is_cut_at_byte_bound_rest_stays_with_reader() -> None:
    async with Session("s", "t", GROUP_PARAMS, never_drains, slow_client_timeout_s=60,
                       max_outbox_bytes=10_000) as session:
        page = [delivery(n, 3000) for n in range(1, 11)]
        taken = session.offer_page(page)
        assert taken == 3, "frames of ~3.1 KB: three fit under 10,000 bytes"
        assert len(session.in_flight) == taken, "only what was queued is in flight"
        assert session.offer_page(page[taken:]) == 1, "room left: one more frame"
        assert session.offer_page(page[taken + 1:]) == 0
        assert session.outbox_bytes < 10_000 + 3200


async def test_bound_held_readers_wake_when_writer_takes_frames() -> None:
    release = asyncio.Event()

    async def send(frames: Sequence[bytes]) -> None:
        await release.wait()

    async with Session(
        "s", "t", PARAMS, send, slow_client_timeout_s=60, max_outbox_bytes=1000
    ) as session:
        woken = asyncio.Event()
        session.offer_frames(0, [b"a" * 600, b"b" * 600], ["1-0", "2-0"])
        session.offer_frames(0, [b"c" * 600], ["3-0"])
        assert not session.has_credit
        session.watch_credit(woken)
        assert not woken.is_set()
        await asyncio.sleep(0.01)  # the writer takes the outbox into one write
        assert woken.is_set()
        assert session.outbox_bytes == 0
        release.set()


async def test_client_reading_no_answers_is_closed_at_twice_bound() -> None:
    async with Session(
        "s", "t", PARAMS, never_drains, slow_client_timeout_s=60, max_outbox_bytes=1000
    ) as session:
        session.offer_frames(0, [b"f" * 900], ["7-0"])
        await asyncio.sleep(0.01)  # the writer takes the frame; the client never reads it
        while not session.closing.done():
            session.send_control(
                {"type": "error", "code": "bad-frame", "detail": "frames must be JSON text"}
            )
        assert session.outbox_bytes <= 2000
        close = session.closing.result()
        assert close.code == 4008
        assert close.reason.startswith("slow consumer; from="), "the cursor to resume from"


async def test_subscriber_never_reading_is_closed_and_keeps_no_frame(
        monkeypatch: pytest.MonkeyPatch) -> None:
    trims: list[int] = []
    monkeypatch.setattr(heap, "_TRIM", trims.append)
    monkeypatch.setattr(heap, "TRIM_DELAY_S", 0.01)
    frame = b"m" * 100_000
    async with Session("s", "t", PARAMS, never_drains, slow_client_timeout_s=0.05,
                       max_outbox_bytes=4 * 1024 * 1024) as session:
        while session.has_credit:
            session.offer_frames(0, [frame], [f"{session.credit}-0"])
        assert session.outbox_bytes >= 4 * 1024 * 1024
        close = await asyncio.wait_for(session.closing, 2)
        assert close.code == 4008
    assert session.outbox_bytes == 0
    assert session._outbox == [], "frames left queued would outlive the connection"
    await asyncio.sleep(0.05)
    assert trims == [0], "the freed outbox is handed back to the OS"


async def test_a_burst_of_releases_trims_the_heap_once(monkeypatch: pytest.MonkeyPatch) -> None:
    trims: list[int] = []
    monkeypatch.setattr(heap, "_TRIM", trims.append)
    monkeypatch.setattr(heap, "TRIM_DELAY_S", 0.01)
    for _ in range(5):
        heap.trim_soon()
    await asyncio.sleep(0.05)
    assert trims == [0]
    heap.trim_soon()
    await asyncio.sleep(0.05)
    assert trims == [0, 0]
