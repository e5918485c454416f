"""The archive tier as the source plans it: the segments of a partition's manifest that hold part
of a range (start, end], and entries counted across both tiers.

A move commits a segment and trims the stream in one script, so an entry is in exactly one tier at
every instant; each question here reads the manifest and the stream at one instant (one script),
or reads the stream first and the manifest after, which sees every entry that left the stream.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from redis.cluster import RedisCluster

from storage.archive.manifest import SegmentRef, archive_key, segment_refs, segments_key
from storage.keys import log_key
from streamgate_spark import stream_ids
from streamgate_spark.archive_files import SegmentFiles
from streamgate_spark.errors import ArchiveNotConfigured, PipelineError
from streamgate_spark.streams import EMPTY, StreamState, state_of

# KEYS: the stream, the manifest. ARGV: "(start", end, "(end", limit. The segments ending in the
# range, the first one ending after it, how many stream entries lie in the range (up to the
# limit), the first and last of those, and the manifest's newest segment: at one instant.
_SPAN = """
local segments = redis.call('XRANGE', KEYS[2], ARGV[1], ARGV[2])
local over = redis.call('XRANGE', KEYS[2], ARGV[3], '+', 'COUNT', 1)
local hot = redis.call('XRANGE', KEYS[1], ARGV[1], ARGV[2], 'COUNT', ARGV[4])
local tip = redis.call('XREVRANGE', KEYS[2], '+', '-', 'COUNT', 1)[1]
if #hot == 0 then return {segments, over, 0, '', '', tip and tip[1] or ''} end
return {segments, over, #hot, hot[1][1], hot[#hot][1], tip and tip[1] or ''}
"""

# KEYS: the stream, the manifest. ARGV: "(start", end, limit, the manifest's newest segment seen.
# The count of stream entries in the range (up to the limit) and the last one's ID, unless a
# segment was committed since (false).
_HOT_SINCE = """
local tip = redis.call('XREVRANGE', KEYS[2], '+', '-', 'COUNT', 1)[1]
if (tip and tip[1] or '') ~= ARGV[4] then return false end
local r = redis.call('XRANGE', KEYS[1], ARGV[1], ARGV[2], 'COUNT', ARGV[3])
if #r == 0 then return {0, ''} end
return {#r, r[#r][1]}
"""

# KEYS: the stream, the manifest, the archive's hash. XINFO STREAM, the oldest segment and the
# number of archived entries at one instant; false without a stream.
_LOG_STATE = """
local ok, info = pcall(redis.call, 'XINFO', 'STREAM', KEYS[1])
if not ok then return false end
return {info, redis.call('XRANGE', KEYS[2], '-', '+', 'COUNT', 1), redis.call('HGET', KEYS[3],
        'entries')}
"""

ATTEMPTS = 10  # counts retried while moves keep committing between a span and its hot count


@dataclass(frozen=True)
class Counted:
    """Entries of a range counted across the tiers: how many (up to a limit), the first one and
    the last one counted."""

    count: int
    first: str | None
    last: str | None

    def plus(self, count: int, first: str | None, last: str | None) -> Counted:
        """This count followed by later entries."""
        return Counted(self.count + count, self.first or first, last or self.last)


NONE = Counted(0, None, None)


@dataclass(frozen=True)
class Span:
    """A range's segments (oldest first) and its stream entries, seen at one instant."""

    pieces: list[SegmentRef]
    hot: Counted
    tip: str  # the manifest's newest segment's last offset ('' when empty)


def read_span(client: RedisCluster, topic: str, partition: int, start: str, end: str,
              limit: int) -> Span:
    """The segments holding entries of (start, end] and the stream's first ``limit`` there."""
    segments, over, count, first, last, tip = client.eval(
        _SPAN, 2, log_key(topic, partition), segments_key(topic, partition), f"({start}", end,
        f"({end}", str(limit))
    pieces = segment_refs(segments) + [ref for ref in segment_refs(over)
                                       if not stream_ids.before(end, ref.first_offset)]
    return Span(pieces, Counted(int(count), _text(first), _text(last)), _text(tip) or "")


def log_state(client: RedisCluster, topic: str, partition: int) -> StreamState:
    """What retention left of the whole log, both tiers: the stream's state with the archived
    entries counted in its length and the oldest segment's first entry as the oldest retained."""
    reply = client.eval(_LOG_STATE, 3, log_key(topic, partition), segments_key(topic, partition),
                        archive_key(topic, partition))
    if reply is None:
        return EMPTY
    info, oldest, archived = reply
    state = state_of({stream_ids.text(name): value
                      for name, value in zip(info[0::2], info[1::2], strict=True)})
    refs = segment_refs(oldest)
    if not refs:
        return state
    return replace(state, length=state.length + int(archived or 0),
                   first_id=refs[0].first_offset)


def first_piece(client: RedisCluster, topic: str, partition: int, after: str,
                end: str) -> SegmentRef | None:
    """The segment holding the first archived entries after ``after``, when some are at or before
    ``end``."""
    refs = segment_refs(client.xrange(segments_key(topic, partition), f"({after}", "+", count=1)
                        or [])
    if refs and not stream_ids.before(end, refs[0].first_offset):
        return refs[0]
    return None


def newest_archived(client: RedisCluster, topic: str, partition: int) -> str | None:
    """The last offset of the partition's newest segment."""
    refs = segment_refs(client.xrevrange(segments_key(topic, partition), "+", "-", count=1)
                        or [])
    return refs[0].last_offset if refs else None


def count_after(client: RedisCluster, files: SegmentFiles | None, topic: str, partition: int,
                start: str, end: str, limit: int) -> Counted:
    """Entries of (start, end] across the tiers, up to ``limit``: segments' counts from the
    manifest, their files' offsets where the range or the limit cuts one, then the stream's.
    ArchiveNotConfigured when some are archived and ``files`` is None."""
    for _ in range(ATTEMPTS):
        span = read_span(client, topic, partition, start, end, limit)
        if not span.pieces:
            return span.hot
        if files is None:
            raise ArchiveNotConfigured(topic, partition, span.pieces[0].first_offset,
                                       span.pieces[-1].last_offset)
        archived = _archived(files, span.pieces, start, end, limit)
        remaining = limit - archived.count
        if remaining <= 0:
            return archived
        if span.hot.count <= remaining:
            return archived.plus(span.hot.count, span.hot.first, span.hot.last)
        hot = client.eval(_HOT_SINCE, 2, log_key(topic, partition),
                          segments_key(topic, partition), f"({start}", end, str(remaining),
                          span.tip)
        if hot is not None:  # else a move committed since the span: count again
            return archived.plus(int(hot[0]), span.hot.first, _text(hot[1]))
    raise PipelineError(f"topic {topic!r} partition {partition}: entries kept moving to the "
                        f"archive while counting them ({ATTEMPTS} attempts)")


def _archived(files: SegmentFiles, pieces: list[SegmentRef], start: str, end: str,
              limit: int) -> Counted:
    counted = NONE
    for piece in pieces:
        from_first = stream_ids.before(start, piece.first_offset)
        if from_first and counted.count + 1 == limit:  # its first entry: no file to read
            return counted.plus(1, piece.first_offset, piece.first_offset)
        whole = from_first and not stream_ids.before(end, piece.last_offset)
        if whole and counted.count + piece.count <= limit:
            counted = counted.plus(piece.count, piece.first_offset, piece.last_offset)
            continue
        until = piece.last_offset if stream_ids.before(piece.last_offset, end) else end
        offsets = files.offsets(piece.name, start, until)[:limit - counted.count]
        if offsets:
            counted = counted.plus(len(offsets), offsets[0], offsets[-1])
        if counted.count >= limit:
            break
    return counted


def _text(raw: bytes | str | None) -> str | None:
    if raw is None or raw in (b"", ""):
        return None
    return stream_ids.text(raw)
