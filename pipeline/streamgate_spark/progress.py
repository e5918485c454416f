"""Publish the pipeline's committed position as a Redis consumer group, so its lag shows like any
group's.

Spark's checkpoint stays the only source of truth; the group is advisory. It is created with
MKSTREAM and moved with ``XGROUP SETID``. ENTRIESREAD is added when it can be computed exactly (no
deletions after the position and at most ``ENTRIES_READ_PROBE`` entries after it), so Redis can
report the group's lag.
"""

from __future__ import annotations

from typing import Any

from redis.cluster import RedisCluster
from redis.exceptions import ResponseError

from storage.archive.manifest import archive_readers_key
from storage.keys import log_key
from streamgate_spark import stream_ids
from streamgate_spark.data_loss import GroupPosition
from streamgate_spark.streams import StreamState, count_after, stream_state

ENTRIES_READ_PROBE = 10_000


def publish_position(client: RedisCluster, topic: str, partition: int, group: str,
                     position: str) -> None:
    """Create ``group`` on the partition's stream if absent and set its last-delivered ID to
    ``position``; it is one of the partition's archive readers (the source reads archived ranges
    from the segments), so the archive mover does not wait for it."""
    key = log_key(topic, partition)
    client.sadd(archive_readers_key(topic, partition), group)
    try:
        client.xgroup_create(key, group, id=position, mkstream=True)
    except ResponseError as exc:
        if "BUSYGROUP" not in str(exc):
            raise
    entries_read = entries_read_at(client, key, position, stream_state(client, key))
    client.xgroup_setid(key, group, position, entries_read=entries_read)


def entries_read_at(client: RedisCluster, key: str, position: str,
                    state: StreamState) -> int | None:
    """The stream's logical read counter at ``position``, or None when it cannot be computed
    exactly."""
    if state.removed > 0 and stream_ids.before(position, state.floor):
        return None  # trimmed entries after the position: their number is not known
    if stream_ids.before(position, state.max_deleted_id):
        return None  # XDEL'd entries after the position would be miscounted
    after, _ = count_after(client, key, position, "+", ENTRIES_READ_PROBE + 1)
    if after > ENTRIES_READ_PROBE:
        return None
    return state.entries_added - after


def group_position(client: RedisCluster, key: str, group: str) -> GroupPosition | None:
    """The group's XINFO GROUPS position on ``key``, or None when the group or stream does not
    exist."""
    try:
        infos: list[dict[Any, Any]] = client.xinfo_groups(key)
    except ResponseError:
        return None
    for info in infos:
        if stream_ids.text(info["name"]) == group:
            read = info.get("entries-read")
            return GroupPosition(stream_ids.text(info["last-delivered-id"]),
                                 None if read is None else int(read))
    return None
