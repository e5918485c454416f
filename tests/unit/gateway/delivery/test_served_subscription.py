"""A served subscription's client frames: settled in order per partition through bounded lanes,
partitions side by side, a failed part kept for a resend, all before the cleanup ends it."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, cast

import orjson
import pytest
from multidict import MultiDict

from gateway.delivery.hub import DeliveryHub
from gateway.delivery.params import parse_subscribe_params
from gateway.delivery.session import MessageRef, Session
from gateway.delivery.settle_frames import parse_settle
from gateway.delivery.subscription import INBOX_FRAMES, ServedSubscription
from gateway.delivery.websocket import LeanWebSocket, SocketEvents
from gateway.services import Services
from storage.errors import StorageError


class FakeSocket:
    """What a ServedSubscription uses of a LeanWebSocket, recorded."""

    def __init__(self) -> None:
        self.sent: list[bytes] = []
        self.reading_changes: list[str] = []
        self.closed_with: tuple[int, str] | None = None
        self.events: SocketEvents | None = None

    def serve(self, events: SocketEvents) -> None:
        self.events = events

    def pause_reading(self) -> None:
        self.reading_changes.append("pause")

    def resume_reading(self) -> None:
        self.reading_changes.append("resume")

    def close(self, code: int, reason: str = "") -> None:
        self.closed_with = (code, reason)

    async def send_texts(self, payloads: Sequence[bytes]) -> None:
        self.sent.extend(payloads)


class GatedHub:
    """A delivery hub whose settle waits for the test to open the gate (partitions in
    ``frozen`` wait for their own gate; those in ``failing`` fail while it holds)."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.frozen: dict[int, asyncio.Event] = {}
        self.failing: set[int] = set()
        self.settled: list[tuple[str, list[MessageRef]]] = []

    async def settle(
        self, session: Session, partition: int, refs: list[MessageRef], action: str,
        delay_ms: int, reason: str = ""
    ) -> None:
        assert {ref[0] for ref in refs} == {partition}
        await self.gate.wait()
        if partition in self.frozen:
            await self.frozen[partition].wait()
        if partition in self.failing:
            raise StorageError("XACK failed")
        self.settled.append((action, refs))


def served(services: Services, socket: FakeSocket, hub: GatedHub) -> ServedSubscription:
    services.delivery = cast(DeliveryHub, hub)
    params = parse_subscribe_params(MultiDict({"topic": "t", "group": "g", "mode": "shared"}))
    session = Session("s1", "t", params, socket.send_texts, slow_client_timeout_s=5)
    assert services.connections.acquire("p")
    subscription = ServedSubscription(cast(LeanWebSocket, socket), session,
                                      services.delivery_ports(),
                                      lambda: services.connections.release("p"), None)
    socket.serve(subscription)
    return subscription


def ack(n: int) -> str:
    return orjson.dumps(
        {"type": "ack", "messages": [{"partition": 0, "offset": f"{n}-0"}]}
    ).decode()


async def until(predicate: Any) -> None:
    for _ in range(200):
        if predicate():
            return
        await asyncio.sleep(0.005)
    raise AssertionError("condition not reached")


async def test_settles_keep_order_and_full_inbox_stops_reading(services: Services) -> None:
    socket, hub = FakeSocket(), GatedHub()
    subscription = served(services, socket, hub)
    for n in range(INBOX_FRAMES + 6):
        subscription.on_text(ack(n))
    await asyncio.sleep(0.01)
    assert "pause" in socket.reading_changes, (
        "past INBOX_FRAMES waiting frames the socket stops reading"
    )
    assert hub.settled == []
    hub.gate.set()
    await until(lambda: len(hub.settled) == INBOX_FRAMES + 6)
    assert [refs[0][1] for _, refs in hub.settled] == [f"{n}-0" for n in range(INBOX_FRAMES + 6)]
    assert socket.reading_changes[-1] == "resume"
    assert not subscription._settles._tasks, "no task once the lanes are empty"


def ack_of(*refs: tuple[int, int]) -> str:
    return orjson.dumps({"type": "ack", "messages": [
        {"partition": partition, "offset": f"{n}-0"} for partition, n in refs]}).decode()


async def test_a_stalled_partition_holds_up_no_other(services: Services) -> None:
    socket, hub = FakeSocket(), GatedHub()
    hub.gate.set()
    hub.frozen[0] = asyncio.Event()
    subscription = served(services, socket, hub)
    subscription.on_text(ack_of((0, 1), (1, 1), (2, 1)))
    subscription.on_text(ack_of((1, 2), (0, 2)))
    await until(lambda: len(hub.settled) == 3)
    assert sorted(refs for _, refs in hub.settled) == [[(1, "1-0")], [(1, "2-0")], [(2, "1-0")]]
    hub.frozen[0].set()
    await until(lambda: len(hub.settled) == 5)
    assert [refs for _, refs in hub.settled[3:]] == [[(0, "1-0")], [(0, "2-0")]], (
        "one partition's parts keep their order")


async def test_a_failed_part_says_which_partition_and_the_rest_settle(
        services: Services) -> None:
    socket, hub = FakeSocket(), GatedHub()
    hub.gate.set()
    hub.failing.add(1)
    subscription = served(services, socket, hub)
    subscription.on_text(ack_of((0, 1), (1, 1), (2, 1)))
    await until(lambda: len(hub.settled) == 2 and socket.sent)
    (error,) = [orjson.loads(frame) for frame in socket.sent]
    assert error["code"] == "unavailable"
    assert "partition 1" in error["detail"]
    hub.failing.clear()
    subscription.on_text(ack_of((0, 1), (1, 1), (2, 1)))  # sent again, as the error asks
    await until(lambda: len(hub.settled) == 5)
    assert [(1, "1-0")] in [refs for _, refs in hub.settled[2:]]


async def test_frames_received_before_disconnect_settle_before_cleanup(services: Services) -> None:
    socket, hub = FakeSocket(), GatedHub()
    subscription = served(services, socket, hub)
    for n in range(3):
        subscription.on_text(ack(n))
    subscription.on_closed()
    await asyncio.sleep(0.01)
    assert subscription in services.subscriptions, "the cleanup waits for the queued acks"
    hub.gate.set()
    await until(lambda: not services.subscriptions)
    assert len(hub.settled) == 3
    assert services.connections.open_count("p") == 0


async def test_non_settle_frame_gets_error_frame_and_settles_nothing(services: Services) -> None:
    socket, hub = FakeSocket(), GatedHub()
    hub.gate.set()
    subscription = served(services, socket, hub)
    subscription.on_text('{"type": "ack", "messages": []}')
    subscription.on_text("not json")
    subscription.on_binary(b"\x00")
    await until(lambda: len(socket.sent) == 3)
    frames = [orjson.loads(frame) for frame in socket.sent]
    assert [frame["code"] for frame in frames] == ["bad-frame"] * 3
    assert hub.settled == []
    subscription.session.request_close(4008, "slow")
    await asyncio.sleep(0)  # the closing future's callbacks run on the next loop step
    assert socket.closed_with == (4008, "slow"), (
        "a session's close request becomes the socket's close frame"
    )
    subscription.on_closed()
    await until(lambda: not services.subscriptions)


def test_a_settle_frame_gives_its_action_refs_delay_and_reason() -> None:
    frame = {
        "type": "nack",
        "messages": [{"partition": 3, "offset": "5-1"}, {"partition": 0, "offset": "7-0"}],
        "delay_ms": 250,
    }
    assert parse_settle(frame) == ("nack", [(3, "5-1"), (0, "7-0")], 250,
                                   "rejected by the consumer")
    assert parse_settle(
        {"type": "ack", "messages": [{"partition": 1, "offset": "1-0", "extra": True}]}
    )[:3] == ("ack", [(1, "1-0")], 0)
    rejected = {"type": "reject", "messages": [{"partition": 1, "offset": "1-0"}],
                "reason": "schema v1 unsupported"}
    assert parse_settle(rejected)[3] == "schema v1 unsupported"
    for bad in ("", "x" * 501, "line\nbreak", 7):
        with pytest.raises(ValueError, match="reason"):
            parse_settle({**rejected, "reason": bad})


@pytest.mark.parametrize(
    "item",
    [
        [1, "1-0"], "1-0", None, {"offset": "1-0"}, {"partition": 1},
        {"partition": "1", "offset": "1-0"}, {"partition": True, "offset": "1-0"},
        {"partition": 1.0, "offset": "1-0"}, {"partition": 1, "offset": 10},
        {"partition": 1, "offset": None}
    ],
)
def test_settle_frame_with_any_malformed_message_is_refused(item: object) -> None:
    good = {"partition": 0, "offset": "1-0"}
    for messages in ([item], [good, item], [good, good, item, good]):
        with pytest.raises(ValueError, match="each message must be"):
            parse_settle({"type": "ack", "messages": messages})
