"""Whether retention trimmed entries after a checkpointed offset, and how many (the Kafka-source
contract)."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from streamgate_spark import stream_ids
from streamgate_spark.errors import StreamgateDataLoss
from streamgate_spark.streams import StreamState

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class GroupPosition:
    """The pipeline consumer group's recorded position on a partition (entries_read None =
    unknown)."""

    last_id: str
    entries_read: int | None


@dataclass(frozen=True)
class Loss:
    """Entries trimmed before the source read them; ``lost`` None when Redis cannot tell the
    count."""

    checkpointed: str
    oldest_retained: str
    lost: int | None


def find_loss(checkpointed: str, state: StreamState, group: GroupPosition | None) -> Loss | None:
    """The loss past ``checkpointed``, or None when every entry after it is still in the stream.

    The count is exact when the checkpoint's place in the entry sequence is known: at the start of
    the stream (``0-0``), or when the pipeline's consumer group sits at the checkpoint with a valid
    read counter (trimmed entries = entries added - length - entries read). Otherwise it is unknown.
    """
    if state.removed <= 0 or not stream_ids.before(checkpointed, state.floor):
        return None
    oldest = state.first_id or state.last_generated_id
    if checkpointed == stream_ids.ZERO:
        return Loss(checkpointed, oldest, state.removed)
    if group is not None and group.last_id == checkpointed and group.entries_read is not None:
        lost = state.removed - group.entries_read
        return Loss(checkpointed, oldest, lost) if lost > 0 else None
    return Loss(checkpointed, oldest, None)


def handle_loss(topic: str, partition: int, loss: Loss, fail: bool) -> int:
    """Raise StreamgateDataLoss when ``fail``; else log it and return the count (0 when unknown)."""
    error = StreamgateDataLoss(topic, partition, loss.checkpointed, loss.oldest_retained, loss.lost)
    if fail:
        raise error
    log.warning("%s; continuing from the oldest retained entry (failOnDataLoss=false)",
                error.message)
    return loss.lost or 0
