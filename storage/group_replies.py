"""Consumer-group replies and positions as values: start ids, idle times Redis honours, NOGROUP and
BUSYGROUP told apart, XPENDING, XINFO and XREADGROUP replies read."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from storage.codec import decode_offset, decode_raw_entries, offset_key, validate_offset
from storage.models import GroupPartitionState, LostRange, ParkedKey, PendingEntry, StoredEntry
from storage.wire.errors import ResponseError

EARLIEST = "earliest"
LATEST = "latest"
# XCLAIM IDLE n sets the delivery time to now - n and Redis resets a negative time to *now* (idle
# 0), so an idle beyond the server's epoch time would silently mean "just delivered". Ten years is
# far past any ack timeout and far below the epoch.
MAX_IDLE_MS = 10 * 365 * 24 * 3600 * 1000


def start_id(start: str) -> str:
    """The XGROUP id for a start position: earliest -> "0", latest -> "$", else a validated
    offset."""
    if start == EARLIEST:
        return "0"
    if start == LATEST:
        return "$"
    return validate_offset(start)


def clamp_idle_ms(idle_ms: int) -> int:
    """An idle time Redis will honour (see MAX_IDLE_MS); negative values are rejected."""
    if idle_ms < 0:
        raise ValueError(f"idle_ms must be >= 0, got {idle_ms}")
    return min(idle_ms, MAX_IDLE_MS)


def is_missing_group(exc: BaseException) -> bool:
    """True for the replies meaning the stream or the group does not exist."""
    if not isinstance(exc, ResponseError):
        return False
    text = str(exc)
    return (text.startswith("NOGROUP") or "requires the key to exist" in text
            or text == "no such key")


def text(raw: Any) -> str:
    """A reply string (bytes with decode_responses=False) as str."""
    return raw.decode() if isinstance(raw, bytes) else str(raw)


def parse_pending(partition: int, rows: Sequence[Sequence[Any]]) -> list[PendingEntry]:
    """PendingEntry values of an XPENDING range reply's rows: id, consumer, idle ms,
    deliveries."""
    return [PendingEntry(partition, text(offset), text(consumer), int(idle), int(count))
            for offset, consumer, idle, count in rows]


def present(items: Sequence[Any]) -> list[Any]:
    """The ``(id, fields)`` items of a stream reply whose entry still exists (nil items are deleted
    ones)."""
    return [item for item in items if item is not None and item[0] is not None
            and item[1] is not None]


def parse_read_reply(partition: int, reply: Any, *, present_only: bool = False
                     ) -> list[StoredEntry]:
    """Entries of a raw XREADGROUP/XREAD reply for one stream (empty on a BLOCK timeout);
    ``present_only`` drops the deleted entries a read of pending history names.

    RESP3 (redis-py's default protocol) answers with a map {stream: items}, RESP2 with [[stream,
    items]].
    """
    if not reply:
        return []
    items = next(iter(reply.values())) if isinstance(reply, dict) else reply[0][1]
    return decode_raw_entries(partition, present(items) if present_only else items)


def info_row(flat: Sequence[Any]) -> dict[str, Any]:
    """One XINFO GROUPS (or CONSUMERS) entry, a flat name/value list, as a map by name."""
    return {text(flat[i]): flat[i + 1] for i in range(0, len(flat) - 1, 2)}


def find_group(infos: Sequence[Mapping[str, Any]], group: str) -> Mapping[str, Any] | None:
    """The XINFO GROUPS row of ``group``, or None."""
    for info in infos:
        if text(info["name"]) == group:
            return info
    return None


def state_from(partition: int, info: Mapping[str, Any] | None,
               oldest: str | None) -> GroupPartitionState:
    """A GroupPartitionState from a group's XINFO GROUPS row (None = no such group) and its oldest
    pending."""
    if info is None:
        return GroupPartitionState(partition, False, None, 0, None, None)
    lag = info.get("lag")
    return GroupPartitionState(
        partition=partition,
        exists=True,
        last_delivered_offset=decode_offset(info.get("last-delivered-id")),
        pending=int(info.get("pending") or 0),
        oldest_pending_offset=oldest,
        lag=None if lag is None else int(lag),
        entries_read=_count_or_none(info.get("entries-read")),
    )


def _count_or_none(value: Any) -> int | None:
    return None if value is None else int(value)


def lost_range(partition: int, position: str, flat: Sequence[Any],
               row: Mapping[str, Any] | None) -> LostRange | None:
    """What retention trimmed after ``position`` (whose entry is gone), from the stream's XINFO
    STREAM reply and the group's XINFO GROUPS row (None without a group): None when nothing was."""
    info = info_row(flat)
    added, length = int(info.get("entries-added") or 0), int(info.get("length") or 0)
    first = info.get("first-entry")
    first_kept = decode_offset(first[0]) if first else None
    bound = first_kept or decode_offset(info.get("last-generated-id")) or "0-0"
    if added == length or offset_key(bound) <= offset_key(position):
        return None
    read = None if row is None else row.get("entries-read")
    count = None if read is None else added - int(read) - length
    if count is not None and count <= 0:
        return None
    return LostRange(partition, position, first_kept, count)


def parse_parked(flat: Sequence[Any]) -> list[ParkedKey]:
    """A group's parked keys from their hash (HGETALL: key, ``<offset> <since ms>``...), oldest
    first."""
    found = []
    for name, value in zip(flat[0::2], flat[1::2], strict=True):
        offset, _, since = bytes(value).decode().partition(" ")
        found.append(ParkedKey(bytes(name), offset, int(since or 0)))
    return sorted(found, key=lambda parked: parked.since_ms)
