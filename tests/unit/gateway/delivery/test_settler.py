"""The settler alone: acks of one tick in one XACK, its failure seen by every ack it carried, idle
times written, and bookkeeping writes that fail only logged."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

import pytest

from gateway.delivery.group_config import ReaderScope
from gateway.delivery.settler import Settler
from storage.errors import StorageError

SCOPE = ReaderScope("t", 0, "g", "c", ("t", "g", "shared"))


class SettleRecorder:
    """The GroupStore calls a settler makes, recorded (acks failing when asked)."""

    def __init__(self, fail: bool = False) -> None:
        self.acks: list[list[str]] = []
        self.idles: list[tuple[list[str], int]] = []
        self.fail = fail

    async def ack(self, topic: str, partition: int, group: str, offsets: Sequence[str]) -> int:
        self.acks.append(list(offsets))
        await asyncio.sleep(0)
        if self.fail:
            raise StorageError("ack failed")
        return len(offsets)

    async def set_idle(self, topic: str, partition: int, group: str, consumer: str,
                       offsets: Sequence[str], idle_ms: int) -> None:
        self.idles.append((list(offsets), idle_ms))


def settler_on(store: SettleRecorder) -> Settler:
    return Settler(store, SCOPE)  # type: ignore[arg-type]


async def test_acks_from_one_tick_go_out_as_one_xack() -> None:
    store = SettleRecorder()
    settler = settler_on(store)
    await asyncio.gather(settler.ack([(0, "1-0"), (0, "2-0")]), settler.ack([(0, "3-0")]))
    await settler.ack([(0, "4-0")])
    assert store.acks == [["1-0", "2-0", "3-0"], ["4-0"]]


async def test_a_failed_batched_xack_fails_every_ack_it_carried() -> None:
    settler = settler_on(SettleRecorder(fail=True))
    results = await asyncio.gather(
        settler.ack([(0, "1-0")]), settler.ack([(0, "2-0")]), return_exceptions=True
    )
    assert [type(r) for r in results] == [StorageError, StorageError]


async def test_ack_of_cancelled_caller_still_goes_out_for_others() -> None:
    store = SettleRecorder()
    settler = settler_on(store)
    gone = asyncio.ensure_future(settler.ack([(0, "1-0")]))
    staying = asyncio.ensure_future(settler.ack([(0, "2-0")]))
    await asyncio.sleep(0)
    gone.cancel()
    await staying
    assert store.acks == [["1-0", "2-0"]]


async def test_idle_times_are_written_only_for_some_offsets() -> None:
    store = SettleRecorder()
    settler = settler_on(store)
    await settler.set_idle([], 0)
    await settler.set_idle(["1-0"], 0)
    assert store.idles == [(["1-0"], 0)]


async def test_failed_bookkeeping_write_is_logged_not_raised(
        caplog: pytest.LogCaptureFixture) -> None:
    async def failing() -> None:
        raise StorageError("unreachable")

    settler = settler_on(SettleRecorder())
    with caplog.at_level(logging.WARNING):
        settler.beside_the_loop(failing())
        for _ in range(3):
            await asyncio.sleep(0)
    assert "parked keys of t/0 for group g not recorded" in caplog.text
