"""Group policies in a real etcd: noted policies are written in the background, read per topic,
forgotten."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from partitioner.etcd.connection import EtcdConnection, open_etcd
from partitioner.group_policy import GroupPolicies, GroupPolicy, GroupPolicyKeys

pytestmark = pytest.mark.integration


async def written(policies: GroupPolicies) -> None:
    for _ in range(500):  # up to 10 s: after an outage the writer may be in its backoff
        if policies.unwritten == 0:
            return
        await asyncio.sleep(0.02)
    raise AssertionError("policies were never written")


async def test_noted_policies_are_written_and_read_per_topic(
    conn: EtcdConnection, prefix: str
) -> None:
    async with GroupPolicies(conn, prefix=prefix, cache_ttl_s=0) as policies:
        policies.note("orders", "billing", GroupPolicy(30_000, 5))
        policies.note("orders", "audit", GroupPolicy(1_000, 1))
        policies.note("payments", "billing", GroupPolicy(2_000, 3))
        await written(policies)
        assert await policies.for_topic("orders") == {"billing": GroupPolicy(30_000, 5),
                                                      "audit": GroupPolicy(1_000, 1)}
        policies.note("orders", "billing", GroupPolicy(60_000, 5))  # last writer wins
        await written(policies)
        assert (await policies.for_topic("orders"))["billing"] == GroupPolicy(60_000, 5)
        await policies.forget_topic("orders")
        assert await policies.for_topic("orders") == {}
        assert await policies.for_topic("payments") == {"billing": GroupPolicy(2_000, 3)}


async def test_an_unchanged_policy_is_not_written_again(conn: EtcdConnection, prefix: str) -> None:
    async with GroupPolicies(conn, prefix=prefix, cache_ttl_s=0) as policies:
        policies.note("t", "g", GroupPolicy(1_000, 2))
        await written(policies)
        before = await conn.get(GroupPolicyKeys(prefix).group("t", "g"))
        for _ in range(50):
            policies.note("t", "g", GroupPolicy(1_000, 2))
        assert policies.unwritten == 0
        after = await conn.get(GroupPolicyKeys(prefix).group("t", "g"))
        assert before is not None
        assert after is not None
        assert before.mod_revision == after.mod_revision


async def test_a_malformed_stored_policy_is_ignored(conn: EtcdConnection, prefix: str) -> None:
    await conn.put(GroupPolicyKeys(prefix).group("t", "broken"), b"{not json")
    await conn.put(
        GroupPolicyKeys(prefix).group("t", "zero"), b'{"ack_timeout_ms": 0, "max_deliveries": 1}'
    )
    async with GroupPolicies(conn, prefix=prefix) as policies:
        assert await policies.for_topic("t") == {}


async def test_policies_noted_while_etcd_down_are_written_later(
    etcd_server: Any, prefix: str
) -> None:
    async with open_etcd([etcd_server.endpoint], timeout_s=0.5) as conn, \
            GroupPolicies(conn, prefix=prefix, cache_ttl_s=0) as policies:
        etcd_server.pause()
        try:
            policies.note("t", "g", GroupPolicy(1_000, 2))
            await asyncio.sleep(1.0)
            assert policies.unwritten == 1
        finally:
            etcd_server.resume()
        await written(policies)
        assert await policies.for_topic("t") == {"g": GroupPolicy(1_000, 2)}
