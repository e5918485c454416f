"""Group filter bindings in a real etcd: one filter per group across replicas, kept while the topic
lives, replaced for a new topic of the same name."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from partitioner.etcd.connection import EtcdConnection, open_etcd
from partitioner.group_binding import GroupBindings

pytestmark = pytest.mark.integration


async def test_racing_joins_under_two_filters_bind_the_group_to_one(
    conn: EtcdConnection, etcd_server: Any, prefix: str
) -> None:
    async with open_etcd([etcd_server.endpoint], timeout_s=2.0) as second_replica:
        joins = [(GroupBindings(replica, prefix), {"tenant": tenant})
                 for replica, tenant in [(conn, "a"), (second_replica, "b")] * 4]
        results = await asyncio.gather(*(bindings.bind("orders", 1, "g", headers)
                                         for bindings, headers in joins))
    assert len({tuple(r.items()) for r in results}) == 1
    assert await GroupBindings(conn, prefix).bound("orders", 1, "g") == results[0]


async def test_a_binding_outlives_its_members_but_not_its_topic(
    conn: EtcdConnection, prefix: str
) -> None:
    bindings = GroupBindings(conn, prefix)
    assert await bindings.bound("orders", 1, "g") is None
    assert await bindings.bind("orders", 1, "g", {}) == {}
    assert await GroupBindings(conn, prefix).bind("orders", 1, "g", {"tenant": "a"}) == {}
    # a topic deleted and created again under the same name starts unbound
    assert await GroupBindings(conn, prefix).bind("orders", 2, "g", {"tenant": "a"}) == {
        "tenant": "a"}
    await bindings.forget_topic("orders")
    assert await bindings.bound("orders", 2, "g") is None
