"""Moving an entry that exhausted its deliveries to the dead-letter topic ``<topic>.dlq``.

The DLQ topic is created on first use with the source's partition count; the entry keeps its
partition index (modulo the DLQ's count), key, value and headers, plus ``sg-dlq-*`` headers naming
where it came from and why. The append is idempotent (keyed by group, partition and offset, in the
gateway's own name space), so a crash between the append and the ack in the source never yields two
dead letters.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from gateway.observe.metrics import GatewayMetrics
from gateway.publish.headers import DLQ_HEADER_PREFIX, SCHEMA_VERSION_HEADER
from gateway.publish.publisher import internal_key
from partitioner.errors import TopicExists
from partitioner.registry import TopicRegistry
from partitioner.topics import TopicMetadata, TopicSettings
from storage.models import Acks, AppendOptions, Delivery, Record
from storage.protocol import StreamStore

log = logging.getLogger(__name__)

DLQ_SUFFIX = ".dlq"
DLQ_OWNER = "streamgate"
# where a letter keeps its message's schema version, and the source incarnation it belongs to
DLQ_SCHEMA_VERSION = DLQ_HEADER_PREFIX + "schema-version"
DLQ_SOURCE_CREATED_AT = DLQ_HEADER_PREFIX + "topic-created-at-ms"


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
        source, dlq = await self._topics(topic)
        entry = delivery.entry
        headers = {
            **letter_headers(entry.headers, source),
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

    async def _topics(self, topic: str) -> tuple[TopicMetadata, TopicMetadata]:
        """The source topic and its DLQ (created on first use)."""
        source = await self._registry.get(topic)
        try:
            return source, await self._registry.create(
                TopicSettings(dlq_name(topic), source.partitions, source.retention_ms),
                owner=DLQ_OWNER)
        except TopicExists:
            return source, await self._registry.get(dlq_name(topic))


def letter_headers(headers: Mapping[str, str], source: TopicMetadata) -> dict[str, str]:
    """A letter's own copy of its message's headers. The schema version a message was checked
    against names a version of its source topic's incarnation, not of the DLQ: it is kept aside
    with that incarnation, and a redrive restores it only into the same one."""
    version = headers.get(SCHEMA_VERSION_HEADER)
    if version is None:
        return dict(headers)
    kept = {name: value for name, value in headers.items() if name != SCHEMA_VERSION_HEADER}
    kept[DLQ_SCHEMA_VERSION] = version
    kept[DLQ_SOURCE_CREATED_AT] = str(source.created_at_ms)
    return kept


def restored_headers(headers: Mapping[str, str], source: TopicMetadata) -> dict[str, str]:
    """A redriven letter's headers: without the ``sg-dlq-*`` ones, with its schema version back
    when it goes to the incarnation it was checked in (otherwise it carries none, so a reader
    pinned to a version checks it as a value written before the topic had a schema)."""
    restored = {name: value for name, value in headers.items()
                if not name.startswith(DLQ_HEADER_PREFIX) and name != SCHEMA_VERSION_HEADER}
    version = headers.get(DLQ_SCHEMA_VERSION)
    if version is not None and headers.get(DLQ_SOURCE_CREATED_AT) == str(source.created_at_ms):
        restored[SCHEMA_VERSION_HEADER] = version
    return restored
