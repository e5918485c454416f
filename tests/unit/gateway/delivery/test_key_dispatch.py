"""Key-ordered dispatch without a reader: a key's next message waits for the ack, a failed key is
parked in the store, and parked keys settled on another gateway are freed."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import cast

from gateway.delivery import key_dispatch
from gateway.delivery.group_config import ReaderScope
from gateway.delivery.key_dispatch import KeyedDispatch
from gateway.delivery.session import Session
from gateway.delivery.settler import Settler
from gateway.observe.metrics import GatewayMetrics
from storage.models import Delivery, ParkedKey, PendingEntry, StoredEntry, ValueFormat

SCOPE = ReaderScope("t", 0, "g", "c", ("t", "g", "key_shared"))


@dataclass(eq=False)
class PageTaker:
    """What dispatch uses of a Session: credit, and pages taken whole."""

    id: str
    credit: int = 10
    pages: list[list[str]] = field(default_factory=list)

    @property
    def has_credit(self) -> bool:
        return self.credit > 0

    def offer_page(self, page: list[Delivery]) -> int:
        self.pages.append([d.entry.offset for d in page])
        self.credit -= len(page)
        return len(page)


class ParkingStore:
    """The GroupStore calls of key-ordered dispatch, recorded; ``pending`` answers ``expired``."""

    def __init__(self) -> None:
        self.parked: list[list[ParkedKey]] = []
        self.unparked: list[list[bytes]] = []
        self.pending: list[PendingEntry] = []
        self.lookups = 0

    async def park(self, topic: str, partition: int, group: str, keys: list[ParkedKey]) -> None:
        self.parked.append(keys)

    async def unpark(self, topic: str, partition: int, group: str, keys: Sequence[bytes]) -> None:
        self.unparked.append(list(keys))

    async def expired(self, topic: str, partition: int, group: str, *, min_idle_ms: int,
                      count: int, after: str | None = None) -> list[PendingEntry]:
        self.lookups += 1
        return self.pending


def delivery(offset: int, key: str) -> Delivery:
    return Delivery(StoredEntry(0, f"1-{offset}", b"v", ValueFormat.JSON, key.encode(), {}, 1), 1)


def keyed_on(store: ParkingStore) -> tuple[KeyedDispatch, deque[Delivery], asyncio.Event]:
    backlog: deque[Delivery] = deque()
    credit = asyncio.Event()
    settler = Settler(store, SCOPE)  # type: ignore[arg-type]
    keyed = KeyedDispatch(store, SCOPE, backlog, credit, settler,  # type: ignore[arg-type]
                          GatewayMetrics.create())
    return keyed, backlog, credit


async def settle_writes() -> None:
    for _ in range(3):
        await asyncio.sleep(0)


async def test_keys_next_message_goes_first_once_in_flight_settles() -> None:
    keyed, backlog, credit = keyed_on(ParkingStore())
    member = PageTaker("a")
    backlog.extend([delivery(0, "k"), delivery(1, "k"), delivery(2, "other")])
    keyed.dispatch([cast(Session, member)])
    assert member.pages == [["1-0", "1-2"]]
    assert not backlog
    assert keyed.in_flight
    keyed.settled(["1-0"])
    assert [d.entry.offset for d in backlog] == ["1-1"]
    assert credit.is_set()


async def test_failed_key_is_parked_in_store_and_unparked_once_settled() -> None:
    store = ParkingStore()
    keyed, backlog, _ = keyed_on(store)
    backlog.append(delivery(0, "poison"))
    keyed.dispatch([cast(Session, PageTaker("a"))])
    keyed.failed(["1-0"])
    keyed.failed(["1-0"])  # parked already: written once
    await settle_writes()
    assert [[(p.key, p.offset) for p in keys] for keys in store.parked] == [[(b"poison", "1-0")]]
    keyed.settled(["1-0"])
    await settle_writes()
    assert store.unparked == [[b"poison"]]


async def test_parked_keys_are_rechecked_at_most_once_per_interval() -> None:
    store = ParkingStore()
    keyed, backlog, _ = keyed_on(store)
    backlog.extend([delivery(0, "poison"), delivery(1, "poison")])
    keyed.dispatch([cast(Session, PageTaker("a"))])
    keyed.failed(["1-0"])
    store.pending = [PendingEntry(0, "1-0", "c", 10, 2)]
    await keyed.reconcile(100.0)
    assert not backlog, "still pending: still parked"
    store.pending = []
    await keyed.reconcile(100.0 + key_dispatch.RECONCILE_S / 2)
    assert store.lookups == 1, "not again within RECONCILE_S"
    await keyed.reconcile(100.0 + key_dispatch.RECONCILE_S)
    assert [d.entry.offset for d in backlog] == ["1-1"]


async def test_closing_hands_back_waiting_messages_and_unparks_all() -> None:
    store = ParkingStore()
    keyed, backlog, _ = keyed_on(store)
    backlog.extend([delivery(0, "k"), delivery(1, "k")])
    keyed.dispatch([cast(Session, PageTaker("a"))])
    assert await keyed.aclose() == ["1-1"]
    assert store.unparked == [[]]
    assert not keyed.in_flight
