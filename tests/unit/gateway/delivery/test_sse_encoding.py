"""The SSE encoding of a session's frames: one event per frame, JSON data on one line, and each
message's id the resume cursor right after it."""

from __future__ import annotations

import asyncio

import orjson
import pytest
from multidict import MultiDict

from gateway.delivery.params import parse_subscribe_params
from gateway.delivery.pinning import conversion_error_frame
from gateway.delivery.session import Session
from gateway.delivery.sse import (
    PING,
    SseStream,
    message_position,
    page_events,
    sse_events,
    stream_start,
)
from gateway.delivery.wire import error_frame, gap_frame, message_frame
from gateway.routes.events import error_event
from storage.models import LostRange, StoredEntry, ValueFormat


def entry(partition: int, offset: str, value: object = "v", key: bytes | None = None,
          headers: dict[str, str] | None = None) -> StoredEntry:
    return StoredEntry(partition, offset, orjson.dumps(value), ValueFormat.JSON, key,
                       headers or {}, 1_700_000_000_000)


def parsed(raw: bytes) -> list[dict[str, str]]:
    """Each event's fields (``data`` as the raw line)."""
    events = []
    for block in raw.decode().split("\n\n"):
        if block:
            events.append(dict(line.split(": ", 1) for line in block.split("\n")))
    return events


def test_each_message_is_one_event_whose_id_is_the_cursor_after_it() -> None:
    frames = [message_frame("orders", entry(0, "5-0"), 1),
              message_frame("orders", entry(2, "7-1"), 1),
              message_frame("orders", entry(0, "9-0"), 1)]
    cursor = {0: "1-0", 1: "3-0"}
    events = parsed(sse_events(frames, cursor))
    assert [e["id"] for e in events] == ["0:5-0,1:3-0", "0:5-0,1:3-0,2:7-1",
                                         "0:9-0,1:3-0,2:7-1"]
    assert [e["event"] for e in events] == ["message"] * 3
    assert [orjson.loads(e["data"]) for e in events] == [orjson.loads(f) for f in frames]
    assert cursor == {0: "9-0", 1: "3-0", 2: "7-1"}


@pytest.mark.parametrize("partition", [0, 2, 4])
def test_a_page_of_one_partition_gives_the_events_frame_by_frame_gives(partition: int) -> None:
    offsets = [f"{n}-{n % 3}" for n in range(10, 60)]
    frames = [message_frame("orders", entry(partition, offset, {"n": offset}), 1)
              for offset in offsets]
    one_by_one, paged = {1: "3-0", 3: "4-0"}, {1: "3-0", 3: "4-0"}
    assert page_events(partition, frames, offsets, paged) == sse_events(frames, one_by_one)
    assert paged == one_by_one


def test_a_stream_writes_pages_controls_and_errors_in_their_order() -> None:
    async def scenario() -> list[dict[str, str]]:
        written: list[bytes] = []

        async def write(data: bytes) -> None:
            written.append(data)

        stream = SseStream(write, lambda: None)
        params = parse_subscribe_params(MultiDict(topic="orders", mode="broadcast"))
        session = Session("s", "orders", params, stream.send, 5.0)
        session.cursor.update({1: "2-0"})
        stream.serve(session, None)
        page = [message_frame("orders", entry(0, f"{n}-0"), 1) for n in (5, 6)]
        failed = orjson.dumps(conversion_error_frame(entry(1, "9-0"), "cannot convert"))
        await stream.send_items([(page, 2, 0, ["5-0", "6-0"]), (b"{}", 0, -1, ""),
                                 ([failed], 1, 1, ["9-0"]),
                                 (message_frame("orders", entry(1, "10-0"), 1), 1, 1, "10-0")])
        await session.aclose()
        return parsed(b"".join(written).replace(PING, b""))

    events = asyncio.run(scenario())
    assert [(e["event"], e.get("id")) for e in events] == [
        ("message", "0:5-0,1:2-0"), ("message", "0:6-0,1:2-0"), ("error", "0:6-0,1:9-0"),
        ("message", "0:6-0,1:10-0")]


def test_a_value_with_newlines_and_a_tricky_key_stays_on_one_data_line() -> None:
    frame = message_frame("orders", entry(3, "12-4", {"text": "a\nb\r\nc"},
                                          key=b'k,"partition":9', headers={"h": "x\ny"}), 1)
    assert message_position(frame) == (3, "12-4")
    raw = sse_events([frame], {})
    assert raw.count(b"\n") == 4  # id, event, data, and the blank line ending the event
    [event] = parsed(raw)
    assert orjson.loads(event["data"])["value"] == {"text": "a\nb\r\nc"}
    assert event["id"] == "3:12-4"


def test_control_frames_are_events_of_their_type_without_an_id() -> None:
    gap = orjson.dumps(gap_frame(LostRange(0, "4-0", "8-0", None)))
    error = orjson.dumps(error_frame("unavailable", "down"))
    events = parsed(sse_events([gap, error], {0: "4-0"}))
    assert [(e["event"], "id" in e) for e in events] == [("gap", False), ("error", False)]
    assert orjson.loads(events[0]["data"])["first_kept"] == "8-0"


def test_a_conversion_error_takes_its_messages_place_in_the_cursor() -> None:
    failed = orjson.dumps(conversion_error_frame(entry(1, "6-0"), "no path to v2"))
    [event] = parsed(sse_events([failed], {0: "2-0"}))
    assert event["event"] == "error"
    assert event["id"] == "0:2-0,1:6-0"


def test_the_stream_starts_with_retry_and_ends_with_an_error_carrying_the_cursor() -> None:
    assert stream_start() == b"retry: 1000\n\n"
    [event] = parsed(error_event("slow-consumer", "too slow", "0:5-0"))
    assert event["event"] == "error"
    assert orjson.loads(event["data"]) == {"type": "error", "code": "slow-consumer",
                                           "detail": "too slow", "cursor": "0:5-0"}


async def test_a_heartbeat_is_queued_only_on_an_idle_stream_and_written_as_a_comment() -> None:
    written: list[bytes] = []
    gate, error_written = asyncio.Event(), asyncio.Event()

    async def write(data: bytes) -> None:
        await gate.wait()
        written.append(data)
        if b"event: error" in data:
            error_written.set()

    stream = SseStream(write, lambda: None)
    session = Session("s1", "orders", parse_subscribe_params(MultiDict(topic="orders")),
                      stream.send, 5.0)
    stream.serve(session, None)
    stream.ping()
    await asyncio.sleep(0)  # the writer takes the ping; the client is not reading
    session.send_control(error_frame("unavailable", "down"))
    stream.ping()  # something waits to be written: no second ping
    gate.set()
    await asyncio.wait_for(error_written.wait(), 5)
    await stream.aclose()
    assert b"".join(written).count(PING) == 1
    assert b"".join(written).startswith(PING)
