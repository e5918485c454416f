"""Coalescing: queued frames leave in few writes, in order (RFC 6455 framing)."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Sequence

import orjson
from hypothesis import given
from hypothesis import strategies as st
from multidict import MultiDict

from gateway.delivery.params import parse_subscribe_params
from gateway.delivery.session import WRITE_BATCH_BYTES, Session, _fitting
from gateway.delivery.wire import message_frame, text_frames
from storage.models import Delivery, StoredEntry, ValueFormat


def entry(n: int, size: int = 10) -> StoredEntry:
    return StoredEntry(
        partition=n % 2, offset=f"{1000 + n}-0", value=orjson.dumps({"n": n, "pad": "x" * size}),
        value_format=ValueFormat.JSON, key=b"k", headers={"h": "1"}, timestamp_ms=1000 + n
    )


def parse_frames(data: bytes) -> list[bytes]:
    payloads, at = [], 0
    while at < len(data):
        first, second = data[at], data[at + 1]
        assert first == 0x81, "final text frames"
        assert second & 0x80 == 0, "unmasked"
        length, at = second & 0x7F, at + 2
        if length == 126:
            (length,), at = struct.unpack("!H", data[at:at + 2]), at + 2
        elif length == 127:
            (length,), at = struct.unpack("!Q", data[at:at + 8]), at + 8
        payloads.append(data[at:at + length])
        at += length
    return payloads


def test_text_frames_round_trip_every_length_class() -> None:
    payloads = [b"a" * 5, b"b" * 125, b"c" * 126, b"d" * 70_000, b""]
    assert parse_frames(text_frames(payloads)) == payloads


async def test_queued_messages_go_out_in_few_writes_in_order() -> None:
    writes: list[list[bytes]] = []

    async def send(frames: Sequence[bytes]) -> None:
        writes.append(list(frames))

    params = parse_subscribe_params(MultiDict({"topic": "t", "max_in_flight": "500"}))
    async with Session("s", "t", params, send, slow_client_timeout_s=5) as session:
        for n in range(300):
            assert session.offer(Delivery(entry(n), 1))
        page = [entry(n) for n in range(300, 400)]
        session.offer_frames(0, [message_frame("t", e, 1) for e in page], [e.offset for e in page])
        for _ in range(50):
            await asyncio.sleep(0)
            if sum(len(w) for w in writes) >= 400:
                break
        sent = [orjson.loads(frame)["value"]["n"] for write in writes for frame in write]
        assert sent == list(range(400))
        assert len(writes) <= 2, f"400 queued frames took {len(writes)} writes"
        assert session.credit == 500, "written broadcast frames give their credit back"
        assert session.cursor == {0: "1399-0", 1: "1299-0"}


async def test_large_page_splits_across_writes_and_cursor_follows() -> None:
    writes: list[list[bytes]] = []
    cursors: list[dict[int, str]] = []
    holder: list[Session] = []

    async def send(frames: Sequence[bytes]) -> None:
        cursors.append(dict(holder[0].cursor))
        writes.append(list(frames))

    params = parse_subscribe_params(MultiDict({"topic": "t", "max_in_flight": "100"}))
    async with Session("s", "t", params, send, slow_client_timeout_s=5) as session:
        holder.append(session)
        page = [entry(2 * n, size=20_000) for n in range(40)]  # all partition 0, ~800 KB
        session.offer_frames(0, [message_frame("t", e, 1) for e in page], [e.offset for e in page])
        for _ in range(50):
            await asyncio.sleep(0)
        assert sum(len(w) for w in writes) == 40
        assert len(writes) > 1
        assert all(sum(map(len, w)) <= WRITE_BATCH_BYTES + 25_000 for w in writes)
        sent = [orjson.loads(frame)["value"]["n"] for write in writes for frame in write]
        assert sent == [2 * n for n in range(40)]
        # Before each later write the cursor names exactly the last frame of the previous one.
        for previous, cursor in zip(writes, cursors[1:], strict=False):
            assert cursor[0] == f"{1000 + orjson.loads(previous[-1])['value']['n']}-0"
        assert session.cursor == {0: page[-1].offset}


def _fitting_reference(page: list[bytes], max_frames: int, max_bytes: int) -> tuple[int, int]:
    size = 0
    for count, frame in enumerate(page[:max_frames]):
        if count and size + len(frame) > max_bytes:
            return count, size
        size += len(frame)
    return min(len(page), max_frames), size


@given(
    st.lists(st.integers(0, 300).map(lambda n: b"x" * n), max_size=20), st.integers(1, 25),
    st.integers(0, 2000)
)
def test_frames_of_a_page_in_one_write_count_one_by_one(
    page: list[bytes], max_frames: int, max_bytes: int
) -> None:
    assert _fitting(page, max_frames, max_bytes) == _fitting_reference(page, max_frames, max_bytes)
