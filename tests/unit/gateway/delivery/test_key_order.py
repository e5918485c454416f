"""Key-ordered routing alone: one message of a key in flight, later ones held in order and released
by the ack, a key kept on its session while in flight, keyless messages spread by credit."""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

from gateway.delivery.key_order import KeyOrder, pick
from gateway.delivery.session import Session
from storage.models import Delivery, StoredEntry, ValueFormat


@dataclass(eq=False)
class FakeSession:
    id: str


def sessions(*names: str) -> list[Session]:
    return [cast(Session, FakeSession(name)) for name in names]


def delivery(offset: int, key: str | None, count: int = 1) -> Delivery:
    return Delivery(StoredEntry(0, f"1-{offset}", b"v", ValueFormat.JSON,
                                None if key is None else key.encode(), {}, 1), count)


def offsets(page: list[Delivery]) -> list[str]:
    return [d.entry.offset for d in page]


def test_keys_later_messages_wait_for_in_flight_ack_in_order() -> None:
    order, members = KeyOrder(), sessions("a", "b")
    pages, waiting = order.route([delivery(n, "k") for n in range(3)], members,
                                 dict.fromkeys(members, 10))
    [(holder, page)] = pages.items()
    assert (offsets(page), waiting) == (["1-0"], [])
    assert order.settled(["1-0"]) == ([delivery(1, "k")], [])
    pages, _ = order.route([delivery(1, "k")], members, dict.fromkeys(members, 10))
    assert pages == {holder: [delivery(1, "k")]}  # the hash picks the same session again
    assert order.settled(["1-1"]) == ([delivery(2, "k")], [])
    order.route([delivery(2, "k")], members, dict.fromkeys(members, 10))
    assert order.settled(["1-2"]) == ([], [])
    assert (order.in_flight, order.held, order.owner) == ({}, {}, {})


def test_failed_message_parks_only_its_key_until_redelivered() -> None:
    order, members = KeyOrder(), sessions("a", "b", "c")
    order.route([delivery(0, "poison"), delivery(1, "other")], members,
                dict.fromkeys(members, 10))
    assert order.failed(["1-0"]) == [(b"poison", "1-0")]
    assert order.failed(["1-0"]) == []  # parked already
    assert list(order.parked) == [b"poison"]
    pages, _ = order.route([delivery(2, "poison"), delivery(0, "poison", 2), delivery(3, "fine")],
                           members, dict.fromkeys(members, 10))
    routed = sorted(o for page in pages.values() for o in offsets(page))
    assert routed == ["1-0", "1-3"]  # the redelivery and another key; the later poison waits
    assert offsets(list(order.held[b"poison"])) == ["1-2"]
    assert order.settled(["1-0"]) == ([delivery(2, "poison")], [b"poison"])
    assert order.parked == {}


def test_message_without_credit_waits_and_keyless_ones_go_on() -> None:
    order, members = KeyOrder(), sessions("a", "b")
    target = pick(b"k", members)
    other = next(s for s in members if s is not target)
    assert target is not None
    credit = {target: 0, other: 2}
    pages, waiting = order.route([delivery(0, "k"), delivery(1, None), delivery(2, None)],
                                 members, credit)
    assert offsets(waiting) == ["1-0"]
    assert offsets(pages[other]) == ["1-1", "1-2"]
    assert order.in_flight == {}


def test_leaving_session_gives_up_keys_and_untaken_pages() -> None:
    order, members = KeyOrder(), sessions("a", "b")
    pages, _ = order.route([delivery(0, "k")], members, dict.fromkeys(members, 5))
    [holder] = pages
    order.forget_session(holder)
    assert (order.owner, order.in_flight) == ({}, {b"k": "1-0"})
    rest = [s for s in members if s is not holder]
    again, _ = order.route([delivery(0, "k", 2)], rest, dict.fromkeys(rest, 5))
    assert list(again) == rest
    order.untaken(again[rest[0]])
    assert order.in_flight == {}


def test_rendezvous_moves_only_keys_of_a_joining_session() -> None:
    before, after = sessions("a", "b", "c"), sessions("a", "b", "c", "d")
    after[:3] = before
    keys = [b"k%d" % n for n in range(2000)]
    moved = [k for k in keys if pick(k, before) is not pick(k, after)]
    assert all(pick(k, after) is after[3] for k in moved)
    assert 300 < len(moved) < 700  # about a quarter


def route_one(order: KeyOrder, members: list[Session], message: Delivery) -> list[str]:
    """The offsets of ``message`` handed out now (none: it waits behind its key)."""
    pages, _ = order.route([message], members, dict.fromkeys(members, 10))
    return [offset for page in pages.values() for offset in offsets(page)]


def test_a_keys_entries_held_elsewhere_go_out_each_in_turn_before_what_is_read_later() -> None:
    order, members = KeyOrder(), sessions("a")
    for n in (1, 2):
        order.held_elsewhere(b"k", f"1-{n}")  # a gone owner's two entries of one key
    assert route_one(order, members, delivery(3, "k")) == []  # read after the takeover: waits
    assert order.settled(["1-1"]) == ([], [])  # the next fenced one's turn, not the read one's
    assert route_one(order, members, delivery(2, "k", count=2)) == ["1-2"]
    assert order.settled(["1-2"]) == ([delivery(3, "k")], [])


def test_an_earlier_entry_claimed_after_a_later_read_still_goes_first() -> None:
    order, members = KeyOrder(), sessions("a")
    order.held_elsewhere(b"k", "1-1")
    assert route_one(order, members, delivery(4, "k")) == []
    assert route_one(order, members, delivery(2, "k", count=2)) == []
    assert route_one(order, members, delivery(2, "k", count=3)) == []  # claimed once more
    assert order.held_total == 2
    released, _ = order.settled(["1-1"])
    assert released == [delivery(2, "k", count=3)]


def test_a_fenced_entry_settled_elsewhere_no_longer_holds_its_key() -> None:
    order, members = KeyOrder(), sessions("a")
    order.held_elsewhere(b"k", "1-1")
    order.held_elsewhere(b"k", "1-2")
    assert route_one(order, members, delivery(3, "k")) == []
    assert order.settled(["1-2"]) == ([], [])  # acked by its member before its turn here
    assert order.fence_of == {}
    assert order.settled(["1-1"]) == ([delivery(3, "k")], [])


def test_a_fenced_entry_back_here_before_its_turn_goes_out_at_its_turn() -> None:
    order, members = KeyOrder(), sessions("a")
    order.held_elsewhere(b"k", "1-1")
    order.held_elsewhere(b"k", "1-2")
    assert route_one(order, members, delivery(2, "k", count=2)) == []
    assert order.settled(["1-1"]) == ([delivery(2, "k", count=2)], [])
    assert route_one(order, members, delivery(2, "k", count=2)) == ["1-2"]
