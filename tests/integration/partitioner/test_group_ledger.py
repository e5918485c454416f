"""The group ledger in a real etcd: a cap on groups per principal that holds across replicas."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from partitioner.etcd.connection import EtcdConnection, open_etcd
from partitioner.group_ledger import GroupLedger

pytestmark = pytest.mark.integration


async def test_claims_stop_at_the_cap_and_a_held_group_is_free(
    conn: EtcdConnection, prefix: str
) -> None:
    ledger = GroupLedger(conn, prefix)
    assert [await ledger.claim("alice", "orders", f"g{i}", 3) for i in range(5)] == (
        [True] * 3 + [False] * 2
    )
    assert await ledger.claim("alice", "orders", "g0", 3), "joining a group it holds costs nothing"
    assert await ledger.claim("bob", "orders", "g4", 3), "each principal has its own count"
    assert await ledger.held("alice") == [("orders", "g0"), ("orders", "g1"), ("orders", "g2")]


async def test_release_and_vanished_groups_make_room(conn: EtcdConnection, prefix: str) -> None:
    ledger = GroupLedger(conn, prefix)
    for group in ("a", "b"):
        assert await ledger.claim("svc/with/slashes", "orders", group, 2)
    await ledger.release("svc/with/slashes", "orders", "a")
    assert await ledger.claim("svc/with/slashes", "orders", "c", 2)
    assert not await ledger.claim("svc/with/slashes", "orders", "d", 2)
    assert await ledger.claim(
        "svc/with/slashes", "orders", "d", 2, still_exists=lambda pair: pair[1] != "b"
    )
    assert await ledger.held("svc/with/slashes") == [("orders", "c"), ("orders", "d")]


async def test_concurrent_claims_across_replicas_never_pass_cap(
    etcd_server: Any, prefix: str
) -> None:
    async with open_etcd([etcd_server.endpoint], timeout_s=2.0) as one, \
            open_etcd([etcd_server.endpoint], timeout_s=2.0) as two:
        ledgers = [GroupLedger(one, prefix), GroupLedger(two, prefix)]
        results = await asyncio.gather(
            *(ledgers[i % 2].claim("mallory", "orders", f"g{i}", 5) for i in range(16)),
            return_exceptions=True,
        )
        held = await ledgers[0].held("mallory")
    granted = [r for r in results if r is True]
    assert len(granted) <= 5
    assert len(held) == len(granted)
    print(
        f"\nconcurrent group claims on two replicas, cap 5: {len(results)} tried, {len(granted)} "
        f"granted, {sum(r is False for r in results)} refused, "
        f"{sum(isinstance(r, Exception) for r in results)} retried out"
    )
