"""The in-flight ledger's arithmetic: charges by ack deadline, credits on any gateway, deliveries
falling due by themselves, the room under the cap, and holders woken or told."""

from __future__ import annotations

import pytest

from gateway.auth.quotas import QuotaSubject
from gateway.observe.metrics import GatewayMetrics
from gateway.quotas import in_flight
from gateway.quotas.in_flight import InFlightQuota, InFlightWindow

START_MS = 1_700_000_000_000


class Clock:
    def __init__(self) -> None:
        self.ms = START_MS

    def __call__(self) -> int:
        return self.ms


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(in_flight, "now_ms", fake)
    return fake


class Board:
    """Redis's hash per subject, in memory: node -> count, no staleness."""

    def __init__(self) -> None:
        self.counts: dict[str, dict[str, int]] = {}

    async def share(self, subject: str, node_id: str, count: int, stale_ms: int) -> int:
        fields = self.counts.setdefault(subject, {})
        fields[node_id] = count
        return sum(n for node, n in fields.items() if node != node_id)


class Member:
    def __init__(self) -> None:
        self.woken = 0
        self.told: list[tuple[int, int]] = []

    def wake_credit_waiters(self) -> None:
        self.woken += 1

    def quota_held(self, limit: int, used: int) -> None:
        self.told.append((limit, used))


def test_a_settled_delivery_gives_its_room_back(clock: Clock) -> None:
    window = InFlightWindow("principal:p", 5)
    window.charge(3, START_MS + 30_000)
    assert (window.own, window.room) == (3, 2)
    window.credit(2, START_MS + 30_000)
    assert (window.own, window.room) == (1, 4)


def test_a_delivery_past_its_deadline_leaves_the_count_by_itself(clock: Clock) -> None:
    window = InFlightWindow("principal:p", 5)
    window.charge(2, START_MS + 1_500)
    window.charge(1, START_MS + 10_000)
    clock.ms = START_MS + 2_000
    assert window.own == 1
    window.credit(2, START_MS + 1_500)  # a late ack of what already fell due changes nothing
    assert window.own == 1
    assert window.soonest_deadline_ms() == START_MS + 10_000


def test_a_credit_for_what_another_gateway_charged_keeps_the_sum_right(clock: Clock) -> None:
    charging, acking = InFlightWindow("tenant:t", 4), InFlightWindow("tenant:t", 4)
    charging.charge(4, START_MS + 5_000)
    acking.credit(3, START_MS + 5_000)
    assert acking.own == -3
    charging.others, acking.others = acking.own, charging.own
    assert charging.room == acking.room == 3


def test_an_extended_delivery_counts_until_its_new_deadline(clock: Clock) -> None:
    window = InFlightWindow("principal:p", 5)
    window.charge(1, START_MS + 1_000)
    window.move(1, START_MS + 1_000, START_MS + 8_000)
    clock.ms = START_MS + 3_000
    assert window.own == 1
    clock.ms = START_MS + 8_000
    assert window.own == 0


def test_the_other_gateways_counts_take_room_and_a_refusal_waits_for_the_soonest_deadline(
        clock: Clock) -> None:
    window = InFlightWindow("principal:p", 5)
    window.others = 3
    window.charge(2, START_MS + 4_200)
    assert window.room == 0
    refused = window.refused(retry_floor_s=1.0)
    assert (refused.kind, refused.limit, refused.used) == ("in_flight_messages", 5, 5)
    assert refused.retry_after_s == 5.0  # the deadline's whole second
    window.others = 10
    assert window.room == 0  # never below zero


def test_holders_are_told_once_when_the_window_fills_and_woken_when_room_comes_back(
        clock: Clock) -> None:
    window = InFlightWindow("principal:p", 2)
    member = Member()
    window.join(member)
    window.charge(2, START_MS + 5_000)
    window.charge(0, START_MS + 5_000)
    assert member.told == [(2, 2)]
    late = Member()
    window.join(late)  # joining a full window: told at once
    assert late.told == [(2, 2)]
    window.credit(1, START_MS + 5_000)
    assert (member.woken, late.woken) == (1, 1)
    window.charge(1, START_MS + 5_000)
    assert member.told == [(2, 2), (2, 2)]


async def test_gateways_see_each_others_counts_after_a_sync_and_wake_their_holders(
        clock: Clock) -> None:
    board, metrics = Board(), GatewayMetrics.create()
    subject = QuotaSubject("tenant:t", None, 4)
    gateway_a = InFlightQuota(board, "a", 0.1, metrics)
    gateway_b = InFlightQuota(board, "b", 0.1, GatewayMetrics.create())
    window_a = await gateway_a.known_window(subject)
    window_b = await gateway_b.known_window(subject)
    assert window_a is not None
    assert window_b is not None
    member = Member()
    window_b.join(member)
    window_a.charge(4, START_MS + 60_000)
    await gateway_a.sync()
    await gateway_b.sync()
    assert window_b.room == 0
    assert member.told == [(4, 4)]
    window_b.credit(2, START_MS + 60_000)  # receipts acked through b
    await gateway_b.sync()
    await gateway_a.sync()
    assert window_a.room == window_b.room == 2
    assert member.woken >= 1
    assert metrics.quota_used.labels("tenant:t", "in_flight_messages")._value.get() == 2


def test_a_subject_without_an_in_flight_cap_has_no_window() -> None:
    quota = InFlightQuota(Board(), "a", 1.0, GatewayMetrics.create())
    assert quota.window_for(QuotaSubject("principal:p", 10, None)) is None




def test_a_receipt_settled_twice_gives_its_room_back_once(clock: Clock) -> None:
    window = InFlightWindow("principal:p", 2)
    window.charge(2, START_MS + 5_000)
    window.credit_receipts([("r1", START_MS + 5_000)])
    window.credit_receipts([("r1", START_MS + 5_000), ("r2", START_MS + 5_000)])
    window.credit_receipts([("r2", START_MS + 5_000)])
    assert window.own == 0
    window.charge(2, START_MS + 5_000)
    window.credit_receipts([("r1", START_MS + 5_000)])
    assert window.room == 0
