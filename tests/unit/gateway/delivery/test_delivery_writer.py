"""The session writer runs only while there is something to write (an idle subscription must cost
little memory)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import orjson
from multidict import MultiDict

from gateway.delivery.params import parse_subscribe_params
from gateway.delivery.session import Session
from storage.models import Delivery, StoredEntry, ValueFormat

TOPIC_PARAMS = MultiDict({"topic": "t", "max_in_flight": "10"})


def writer_tasks() -> list[asyncio.Task[object]]:
    return [t for t in asyncio.all_tasks() if t.get_name().startswith("session-writer-")]


async def settle() -> None:
    for _ in range(10):
        await asyncio.sleep(0)


async def test_an_idle_session_runs_no_writer_task() -> None:
    async def send(frames: Sequence[bytes]) -> None:
        raise AssertionError("nothing to send")

    async with Session(
        "s", "t", parse_subscribe_params(TOPIC_PARAMS), send, slow_client_timeout_s=5
    ):
        await settle()
        assert writer_tasks() == []


async def test_writer_ends_on_empty_outbox_and_later_frame_is_written() -> None:
    writes: list[list[bytes]] = []

    async def send(frames: Sequence[bytes]) -> None:
        writes.append(list(frames))

    params = parse_subscribe_params(TOPIC_PARAMS)
    async with Session("s", "t", params, send, slow_client_timeout_s=5) as session:
        session.offer_frames(0, [b'{"n":1}'], ["1-0"])
        await settle()
        assert writes == [[b'{"n":1}']]
        assert writer_tasks() == [], "the writer ended once the outbox was empty"
        session.offer_frames(0, [b'{"n":2}', b'{"n":3}'], ["2-0", "3-0"])
        await settle()
        assert writes == [[b'{"n":1}'], [b'{"n":2}', b'{"n":3}']]
        assert session.cursor == {0: "3-0"}
        assert session.credit == 10, "written frames gave their credit back"
        assert writer_tasks() == []


async def test_frames_queued_during_a_write_go_out_in_order() -> None:
    writes: list[list[bytes]] = []
    release = asyncio.Event()

    async def send(frames: Sequence[bytes]) -> None:
        writes.append(list(frames))
        await release.wait()

    async with Session(
        "s", "t", parse_subscribe_params(TOPIC_PARAMS), send, slow_client_timeout_s=5
    ) as session:
        session.send_control({"type": "assignment"})
        await settle()
        session.offer_frames(0, [b"a"], ["1-0"])
        session.offer_frames(1, [b"b"], ["1-0"])
        assert len(writer_tasks()) == 1
        release.set()
        await settle()
        assert writes == [[b'{"type":"assignment"}'], [b"a", b"b"]]
        assert writer_tasks() == []


async def test_a_closed_session_starts_no_writer() -> None:
    async def send(frames: Sequence[bytes]) -> None:
        raise AssertionError("a closed session writes nothing")

    session = Session("s", "t", parse_subscribe_params(TOPIC_PARAMS), send, slow_client_timeout_s=5)
    async with session:
        pass
    session.send_control({"type": "late"})
    await settle()
    assert writer_tasks() == []


async def test_slow_write_closes_4008_with_lazily_started_writer() -> None:
    writes: list[list[bytes]] = []

    async def send(frames: Sequence[bytes]) -> None:
        writes.append(list(frames))
        await asyncio.sleep(10)

    async with Session(
        "s", "t", parse_subscribe_params(TOPIC_PARAMS), send, slow_client_timeout_s=0.01
    ) as session:
        session.offer_frames(0, [b"a"], ["1-0"])
        close = await asyncio.wait_for(session.closing, 2)
        assert close.code == 4008
        assert session.resume_cursor() == "0:1-0", "the frame in the transport counts as sent"
        session.offer_frames(0, [b"b"], ["2-0"])
        await settle()
        assert writer_tasks() == []
        assert len(writes) == 2, (
            "the frame and the slow-consumer error frame; nothing after the close"
        )


async def test_group_page_is_taken_up_to_credit_and_written_at_once() -> None:
    writes: list[list[bytes]] = []

    async def send(frames: Sequence[bytes]) -> None:
        writes.append(list(frames))

    page = [
        Delivery(StoredEntry(4, f"{n}-0", b"%d" % n, ValueFormat.JSON, None, {}, n), 1)
        for n in range(1, 13)
    ]
    params = parse_subscribe_params(MultiDict({"topic": "t", "group": "g", "max_in_flight": "10"}))
    async with Session("s", "t", params, send, slow_client_timeout_s=5) as session:
        assert session.offer_page(page) == 10
        assert session.offer_page(page[10:]) == 0
        await settle()
        assert [orjson.loads(frame)["value"] for frame in writes[0]] == list(range(1, 11))
        assert len(writes) == 1
        assert set(session.in_flight) == {(4, f"{n}-0") for n in range(1, 11)}
        assert session.credit == 0, "un-acked deliveries keep their credit until settled"
        assert session.cursor == {4: "10-0"}
        session.settle([(4, "1-0"), (4, "2-0")])
        assert session.credit == 2


async def test_extending_one_delivery_leaves_others_deadlines() -> None:
    async def send(frames: Sequence[bytes]) -> None:
        pass

    page = [
        Delivery(StoredEntry(0, f"{n}-0", b"1", ValueFormat.JSON, None, {}, n), 1) for n in (1, 2)
    ]
    params = parse_subscribe_params(
        MultiDict({"topic": "t", "group": "g", "ack_timeout_ms": "1000"})
    )
    async with Session("s", "t", params, send, slow_client_timeout_s=5) as session:
        session.offer_page(page)
        first = session.in_flight[(0, "2-0")]
        await asyncio.sleep(0.01)
        assert session.extend([(0, "1-0"), (0, "9-0")]) == {0: [(0, "1-0")]}
        assert session.in_flight[(0, "1-0")] > first
        assert session.in_flight[(0, "2-0")] == first


async def test_settled_refs_group_by_partition_without_unknown_ones() -> None:
    async def send(frames: Sequence[bytes]) -> None:
        pass

    def page(partition: int, numbers: range) -> list[Delivery]:
        return [
            Delivery(StoredEntry(partition, f"{n}-0", b"1", ValueFormat.JSON, None, {}, n), 1)
            for n in numbers
        ]

    params = parse_subscribe_params(MultiDict({"topic": "t", "group": "g", "max_in_flight": "100"}))
    async with Session("s", "t", params, send, slow_client_timeout_s=5) as session:
        session.offer_page(page(0, range(1, 4)))
        session.offer_page(page(1, range(1, 3)))
        session.offer_page(page(0, range(4, 6)))  # a second page of the same partition
        assert session.credit == 93
        grouped = session.settle(
            [
                (0, "1-0"), (1, "2-0"), (0, "5-0"), (0, "9-0"), (0, "4-0"), (0, "1-0"), (1, "1-0"),
                (0, "3-0")
            ]
        )
        assert grouped == {
            0: [(0, "1-0"), (0, "5-0"), (0, "4-0"), (0, "3-0")],
            1: [(1, "2-0"), (1, "1-0")],
        }, "in frame order; unknown and repeated refs left out"
        assert session.credit == 99
        assert set(session.in_flight) == {(0, "2-0")}
        assert session.settle(iter([(0, "2-0")])) == {0: [(0, "2-0")]}, "any iterable of refs"
        assert session.credit == 100
