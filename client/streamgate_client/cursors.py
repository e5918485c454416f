"""Broadcast resume cursors: ``<partition>:<offset>,...`` formatted, parsed (also from a 4008
close's reason, possibly cut short), merged; and the wait a 4429 close asks for."""

from __future__ import annotations

import re
from collections.abc import Mapping

RETRY_IN = re.compile(r"retry in (\d+(?:\.\d+)?) s")
# a WebSocket close reason is at most 123 bytes: a long cursor is cut short
CLOSE_REASON_MAX_BYTES = 123


def offset_key(offset: str) -> tuple[int, int]:
    """Sort key of an offset ``<ms>-<seq>``."""
    ms, _, seq = offset.partition("-")
    return int(ms), int(seq or 0)


def format_cursor(cursor: Mapping[int, str]) -> str:
    """``<partition>:<offset>,...``: the ``from`` that resumes strictly after each offset."""
    return ",".join(f"{partition}:{offset}" for partition, offset in sorted(cursor.items()))


def parse_cursor(text: str, *, truncated: bool = False) -> dict[int, str]:
    """The inverse of ``format_cursor``; with ``truncated`` the last (possibly cut) entry is
    dropped."""
    parts = [part for part in text.strip().split(",") if part]
    if truncated and parts:
        parts = parts[:-1]
    cursor: dict[int, str] = {}
    for part in parts:
        partition, _, offset = part.partition(":")
        if (partition.isascii() and partition.isdigit()) and "-" in offset:
            cursor[int(partition)] = offset
    return cursor


def cursor_from_close_reason(reason: str) -> dict[int, str]:
    """The resume cursor a 4008 close carries as ``...; from=<cursor>`` (empty if there is none)."""
    _, sep, tail = reason.partition("from=")
    if not sep:
        return {}
    return parse_cursor(tail, truncated=len(reason.encode()) >= CLOSE_REASON_MAX_BYTES)


def retry_delay_from_close_reason(reason: str) -> float:
    """The wait a 4429 close asks for (``...; retry in <n> s``); 1 s when it names none."""
    match = RETRY_IN.search(reason)
    return float(match.group(1)) if match else 1.0


def merge_cursors(mine: Mapping[int, str], theirs: Mapping[int, str]) -> dict[int, str]:
    """Per partition, the later of two cursors."""
    merged = dict(mine)
    for partition, offset in theirs.items():
        if partition not in merged or offset_key(offset) > offset_key(merged[partition]):
            merged[partition] = offset
    return merged
