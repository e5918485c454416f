"""Moving an entry that exhausted its deliveries to the dead-letter topic ``<topic>.dlq``.

The DLQ topic is created on first use with the source's partition count; the entry keeps its
partition index (modulo the DLQ's count), key, value and headers, plus ``sg-dlq-*`` headers naming
where it came from and why. The append is idempotent (keyed by group, partition and offset, in the
gateway's own name space), so a crash between the append and the ack in the source never yields two
dead letters.
"""

from __future__ import annotations

import logging

from gateway.observe.metrics import GatewayMetrics
from gateway.publish.publisher import internal_key
from partitioner.errors import TopicExists
from partitioner.registry import TopicRegistry
from partitioner.topics import TopicMetadata, TopicSettings
from storage.models import Acks, AppendOptions, Delivery, Record
from storage.protocol import StreamStore

log = logging.getLogger(__name__)

DLQ_SUFFIX = ".dlq"
DLQ_OWNER = "streamgate"


def dlq_name(topic: str) -> str:
    """The dead-letter topic of ``topic``."""
    return topic + DLQ_SUFFIX


class DeadLetterWriter:
    """The gateway's DeadLetterSink: append to ``<topic>.dlq``, idempotently, counted under ``by``.

    The append uses acks=all: the caller acks the source entry afterwards, so the dead letter must
    survive a failover first.
    """

    def __init__(self, registry: TopicRegistry, store: StreamStore, dedup_ttl_ms: int,
                 metrics: GatewayMetrics | None = None, by: str = "reader") -> None:
        self._registry = registry
        self._store = store
        self._dedup_ttl_ms = dedup_ttl_ms
        self._metrics = metrics
        self._by = by

    def acting_as(self, by: str) -> DeadLetterWriter:
        """The same writer, counting what it moves under ``by`` (reader, pull, sweep)."""
        return DeadLetterWriter(self._registry, self._store, self._dedup_ttl_ms, self._metrics, by)

    async def __call__(self, topic: str, group: str, delivery: Delivery, reason: str) -> None:
        dlq = await self._dlq_topic(topic)
        entry = delivery.entry
        headers = {
            **entry.headers,
            "sg-dlq-topic": topic,
            "sg-dlq-partition": str(entry.partition),
            "sg-dlq-offset": entry.offset,
            "sg-dlq-group": group,
            "sg-dlq-reason": reason,
            "sg-dlq-delivery-count": str(delivery.delivery_count - 1),
        }
        record = Record(entry.partition % dlq.partitions, entry.value, entry.value_format,
                        entry.key, headers,
                        idempotency_key=internal_key("dlq", group, topic, entry.partition,
                                                     entry.offset))
        await self._store.append(dlq.name, [record], AppendOptions(acks=Acks.ALL,
                                                                  dedup_ttl_ms=self._dedup_ttl_ms))
        if self._metrics is not None:
            self._metrics.group_dead_lettered.labels(topic, group, self._by).inc()
        log.info("dead-lettered %s/%s@%s for group %s: %s", topic, entry.partition, entry.offset,
                 group, reason)

    async def _dlq_topic(self, topic: str) -> TopicMetadata:
        source = await self._registry.get(topic)
        try:
            return await self._registry.create(
                TopicSettings(dlq_name(topic), source.partitions, source.retention_ms),
                owner=DLQ_OWNER)
        except TopicExists:
            return await self._registry.get(dlq_name(topic))
