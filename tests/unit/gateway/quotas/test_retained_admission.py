"""RetainedQuota against an in-memory ledger: a first read before the first answer, this gateway's
unflushed charges counted, charges kept through a failed flush, Retry-After from the oldest
bucket."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import pytest

from gateway.auth.errors import QuotaExceeded
from gateway.auth.quotas import QuotaSubject
from gateway.observe.metrics import GatewayMetrics
from gateway.quotas.buckets import BUCKET_MS, bucket_end_ms, field_of
from gateway.quotas.retained import RetainedQuota
from partitioner.topics import TopicMetadata
from storage.errors import StorageUnavailable
from storage.models import PartitionInfo

NOW_S = 1_000_000.0
TOPIC = TopicMetadata("t", 1, retention_ms=10 * BUCKET_MS, max_length=None, created_at_ms=1,
                      owner="o")
SOLO = QuotaSubject("principal:solo", 100, None)


class MemoryLedger:
    def __init__(self) -> None:
        self.hashes: dict[str, dict[str, int]] = {}
        self.down = False

    async def charge(self, charges: Mapping[str, Mapping[str, int]]) -> None:
        if self.down:
            raise StorageUnavailable("down")
        for subject, fields in charges.items():
            mine = self.hashes.setdefault(subject, {})
            for name, n in fields.items():
                mine[name] = mine.get(name, 0) + n

    async def buckets(self, subjects: Iterable[str]) -> dict[str, dict[str, int]]:
        return {s: dict(self.hashes.get(s, {})) for s in subjects}

    async def forget(self, counted: Mapping[str, Mapping[str, int]]) -> None:
        for subject, fields in counted.items():
            for name in fields:
                self.hashes.get(subject, {}).pop(name, None)


async def lookup(name: str) -> TopicMetadata | None:
    return TOPIC if name == "t" else None


async def infos(topic: str, partitions: int) -> list[PartitionInfo]:
    return [PartitionInfo(0, 1, f"{int(NOW_S * 1000) - 5 * BUCKET_MS}-0", "x-0")]


def quota(ledger: MemoryLedger) -> RetainedQuota:
    return RetainedQuota(ledger, lookup, infos, GatewayMetrics.create(), 1.0, clock=lambda: NOW_S)


async def test_a_subject_is_read_from_the_ledger_before_its_first_answer() -> None:
    ledger = MemoryLedger()
    ledger.hashes[SOLO.name] = {field_of("t", 1, bucket_end_ms(int(NOW_S * 1000))): 90}
    with pytest.raises(QuotaExceeded) as refused:
        await quota(ledger).admit(SOLO, TOPIC, 11)
    assert (refused.value.used, refused.value.limit) == (90, 100)
    assert 1 <= refused.value.retry_after_s <= 60


async def test_unflushed_charges_count_and_survive_a_failed_flush() -> None:
    ledger = MemoryLedger()
    retained = quota(ledger)
    await retained.admit(SOLO, TOPIC, 60)
    retained.charge(SOLO, TOPIC, 60)
    with pytest.raises(QuotaExceeded):
        await retained.admit(SOLO, TOPIC, 41)
    ledger.down = True
    with pytest.raises(StorageUnavailable):
        await retained.sync()
    ledger.down = False
    await retained.sync()
    assert sum(ledger.hashes[SOLO.name].values()) == 60
    await retained.admit(SOLO, TOPIC, 40)


async def test_buckets_of_a_deleted_topic_are_dropped_and_free_the_room() -> None:
    ledger = MemoryLedger()
    ledger.hashes[SOLO.name] = {field_of("gone", 1, bucket_end_ms(int(NOW_S * 1000))): 100}
    retained = quota(ledger)
    await retained.admit(SOLO, TOPIC, 100)
    await retained.sync()
    assert ledger.hashes[SOLO.name] == {}


async def test_a_subject_without_a_cap_is_neither_refused_nor_counted() -> None:
    ledger = MemoryLedger()
    retained, free = quota(ledger), QuotaSubject("principal:free", None, None)
    await retained.admit(free, TOPIC, 10**9)
    retained.charge(free, TOPIC, 10**9)
    await retained.sync()
    assert ledger.hashes == {}
