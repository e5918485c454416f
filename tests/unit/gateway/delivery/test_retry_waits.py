"""A group's retry backoff: the wait grows with the delivery count, is jittered the same way for
every reader, and sets a nacked entry's idle time so it falls due when asked."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from multidict import MultiDict

from gateway.delivery.params import parse_retry_backoff, parse_subscribe_params
from gateway.delivery.retry_policy import RELEASE_IDLE_MS, due_again, nack_idles
from gateway.errors import Problem
from partitioner.group_policy import NO_BACKOFF, GroupPolicy, RetryBackoff
from storage.models import PendingEntry


def test_wait_doubles_per_delivery_up_to_maximum_with_jitter() -> None:
    backoff = RetryBackoff(100, 2.0, 1000)
    for count, base in zip(range(1, 8), (100, 200, 400, 800, 1000, 1000, 1000), strict=True):
        waits = {backoff.delay_ms(count, f"{n}-0") for n in range(50)}
        assert all(base / 2 - 1 <= wait <= base for wait in waits), (count, waits)
        assert len(waits) > 10  # jittered, not one value
    assert backoff.delay_ms(3, "7-1") == backoff.delay_ms(3, "7-1")
    assert NO_BACKOFF.delay_ms(9, "1-0") == 0


@given(st.integers(1, 10**9), st.integers(0, 3_600_000), st.floats(1, 100))
def test_wait_never_exceeds_maximum_however_many_deliveries(
        count: int, initial: int, multiplier: float) -> None:
    backoff = RetryBackoff(initial, multiplier, 3_600_000)
    assert 0 <= backoff.delay_ms(count, "1-0") <= max(initial, 3_600_000)


def test_policy_keeps_backoff_in_etcd_and_reads_older_documents() -> None:
    policy = GroupPolicy(30_000, 5, RetryBackoff(250, 3.0, 9_000))
    assert GroupPolicy.decode(policy.encode()) == policy
    assert GroupPolicy.decode(b'{"ack_timeout_ms": 1000, "max_deliveries": 2}') == GroupPolicy(
        1000, 2)


def test_subscriptions_and_pulls_name_backoff_or_get_422() -> None:
    query = MultiDict({"topic": "t", "group": "g", "retry_backoff_ms": "500",
                       "retry_backoff_multiplier": "1.5", "retry_backoff_max_ms": "8000"})
    assert parse_subscribe_params(query).retry_backoff == RetryBackoff(500, 1.5, 8000)
    assert parse_retry_backoff({"retry_backoff_ms": 300}) == RetryBackoff(300, 2.0, 300_000)
    assert parse_retry_backoff({}) == NO_BACKOFF
    for name, bad in (("retry_backoff_ms", "-1"), ("retry_backoff_multiplier", "0.5"),
                      ("retry_backoff_max_ms", "nan"), ("retry_backoff_ms", True),
                      ("retry_backoff_multiplier", "x")):
        with pytest.raises(Problem) as excinfo:
            parse_retry_backoff({name: bad})
        assert (excinfo.value.status, excinfo.value.pointer) == (422, f"/{name}")


class PendingStore:
    """XPENDING rows of one partition."""

    def __init__(self, rows: list[PendingEntry]) -> None:
        self.rows = rows

    async def expired(self, topic: str, partition: int, group: str, *, min_idle_ms: int,
                      count: int, after: str | None = None,
                      consumer: str | None = None) -> list[PendingEntry]:
        return [row for row in self.rows if row.idle_ms >= min_idle_ms][:count]


async def test_nack_falls_due_after_backoff_or_exactly_its_delay() -> None:
    store: Any = PendingStore([PendingEntry(0, "5-0", "c", 10, 3)])
    backoff = RetryBackoff(1000, 2.0, 60_000)
    assert await nack_idles(store, "t", 0, "g", ["5-0"], 0, 30_000, NO_BACKOFF) == {
        RELEASE_IDLE_MS: ["5-0"]}
    assert await nack_idles(store, "t", 0, "g", ["5-0"], 700, 30_000, NO_BACKOFF) == {
        29_300: ["5-0"]}
    assert await nack_idles(store, "t", 0, "g", ["5-0"], 0, 30_000, backoff) == {30_000: ["5-0"]}
    waited = backoff.delay_ms(3, "5-0")
    assert await nack_idles(store, "t", 0, "g", ["5-0"], 700, 30_000, backoff) == {
        30_000 + waited - 700: ["5-0"]}


async def test_entry_is_due_again_after_ack_timeout_and_backoff() -> None:
    backoff = RetryBackoff(1000, 2.0, 60_000)
    wait = backoff.delay_ms(1, "1-0")
    rows = [PendingEntry(0, "1-0", "c", 30_000 + wait - 1, 1),
            PendingEntry(0, "2-0", "c", RELEASE_IDLE_MS, 4)]
    store: Any = PendingStore(rows)
    assert [e.offset for e in await due_again(store, "t", 0, "g", 30_000, backoff, 10)] == ["2-0"]
    rows[0] = PendingEntry(0, "1-0", "c", 30_000 + wait, 1)
    assert [e.offset for e in await due_again(store, "t", 0, "g", 30_000, backoff, 10)] == [
        "1-0", "2-0"]
    assert len(await due_again(store, "t", 0, "g", 30_000, NO_BACKOFF, 10)) == 2
