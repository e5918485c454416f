"""A pull that loses a partition's backend part-way returns what it already read or claimed (those
entries are pending for it), and answers unavailable only when it holds nothing."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from gateway.delivery.pull import PULL_CONSUMER, Puller, PullRequest
from partitioner.errors import CoordinationUnavailable
from storage.errors import StorageUnavailable
from storage.models import Delivery, PendingEntry, StoredEntry, ValueFormat

TOPIC, GROUP = "orders", "billing"


def entry(partition: int, offset: str, headers: dict[str, str] | None = None) -> StoredEntry:
    return StoredEntry(partition, offset, b"1", ValueFormat.JSON, None, headers or {}, 1000)


class FailingPartitionStore:
    """Every partition holds one new entry and one entry due again; ``failing`` (a method name)
    fails on partition ``down``. Records what was claimed and read."""

    def __init__(self, down: int, failing: str,
                 error: Exception | None = None) -> None:
        self.down, self.failing = down, failing
        self.error = error or StorageUnavailable("primary gone")
        self.taken: list[tuple[int, str]] = []

    def _check(self, call: str, partition: int) -> None:
        if call == self.failing and partition == self.down:
            raise self.error

    async def ensure_group(self, topic: str, partition: int, group: str, start: str) -> None:
        return None

    async def read_new(self, topic: str, partition: int, group: str, consumer: str, *, count: int,
                       block_ms: int, until: str | None = None, last_read: str | None = None,
                       lost: bool = False) -> list[StoredEntry]:
        self._check("read_new", partition)
        self.taken.append((partition, f"{2000 + partition}-0"))
        return [entry(partition, f"{2000 + partition}-0")]

    async def expired(self, topic: str, partition: int, group: str, *, min_idle_ms: int, count: int,
                      after: str | None = None, consumer: str | None = None) -> list[PendingEntry]:
        self._check("expired", partition)
        return [PendingEntry(partition, f"{1000 + partition}-0", PULL_CONSUMER, min_idle_ms + 1, 1)]

    async def claim(self, topic: str, partition: int, group: str, consumer: str,
                    pending: Sequence[PendingEntry], *, min_idle_ms: int) -> list[Delivery]:
        self._check("claim", partition)
        self.taken += [(partition, p.offset) for p in pending]
        return [Delivery(entry(partition, p.offset), 2) for p in pending]


async def no_dead_letters(topic: str, group: str, delivery: Delivery, reason: str) -> None:
    raise AssertionError("no dead letters here")


def pull_request(wait_ms: int = 0) -> PullRequest:
    return PullRequest(topic=TOPIC, max_messages=100, wait_ms=wait_ms, ack_timeout_ms=1000,
                       max_deliveries=5)


@pytest.mark.parametrize("failing", ["expired", "claim", "read_new"])
@pytest.mark.parametrize("error", [StorageUnavailable("primary gone"),
                                   CoordinationUnavailable("etcd gone")], ids=["redis", "etcd"])
async def test_partition_failing_mid_pull_keeps_what_was_read(
        failing: str, error: Exception) -> None:
    store = FailingPartitionStore(down=2, failing=failing, error=error)
    puller = Puller(store, no_dead_letters)  # type: ignore[arg-type]
    deliveries = await puller.pull(GROUP, pull_request(wait_ms=5_000), partitions=4)
    reclaimed = [(p, f"{1000 + p}-0") for p in (range(4) if failing == "read_new" else (0, 1))]
    read = [(0, "2000-0"), (1, "2001-0")] if failing == "read_new" else []
    # the first pull starts on partition 0: everything before partition 2, and nothing after it
    assert [(d.entry.partition, d.entry.offset) for d in deliveries] == reclaimed + read
    assert store.taken == reclaimed + read


async def test_empty_pull_on_backend_failure_is_unavailable() -> None:
    store = FailingPartitionStore(down=0, failing="expired")
    puller = Puller(store, no_dead_letters)  # type: ignore[arg-type]
    with pytest.raises(StorageUnavailable):
        await puller.pull(GROUP, pull_request(), partitions=1)
