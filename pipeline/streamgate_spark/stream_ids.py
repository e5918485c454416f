"""Pure helpers over Redis stream IDs (``<ms>-<seq>``), the offsets of every partition.

IDs compare as (ms, seq) pairs, never as strings. ``0-0`` is the position before any entry can
exist.
"""

from __future__ import annotations

import re

ZERO = "0-0"
MAX_SEQ = 2**64 - 1
_ID = re.compile(r"(\d+)-(\d+)", re.ASCII)  # ASCII digits only, as Redis


def parse(stream_id: str) -> tuple[int, int]:
    """The (ms, seq) pair of an ID; ValueError when it is not ``<ms>-<seq>``."""
    match = _ID.fullmatch(stream_id)
    if match is None:
        raise ValueError(f"not a stream ID: {stream_id!r} (expected '<ms>-<seq>')")
    return int(match.group(1)), int(match.group(2))


def is_valid(stream_id: str) -> bool:
    """True when ``stream_id`` is a well-formed ID."""
    return _ID.fullmatch(stream_id) is not None


def before(a: str, b: str) -> bool:
    """True when ``a`` sorts strictly before ``b``."""
    return parse(a) < parse(b)


def later(a: str, b: str) -> str:
    """The later of two IDs."""
    return b if before(a, b) else a


def predecessor(stream_id: str) -> str:
    """The greatest ID strictly before ``stream_id`` (``0-0`` stays ``0-0``)."""
    ms, seq = parse(stream_id)
    if seq > 0:
        return f"{ms}-{seq - 1}"
    if ms > 0:
        return f"{ms - 1}-{MAX_SEQ}"
    return ZERO


def before_time(timestamp_ms: int) -> str:
    """The greatest ID before every entry written at or after ``timestamp_ms``: an exclusive
    start."""
    return ZERO if timestamp_ms <= 0 else f"{timestamp_ms - 1}-{MAX_SEQ}"


def timestamp_ms(stream_id: str) -> int:
    """The millisecond part of an ID: the time Redis assigned it."""
    return parse(stream_id)[0]


def text(raw: bytes | str) -> str:
    """An ID from a redis reply (bytes without decode_responses)."""
    return raw.decode() if isinstance(raw, bytes) else raw
