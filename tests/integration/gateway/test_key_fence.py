"""A key-ordered reader's hand-over fence on the real cluster: keys whose message a member on
another gateway still holds wait until that message is acked; released entries, other keys and
what this gateway's own consumer holds go on in their keys' turn, before later reads."""

from __future__ import annotations

import asyncio
import uuid
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, cast

import pytest

from gateway.delivery.group_config import ReaderScope
from gateway.delivery.key_dispatch import KeyedDispatch
from gateway.delivery.key_fence import held_elsewhere
from gateway.delivery.retry_policy import RELEASE_IDLE_MS
from gateway.delivery.session import Session
from gateway.delivery.settler import Settler
from gateway.observe.metrics import GatewayMetrics
from storage.models import AppendOptions, Delivery, Record, first_deliveries
from storage.redis_store import RedisStreamStore
from storage.settings import RedisStoreSettings

GROUP = "workers"
ACK_TIMEOUT_MS = 60_000


@dataclass(eq=False)
class PageTaker:
    """What key-ordered dispatch uses of a session: credit, and pages taken whole."""

    id: str
    credit: int = 100
    keys: list[bytes | None] = field(default_factory=list)

    @property
    def has_credit(self) -> bool:
        return self.credit > 0

    def offer_page(self, page: list[Delivery]) -> int:
        self.keys.extend(d.entry.key for d in page)
        self.credit -= len(page)
        return len(page)


@pytest.fixture
async def store(redis_cluster: Any) -> AsyncIterator[RedisStreamStore]:
    settings = RedisStoreSettings(startup_nodes=list(redis_cluster.startup_nodes))
    async with RedisStreamStore(settings) as opened:
        yield opened


async def test_keys_a_member_holds_wait_for_its_ack_and_released_ones_go_on(
        store: RedisStreamStore) -> None:
    topic, groups = f"fence-{uuid.uuid4().hex[:8]}", store.groups
    keys = [b"held", b"free", b"held", None, b"other"]
    results = await store.append(topic, [Record(0, b"v", key=key) for key in keys],
                                 AppendOptions())
    held, free, later, keyless, _ = (r.offset for r in results)
    await groups.ensure_group(topic, 0, GROUP, "earliest")
    # the old gateway read everything; its member holds "held" and "other", the rest went back
    await groups.read_new(topic, 0, GROUP, "old-gateway", count=10, block_ms=0)
    await groups.set_idle(topic, 0, GROUP, "old-gateway", [free, later, keyless],
                          RELEASE_IDLE_MS)

    scope = ReaderScope(topic, 0, GROUP, "new-gateway", (topic, GROUP, "key_shared"))
    backlog: deque[Delivery] = deque()
    credit = asyncio.Event()
    keyed = KeyedDispatch(groups, scope, backlog, credit, Settler(groups, scope),
                          GatewayMetrics.create())
    await keyed.start()
    pending = await groups.expired(topic, 0, GROUP, min_idle_ms=0, count=10)
    taken = await groups.claim(topic, 0, GROUP, "new-gateway", [  # the reader's take-over
        p for p in pending if not held_elsewhere(p, scope, ACK_TIMEOUT_MS)], min_idle_ms=0)
    assert [d.entry.offset for d in taken] == [free, later, keyless]
    session = PageTaker("s")
    backlog.extend(taken)
    keyed.dispatch([cast(Session, session)])
    assert session.keys == [b"free", None]  # "held" waits behind the member's message

    credit.clear()
    assert await groups.ack(topic, 0, GROUP, [held]) == 1  # the member acks on the old gateway
    await asyncio.wait_for(credit.wait(), 5)
    keyed.dispatch([cast(Session, session)])
    assert session.keys == [b"free", None, b"held"]
    assert [d.entry.offset for d in backlog] == []
    assert keyed.in_flight  # "other" is still in its member's hands
    assert await keyed.aclose() == []
    await groups.delete_group(topic, 0, GROUP)


async def test_what_the_gateways_own_consumer_holds_goes_out_first_in_its_keys_turn(
        store: RedisStreamStore) -> None:
    topic, groups = f"fence-{uuid.uuid4().hex[:8]}", store.groups
    first, = await store.append(topic, [Record(0, b"v", key=b"k")], AppendOptions())
    await groups.ensure_group(topic, 0, GROUP, "earliest")
    # read by this gateway's consumer (a reader of it that stopped): no session here holds it
    await groups.read_new(topic, 0, GROUP, "gateway", count=10, block_ms=0)
    second, = await store.append(topic, [Record(0, b"v", key=b"k")], AppendOptions())
    scope = ReaderScope(topic, 0, GROUP, "gateway", (topic, GROUP, "key_shared"))
    backlog: deque[Delivery] = deque()
    keyed = KeyedDispatch(groups, scope, backlog, asyncio.Event(), Settler(groups, scope),
                          GatewayMetrics.create())
    await keyed.start()
    assert keyed.in_flight  # the key waits for its pending entry, whoever holds it
    pending = await groups.expired(topic, 0, GROUP, min_idle_ms=0, count=10)
    assert [held_elsewhere(p, scope, ACK_TIMEOUT_MS) for p in pending] == [False]
    taken = await groups.claim(topic, 0, GROUP, "gateway", pending, min_idle_ms=0)
    read = await groups.read_new(topic, 0, GROUP, "gateway", count=10, block_ms=0)
    session = PageTaker("s")
    backlog.extend([*first_deliveries(read), *taken])  # a new read before the claimed one
    keyed.dispatch([cast(Session, session)])
    assert [d.entry.offset for d in taken] == [first.offset]
    assert session.keys == [b"k"]  # the claimed entry, in its turn; the read one waits
    assert keyed.held_here() == {second.offset}
    await keyed.aclose()
    await groups.delete_group(topic, 0, GROUP)
