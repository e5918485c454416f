"""DLQ redrive: move dead letters of ``<topic>.dlq`` back to their source topic, at a bounded rate,
all of them or one by its offset.

Progress is a consumer group (``sg-redrive``) on the DLQ, so a redrive can stop and resume anywhere;
each message goes back to its original partition (``sg-dlq-partition``) without the ``sg-dlq-*``
headers, with an idempotency key derived from its DLQ offset in the gateway's own name space, so a
retried redrive (of all or of one) never duplicates. A letter that went back is then deleted from
the DLQ, which so holds only the letters still waiting.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping

from gateway.delivery.dead_letters import dlq_name, restored_headers
from gateway.offsets import predecessor
from gateway.publish.publisher import append_options, internal_key
from partitioner.hashing import partition_for
from partitioner.topics import TopicMetadata
from storage.groups_protocol import GroupStore
from storage.models import Acks, Record, Records, StoredEntry
from storage.protocol import StreamStore

REDRIVE_GROUP = "sg-redrive"
PAGE = 100


def source_record(entry: StoredEntry, dlq_partition: int, source: TopicMetadata) -> Record:
    """The message as it was before it was dead-lettered, placed back on its original partition."""
    original = entry.headers.get("sg-dlq-partition", "")
    known = original.isascii() and original.isdigit() and int(original) < source.partitions
    partition = int(original) if known else (
        partition_for(entry.key, source.partitions) if entry.key is not None
        else dlq_partition % source.partitions)
    return Record(partition, entry.value, entry.value_format, entry.key,
                  restored_headers(entry.headers, source),
                  idempotency_key=internal_key("redrive", dlq_name(source.name), dlq_partition,
                                               entry.offset))


# the key space a letter's key goes back to, from its headers (its writer's tenant)
SpaceOf = Callable[[Mapping[str, str]], bytes]


def _no_space(headers: Mapping[str, str]) -> bytes:
    return b""


async def _put_back(store: StreamStore, source: TopicMetadata, records: list[Record],
                    space_of: SpaceOf, dedup_ttl_ms: int) -> None:
    """Append letters' records, each batch in one key space (their writers' tenants')."""
    by_space: dict[bytes, list[Record]] = {}
    for record in records:
        by_space.setdefault(space_of(record.headers or {}), []).append(record)
    for space, rows in by_space.items():
        # the source topic's own options: its key index, compaction and length
        await store.append(source.name, Records.of(rows, key_space=space),
                           append_options(source, Acks.LEADER, dedup_ttl_ms))


async def redrive(store: StreamStore, groups: GroupStore, source: TopicMetadata, dlq: TopicMetadata,
                  max_messages: int, rate_per_s: int, dedup_ttl_ms: int,
                  space_of: SpaceOf = _no_space) -> int:
    """Move up to ``max_messages`` dead letters back, no faster than ``rate_per_s``, each key in
    the key space ``space_of`` its headers; returns how many."""
    moved = 0
    started = time.monotonic()
    for partition in range(dlq.partitions):
        await groups.ensure_group(dlq.name, partition, REDRIVE_GROUP, "earliest")
        while moved < max_messages:
            entries = await groups.read_new(dlq.name, partition, REDRIVE_GROUP, REDRIVE_GROUP,
                                            count=min(PAGE, max_messages - moved), block_ms=0)
            if not entries:
                break
            records = [source_record(entry, partition, source) for entry in entries]
            await _put_back(store, source, records, space_of, dedup_ttl_ms)
            offsets = [entry.offset for entry in entries]
            await groups.ack(dlq.name, partition, REDRIVE_GROUP, offsets)
            await store.delete_entries(dlq.name, partition, offsets)
            moved += len(entries)
            await _pace(moved, rate_per_s, started)
    return moved


async def redrive_one(store: StreamStore, source: TopicMetadata, dlq: TopicMetadata, partition: int,
                      offset: str, dedup_ttl_ms: int,
                      required: Mapping[str, str] | None = None,
                      space_of: SpaceOf = _no_space) -> bool:
    """Move the dead letter at ``offset`` of the DLQ's ``partition`` back; False when there is no
    such letter (never one, or already moved) or it lacks one of the ``required`` headers (a
    filtered caller's tenant: another tenant's letter looks missing)."""
    before = predecessor(offset)
    found = await store.read(dlq.name, partition, after=before, limit=1) if before else []
    if not found or found[0].offset != offset:
        return False
    if any(found[0].headers.get(name) != value for name, value in (required or {}).items()):
        return False
    await _put_back(store, source, [source_record(found[0], partition, source)], space_of,
                    dedup_ttl_ms)
    await store.delete_entries(dlq.name, partition, [offset])
    return True


async def _pace(moved: int, rate_per_s: int, started: float) -> None:
    ahead_s = moved / rate_per_s - (time.monotonic() - started)
    if ahead_s > 0:
        await asyncio.sleep(ahead_s)
