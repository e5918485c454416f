"""Synchronous reads of one partition stream for the Spark side (driver and executors).

Spark runs the offset methods in a long-lived driver-side Python process and ``read()`` in reused
workers, so each side opens its own ``RedisCluster`` (a client does not pickle). hiredis makes
XRANGE parsing much faster.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from redis.cluster import ClusterNode, RedisCluster
from redis.exceptions import ResponseError

from streamgate_spark import stream_ids
from streamgate_spark.options import RedisTls

Entry = tuple[bytes, dict[bytes, bytes]]

# Count the entries of a range (up to a limit) and return the last one's ID, without shipping the
# entries.
_COUNT_RANGE = """
local r = redis.call('XRANGE', KEYS[1], ARGV[1], ARGV[2], 'COUNT', ARGV[3])
if #r == 0 then return {0, ''} end
return {#r, r[#r][1]}
"""


def open_cluster(nodes: Sequence[tuple[str, int]], tls: RedisTls | None = None) -> RedisCluster:
    """A cluster client over the given startup nodes (bytes replies), over TLS when ``tls`` is
    given."""
    return RedisCluster(startup_nodes=[ClusterNode(host, port)  # type: ignore[no-untyped-call]
                                       for host, port in nodes],
                        **(tls.client_options() if tls else {}))


# The cluster client each executor process keeps between its tasks (at most one cluster's).
_kept: dict[tuple[tuple[tuple[str, int], ...], RedisTls | None], RedisCluster] = {}


def kept_cluster(nodes: Sequence[tuple[str, int]], tls: RedisTls | None = None) -> RedisCluster:
    """A cluster client this process keeps for its next tasks: Spark reuses a worker for many
    ranges, and starting a client (slot map, command table) costs as much as reading a few
    thousand entries. Another cluster's client is closed; ``forget_cluster`` after a failure."""
    key = (tuple(nodes), tls)
    client = _kept.get(key)
    if client is None:
        forget_cluster()
        client = _kept[key] = open_cluster(nodes, tls)
    return client


def forget_cluster() -> None:
    """Close the kept client, if any: the next task starts a new one."""
    while _kept:
        _kept.popitem()[1].close()


@dataclass(frozen=True)
class StreamState:
    """What retention left of a stream: enough to tell whether a position's successors still
    exist."""

    length: int
    entries_added: int
    last_generated_id: str
    first_id: str | None
    max_deleted_id: str

    @property
    def removed(self) -> int:
        """Entries ever added and no longer in the stream (trimmed by retention)."""
        return self.entries_added - self.length

    @property
    def floor(self) -> str:
        """The greatest ID before the oldest retained entry (or the last ID when none is
        retained)."""
        if self.first_id is None:
            return self.last_generated_id
        return stream_ids.predecessor(self.first_id)


EMPTY = StreamState(0, 0, stream_ids.ZERO, None, stream_ids.ZERO)


def stream_state(client: RedisCluster, key: str) -> StreamState:
    """XINFO STREAM as a StreamState; a missing stream is EMPTY."""
    try:
        info: dict[Any, Any] = client.xinfo_stream(key)
    except ResponseError as exc:
        if "no such key" in str(exc).lower():
            return EMPTY
        raise
    return state_of(info)


def state_of(info: Mapping[str, Any]) -> StreamState:
    """A StreamState from XINFO STREAM's fields (by name)."""
    first = info.get("first-entry")
    return StreamState(
        length=int(info["length"]),
        entries_added=int(info.get("entries-added") or 0),
        last_generated_id=stream_ids.text(info["last-generated-id"]),
        first_id=stream_ids.text(first[0]) if first else None,
        max_deleted_id=stream_ids.text(info.get("max-deleted-entry-id") or stream_ids.ZERO),
    )


def last_id(client: RedisCluster, key: str) -> str | None:
    """The ID of the newest entry, or None for an empty stream."""
    newest = cast(list[Entry], client.xrevrange(key, "+", "-", count=1))
    return stream_ids.text(newest[0][0]) if newest else None


def count_after(client: RedisCluster, key: str, start: str, end: str,
                limit: int) -> tuple[int, str | None]:
    """How many entries lie in (start, end] (at most ``limit``) and the ID of the last one
    counted."""
    count, last = client.eval(_COUNT_RANGE, 1, key, f"({start}", end, str(limit))
    return int(count), (stream_ids.text(last) if count else None)
