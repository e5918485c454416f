"""A batch of records appended: one call per partition, written by the appender, and what each
record got (offset, duplicate flag) back in input order."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from storage._speedups import in_input_order, reply_offsets, split_by_partition
from storage.append.appender import Appender
from storage.append.calls import AppendCall
from storage.append.indexed import IndexedAppendCall
from storage.cluster import ClusterRouter
from storage.memory import MemoryWatch
from storage.models import Acks, Appended, AppendOptions, Conditions, Record, Records
from storage.wire.lanes import NodeLanes


class BatchAppender:
    """Appends batches of records (any partitions) through one ``Appender``.

    One ``AppendCall`` per partition (an ``IndexedAppendCall`` where keys are indexed or
    ``conditions`` are checked; those need the records in one partition); see
    ``storage.append.appender`` for batching per node, WAIT (``Acks.ALL``) and the retry semantics.
    """

    def __init__(self, router: ClusterRouter, lanes: NodeLanes,
                 memory: MemoryWatch | None = None) -> None:
        # each partition's reply kept as it is: the script's flat [offset, dupflag, ...]
        self._writer: Appender[Any] = Appender(router, flat_reply, lanes, memory)

    async def append(self, topic: str, records: Records | Sequence[Record],
                     options: AppendOptions, conditions: Conditions | None = None) -> Appended:
        """Append records (any partitions); what each got, in input order."""
        batch = records if isinstance(records, Records) else Records.of(records)
        if not batch.values:
            return Appended([], [], None)
        groups = split_by_partition(batch.partitions, batch.values, batch.keys)
        # one partition (a keyless or one-message batch): the batch is its columns
        one = len(groups) == 1
        if conditions is not None and not one:
            raise ValueError("a conditional append must stay in one partition")
        calls: list[AppendCall | IndexedAppendCall] = [
            _append_call(topic, partition,
                         batch if one else batch.partition_of(partition, indexes, values, keys),
                         options, conditions)
            for partition, (indexes, values, keys) in groups.items()]
        written = await self._writer.write(topic, calls, wait=options.acks is Acks.ALL)
        offsets = {partition: reply_offsets(partition, reply)
                   for partition, reply in written.items()}
        ordered = (offsets[calls[0].partition] if one
                   else in_input_order(len(batch), groups, offsets))
        if batch.idempotency_keys is None and batch.batch_key is None:
            return Appended(batch.partitions, ordered, None)
        flags = {partition: reply_duplicates(reply) for partition, reply in written.items()}
        if not any(True in column for column in flags.values()):
            return Appended(batch.partitions, ordered, None)  # what a first write answers
        duplicates = [False] * len(batch)
        for partition, (indexes, _, _) in groups.items():
            for index, flag in zip(indexes, flags[partition], strict=True):
                duplicates[index] = flag
        return Appended(batch.partitions, ordered, duplicates)


def _append_call(topic: str, partition: int, records: Records, options: AppendOptions,
                 conditions: Conditions | None) -> AppendCall | IndexedAppendCall:
    if options.key_index or conditions is not None:
        return IndexedAppendCall(topic, partition, records, options, conditions)
    return AppendCall(topic, partition, records, options)


def flat_reply(partition: int, reply: list[Any]) -> list[Any]:
    """An append call's reply as the appender keeps it: the script's flat ``[offset, dupflag,
    ...]``."""
    return reply


def reply_duplicates(reply: list[Any]) -> list[bool]:
    """The duplicate flags of the script's flat ``[offset, dupflag, ...]`` reply."""
    return [bool(int(flag)) for flag in reply[1::2]]
