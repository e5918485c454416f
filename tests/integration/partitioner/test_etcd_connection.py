"""EtcdConnection against a real etcd (the session fixture ``etcd_server``): opening, failing over
between endpoints, leases, guarded writes and watches."""

from __future__ import annotations

import asyncio
import os
import uuid
from typing import Any

import pytest

from partitioner.errors import CoordinationUnavailable, HistoryCompacted
from partitioner.etcd.connection import EtcdConnection, open_etcd
from partitioner.etcd.values import Guard
from streamgate_devstack.etcd import EtcdConfig, EtcdProcess

pytestmark = pytest.mark.integration

LEASE_TTL_S = 2.0


async def _eventually(condition: Any, timeout_s: float = 2.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "condition not met in time"
        await asyncio.sleep(0.02)


async def test_open_fails_coordination_unavailable_without_etcd() -> None:
    with pytest.raises(CoordinationUnavailable):
        async with open_etcd(["127.0.0.1:1"], timeout_s=0.5):
            pass


async def test_open_skips_unreachable_endpoints(etcd_server: Any) -> None:
    async with open_etcd(["127.0.0.1:1", etcd_server.endpoint], timeout_s=0.5) as connection:
        await connection.ping()
        assert connection.endpoint == etcd_server.endpoint


async def test_silent_member_is_replaced_by_next_endpoint(etcd_server: Any, tmp_path: Any) -> None:
    with EtcdProcess(EtcdConfig(data_dir=tmp_path / "first")) as first:
        connection = open_etcd([first.endpoint, etcd_server.endpoint], timeout_s=1.0)
        await connection.open()
        assert connection.endpoint == first.endpoint
        watch = await connection.watch_prefix(b"/failover-test/", 1)
    try:
        # the member in use is gone: the next call fails, and the connection moves on
        with pytest.raises(CoordinationUnavailable):
            await connection.put(b"/failover-test/a", b"1")
        await _eventually(lambda: connection.endpoint == etcd_server.endpoint, timeout_s=10)
        assert await connection.put(b"/failover-test/a", b"1") > 0
        # the old member's watch has ended, so its owner re-watches through the new member
        with pytest.raises(CoordinationUnavailable):
            async for _ in watch.events():
                pass
    finally:
        await connection.aclose()


async def test_failed_call_on_healthy_member_keeps_endpoint(etcd_server: Any) -> None:
    async with open_etcd([etcd_server.endpoint, "127.0.0.1:1"], timeout_s=1.0) as connection:
        with pytest.raises(CoordinationUnavailable):
            await connection.revoke_lease(12345)  # no such lease
        await asyncio.sleep(0.5)
        assert connection.endpoint == etcd_server.endpoint
        await connection.ping()


async def test_closed_connection_raises_coordination_unavailable(etcd_server: Any) -> None:
    connection = open_etcd([etcd_server.endpoint], timeout_s=1.0)
    async with connection:
        await connection.ping()
    await connection.aclose()
    with pytest.raises(CoordinationUnavailable):
        await connection.ping()


async def test_watch_from_compacted_revision_raises_history_compacted(
        etcd_server: Any, conn: EtcdConnection, prefix: str) -> None:
    first = await conn.put(f"{prefix}topics/a".encode(), b"1")
    latest = await conn.put(f"{prefix}topics/b".encode(), b"1")
    etcdctl = await asyncio.create_subprocess_exec(
        "etcdctl", "--endpoints", etcd_server.endpoint, "compact", str(latest),
        env={**os.environ, "ETCDCTL_API": "3"}, stdout=asyncio.subprocess.DEVNULL)
    assert await etcdctl.wait() == 0
    watch = await conn.watch_prefix(f"{prefix}topics/".encode(), first)
    try:
        with pytest.raises(HistoryCompacted):
            async for _ in watch.events():
                pass
    finally:
        await watch.cancel()


async def test_lease_primitives_and_guarded_put(etcd_server: Any) -> None:
    key = f"/streamgate-test-{uuid.uuid4().hex}/k".encode()
    conn: EtcdConnection
    async with open_etcd([etcd_server.endpoint], timeout_s=2.0) as conn:
        lease_id, granted_s = await conn.grant_lease(LEASE_TTL_S)
        assert granted_s >= LEASE_TTL_S
        created = await conn.put_if_absent(key, b"1", lease_id=lease_id)
        assert created is not None
        assert await conn.put_if_absent(key, b"2") is None
        assert (
            await conn.put_if(key, b"3", guards=[Guard(key, created + 100)], lease_id=lease_id)
            is None
        )
        guards = [Guard(key, created), Guard(key, created, "mod")]
        assert await conn.put_if(key, b"3", guards=guards, lease_id=lease_id) is not None
        assert await conn.keep_alive(lease_id) > 0

        await conn.revoke_lease(lease_id)
        assert await conn.get(key) is None
        assert await conn.keep_alive(lease_id) == 0


async def test_watch_after_timed_out_create_follows_its_own_prefix(etcd_server: Any) -> None:
    """aetcd hands a timed-out create's late reply to the next watch; the connection must prevent
    that."""
    root = f"/streamgate-test-{uuid.uuid4().hex}/"
    async with open_etcd([etcd_server.endpoint], timeout_s=1.0) as conn:
        start = await conn.put(f"{root}start".encode(), b"") + 1
        etcd_server.pause()
        try:
            await asyncio.sleep(0.1)  # SIGSTOP is delivered asynchronously
            with pytest.raises(CoordinationUnavailable):
                await conn.watch_prefix(f"{root}a/".encode(), start)
            second = asyncio.create_task(conn.watch_prefix(f"{root}b/".encode(), start))
            await asyncio.sleep(0.2)
        finally:
            etcd_server.resume()
        watch = await second
        await conn.put(f"{root}a/x".encode(), b"1")
        await conn.put(f"{root}b/y".encode(), b"2")
        events = watch.events()
        event = await asyncio.wait_for(anext(events), 2.0)
        await watch.cancel()
    assert event.key == f"{root}b/y".encode()
