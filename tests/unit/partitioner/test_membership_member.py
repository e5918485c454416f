"""GroupMember's own side (liveness on its own clock, confirmations) against an in-memory fake of
etcd."""

from __future__ import annotations

import asyncio
import itertools
import math
from collections.abc import AsyncIterator, Callable, Sequence
from typing import cast

import orjson
import pytest

from partitioner.errors import MembershipLost
from partitioner.etcd.connection import EtcdConnection
from partitioner.etcd.values import Guard, Snapshot, StoredValue, WatchEvent
from partitioner.group_state import GroupKeys, assignment_json
from partitioner.membership import GroupMember

PREFIX = "/t/"
KEYS = GroupKeys(PREFIX, "orders", "g")


class _FakeWatch:
    def __init__(self, queue: asyncio.Queue[WatchEvent]) -> None:
        self.queue = queue

    async def events(self) -> AsyncIterator[WatchEvent]:
        while True:
            yield await self.queue.get()

    async def cancel(self) -> None:
        return None


class FakeEtcd:
    """Just enough of EtcdConnection: keys with leases, guarded puts, prefix watches, scriptable
    keepalive."""

    def __init__(self) -> None:
        self.kv: dict[bytes, tuple[StoredValue, int]] = {}  # key -> (value, lease id)
        self.revision = 1
        self.leases: set[int] = set()
        self.lease_ids = itertools.count(100)
        self.keepalive_hangs = False
        self.watches: list[tuple[bytes, asyncio.Queue[WatchEvent]]] = []

    def _emit(self, event: WatchEvent) -> None:
        for prefix, queue in self.watches:
            if event.key.startswith(prefix):
                queue.put_nowait(event)

    async def grant_lease(self, ttl_s: float) -> tuple[int, int]:
        lease_id = next(self.lease_ids)
        self.leases.add(lease_id)
        return lease_id, math.ceil(ttl_s)

    async def keep_alive(self, lease_id: int) -> int:
        if self.keepalive_hangs:
            await asyncio.Event().wait()
        return 2 if lease_id in self.leases else 0

    async def revoke_lease(self, lease_id: int) -> None:
        self.leases.discard(lease_id)
        for key in [k for k, (_, lease) in self.kv.items() if lease == lease_id]:
            self.revision += 1
            del self.kv[key]
            self._emit(WatchEvent("delete", key, b"", self.revision))

    async def put(self, key: bytes, value: bytes, lease_id: int | None = None) -> int:
        self.revision += 1
        old = self.kv.get(key)
        created = old[0].create_revision if old else self.revision
        self.kv[key] = (StoredValue(key, value, created, self.revision), lease_id or 0)
        self._emit(WatchEvent("put", key, value, self.revision))
        return self.revision

    async def put_if(self, key: bytes, value: bytes, *, guards: Sequence[Guard],
                     lease_id: int | None = None) -> int | None:
        for guard in guards:
            stored = self.kv.get(guard.key)
            actual = 0 if stored is None else (stored[0].create_revision if guard.target == "create"
                                               else stored[0].mod_revision)
            if actual != guard.revision:
                return None
        return await self.put(key, value, lease_id)

    async def put_if_absent(
        self, key: bytes, value: bytes, lease_id: int | None = None
    ) -> int | None:
        return await self.put_if(key, value, guards=[Guard(key, 0)], lease_id=lease_id)

    async def get(self, key: bytes) -> StoredValue | None:
        stored = self.kv.get(key)
        return None if stored is None else stored[0]

    async def get_prefix(self, prefix: bytes) -> Snapshot:
        values = [self.kv[k][0] for k in sorted(self.kv) if k.startswith(prefix)]
        return Snapshot(values, self.revision)

    async def watch_prefix(self, prefix: bytes, start_revision: int) -> _FakeWatch:
        queue: asyncio.Queue[WatchEvent] = asyncio.Queue()
        self.watches.append((prefix, queue))
        return _FakeWatch(queue)

    def confirmed(self, member_id: str) -> int | None:
        stored = self.kv.get(KEYS.confirmed(member_id))
        return None if stored is None else int(orjson.loads(stored[0].value)["generation"])


def _member(fake: FakeEtcd, ttl_s: float = 0.3, partitions: int = 4) -> GroupMember:
    return GroupMember(
        cast(EtcdConnection, fake), topic="orders", group="g", member_id="m1", node="n1",
        partition_count=lambda: partitions, prefix=PREFIX, lease_ttl_s=ttl_s
    )


async def _eventually(condition: Callable[[], bool], timeout_s: float = 1.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not condition():
        assert loop.time() < deadline, "condition not met in time"
        await asyncio.sleep(0.005)


async def _occupy_coordinator(fake: FakeEtcd) -> None:
    """Someone else coordinates, so the test writes the assignments itself."""
    await fake.put(
        KEYS.coordinator, orjson.dumps({"member_id": "other", "lease_id": 1}), lease_id=1
    )


async def _write_assignment(fake: FakeEtcd, generation: int, partitions: tuple[int, ...]) -> None:
    await fake.put(KEYS.assignment, assignment_json(generation, {"m1": partitions, "x": ()}))


async def test_single_member_coordinates_and_gets_every_partition() -> None:
    fake = FakeEtcd()
    async with _member(fake, ttl_s=5.0) as member:
        assignment = await asyncio.wait_for(member.next_assignment(), 1.0)
        assert member.is_coordinator
        assert assignment.partitions == frozenset(range(4))
        await member.confirm(assignment.generation)
        await _eventually(lambda: fake.confirmed("m1") == assignment.generation)
    assert fake.kv == {} or set(fake.kv) == {KEYS.assignment}  # leased keys vanished on close


async def test_hanging_keepalives_lose_member_within_ttl_on_own_clock() -> None:
    fake = FakeEtcd()
    loop = asyncio.get_running_loop()
    async with _member(fake, ttl_s=0.3) as member:
        fake.keepalive_hangs = True  # like a paused etcd: calls neither succeed nor fail
        started = loop.time()
        await asyncio.wait_for(member.wait_lost(), 1.0)
        assert loop.time() - started <= 0.3 + 0.05
        assert not member.is_coordinator
        with pytest.raises(MembershipLost):
            await member.next_assignment()


async def test_member_is_lost_at_once_when_etcd_forgot_its_lease() -> None:
    fake = FakeEtcd()
    async with _member(fake, ttl_s=0.6) as member:
        fake.leases.clear()
        await asyncio.wait_for(member.wait_lost(), 0.5)


async def test_gains_confirm_at_once_but_revocations_wait_for_caller() -> None:
    fake = FakeEtcd()
    await _occupy_coordinator(fake)
    async with _member(fake, ttl_s=5.0) as member:
        await _write_assignment(fake, 1, (0, 1))
        first = await asyncio.wait_for(member.next_assignment(), 1.0)
        assert first.partitions == {0, 1}
        # it served nothing before: nothing to wait for
        await _eventually(lambda: fake.confirmed("m1") == 1)

        await _write_assignment(fake, 2, (0, 1, 2))
        await _eventually(lambda: fake.confirmed("m1") == 2)  # only gains: still truthful at once
        grown = await member.next_assignment()

        await _write_assignment(fake, 3, (0,))
        revoked = await member.next_assignment()
        await asyncio.sleep(0.05)
        assert fake.confirmed("m1") == 2  # the caller may still serve 1 and 2
        with pytest.raises(ValueError, match="not returned"):
            await member.confirm(99)
        await member.confirm(grown.generation)
        await asyncio.sleep(0.05)
        assert fake.confirmed("m1") == 2
        await member.confirm(revoked.generation)
        await _eventually(lambda: fake.confirmed("m1") == 3)


async def test_unchanged_set_is_not_returned_again_but_is_confirmed() -> None:
    fake = FakeEtcd()
    await _occupy_coordinator(fake)
    async with _member(fake, ttl_s=5.0) as member:
        await _write_assignment(fake, 1, (0,))
        first = await asyncio.wait_for(member.next_assignment(), 1.0)
        await member.confirm(first.generation)
        await _write_assignment(fake, 2, (0,))
        await _eventually(lambda: fake.confirmed("m1") == 2)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(member.next_assignment(), 0.1)


async def test_a_crashing_background_task_marks_the_member_lost() -> None:
    fake = FakeEtcd()

    def broken() -> int:
        raise RuntimeError("boom")

    async def crashing_get_prefix(prefix: bytes) -> Snapshot:
        raise RuntimeError("unexpected")

    fake.get_prefix = crashing_get_prefix  # type: ignore[method-assign]
    member = GroupMember(
        cast(EtcdConnection, fake), topic="orders", group="g", member_id="m1", node="n1",
        partition_count=broken, prefix=PREFIX, lease_ttl_s=5.0
    )
    async with member:
        await asyncio.wait_for(member.wait_lost(), 1.0)
    assert not fake.leases  # revoked so the partitions move at once


async def test_aclose_is_idempotent_and_revokes_the_lease() -> None:
    fake = FakeEtcd()
    member = _member(fake, ttl_s=5.0)
    await member.__aenter__()
    assert KEYS.member("m1") in fake.kv
    await member.aclose()
    await member.aclose()
    assert KEYS.member("m1") not in fake.kv
    assert member.lost
    with pytest.raises(MembershipLost):
        await member.next_assignment()
