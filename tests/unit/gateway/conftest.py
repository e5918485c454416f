"""Fixtures for gateway unit tests: the real app over an in-memory store and registry."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from gateway.app import app_with_services
from gateway.metrics import GatewayMetrics
from gateway.publisher import Publisher
from gateway.services import Services
from gateway.settings import GatewaySettings
from partitioner.cache import TopicCache
from partitioner.registry import InMemoryTopicRegistry
from storage.errors import StorageUnavailable
from storage.models import (
    AppendOptions,
    AppendResult,
    PartitionInfo,
    PlainRecords,
    Record,
    ScheduledResult,
    StoredEntry,
)


class InMemoryStreamStore:
    """A StreamStore in dicts, with the same offset and idempotency rules as the Redis one."""

    def __init__(self) -> None:
        self.streams: dict[tuple[str, int], list[StoredEntry]] = {}
        self.dedup: dict[tuple[str, int, str], str] = {}
        self.unavailable = False
        self.scheduled: list[tuple[str, Record, int]] = []
        self.appends = 0

    def _next_offset(self, stream: list[StoredEntry]) -> str:
        now = int(time.time() * 1000)
        if stream:
            ms, seq = (int(x) for x in stream[-1].offset.split("-"))
            if now <= ms:
                return f"{ms}-{seq + 1}"
        return f"{now}-0"

    async def append(self, topic: str, records: Sequence[Record], options: AppendOptions) -> list[AppendResult]:
        if self.unavailable:
            raise StorageUnavailable("redis is down (test)", retry_after_s=2)
        self.appends += 1
        results = []
        for record in records:
            stream = self.streams.setdefault((topic, record.partition), [])
            dedup_key = (topic, record.partition, record.idempotency_key or "")
            if record.idempotency_key and dedup_key in self.dedup:
                results.append(AppendResult(record.partition, self.dedup[dedup_key], True))
                continue
            offset = self._next_offset(stream)
            stream.append(StoredEntry(record.partition, offset, record.value, record.value_format,
                                      record.key, dict(record.headers), int(offset.split("-")[0])))
            if record.idempotency_key:
                self.dedup[dedup_key] = offset
            if options.max_length is not None and len(stream) > options.max_length:
                del stream[: len(stream) - options.max_length]
            results.append(AppendResult(record.partition, offset, False))
        return results

    async def append_plain(self, topic: str, records: PlainRecords, options: AppendOptions) -> list[str]:
        return [result.offset for result in await self.append(topic, records.as_records(), options)]

    async def read(self, topic: str, partition: int, *, after: str | None = None,
                   from_time_ms: int | None = None, limit: int = 100) -> list[StoredEntry]:
        if self.unavailable:
            raise StorageUnavailable("redis is down (test)")

        def key(offset: str) -> tuple[int, ...]:
            return tuple(int(x) for x in offset.split("-"))

        entries = self.streams.get((topic, partition), [])
        if after is not None:
            entries = [e for e in entries if key(e.offset) > key(after)]
        if from_time_ms is not None:
            entries = [e for e in entries if e.timestamp_ms >= from_time_ms]
        return entries[:limit]

    async def last_offset(self, topic: str, partition: int) -> str | None:
        stream = self.streams.get((topic, partition))
        return stream[-1].offset if stream else None

    async def last_offsets(self, topic: str, partitions: Sequence[int]) -> dict[int, str | None]:
        return {partition: await self.last_offset(topic, partition) for partition in partitions}

    async def length(self, topic: str, partition: int) -> int:
        return len(self.streams.get((topic, partition), []))

    async def partition_info(self, topic: str, partitions: int) -> list[PartitionInfo]:
        infos = []
        for p in range(partitions):
            s = self.streams.get((topic, p), [])
            infos.append(PartitionInfo(p, len(s), s[0].offset if s else None, s[-1].offset if s else None))
        return infos

    async def delete_topic(self, topic: str, partitions: int) -> None:
        for p in range(partitions):
            self.streams.pop((topic, p), None)

    async def ping(self) -> None:
        if self.unavailable:
            raise StorageUnavailable("redis is down (test)")

    async def schedule(self, topic: str, items: Sequence[tuple[Record, int]],
                       options: AppendOptions) -> list[ScheduledResult]:
        if self.unavailable:
            raise StorageUnavailable("redis is down (test)")
        results = []
        for record, due_ms in items:
            self.scheduled.append((topic, record, due_ms))
            results.append(ScheduledResult(record.partition, f"{len(self.scheduled):016d}", due_ms, False))
        return results

    def total_entries(self) -> int:
        return sum(len(s) for s in self.streams.values())


@pytest.fixture
def store() -> InMemoryStreamStore:
    return InMemoryStreamStore()


@pytest.fixture
def settings() -> GatewaySettings:
    return GatewaySettings(auth_mode="none", max_value_bytes=1024, max_batch_messages=50, max_batch_bytes=64 * 1024,
                           max_replay_limit=500)


@pytest.fixture
async def services(store: InMemoryStreamStore, settings: GatewaySettings) -> AsyncIterator[Services]:
    metrics = GatewayMetrics.create()
    async with Publisher(store, store, metrics, settings.dedup_ttl_ms, 4, settings.retry_after_s) as publisher:
        yield Services(settings=settings, store=store, registry=InMemoryTopicRegistry(), cache=TopicCache(),
                       publisher=publisher, metrics=metrics, readiness_checks=[("redis", store.ping)])


@pytest.fixture
async def client(aiohttp_client: Any, services: Services) -> TestClient[Any, Any]:
    client: TestClient[Any, Any] = await aiohttp_client(app_with_services(services))
    return client


@pytest.fixture
async def orders(client: TestClient[Any, Any]) -> str:
    response = await client.post("/v1/topics", json={"name": "orders", "partitions": 3})
    assert response.status == 201, await response.text()
    return "orders"
