"""Offsets as the HTTP API sees them: Redis stream IDs, with ``from`` inclusive and ``next_offset``
exclusive."""

from __future__ import annotations

import re

from gateway.errors import invalid_field

STREAM_ID = re.compile(r"(\d{1,20})-(\d{1,20})", re.ASCII)  # ASCII digits: Redis refuses others
MAX_SEQ = 2**64 - 1


def parse_offset(text: str, pointer: str) -> tuple[int, int]:
    """Split ``<ms>-<seq>`` into integers; 422 naming ``pointer`` otherwise."""
    match = STREAM_ID.fullmatch(text)
    if match is None:
        raise invalid_field(
            pointer, f"{text!r} is not an offset: expected '<ms>-<seq>', 'earliest' or 'latest'"
        )
    ms, seq = int(match.group(1)), int(match.group(2))
    if ms > MAX_SEQ or seq > MAX_SEQ:
        raise invalid_field(pointer, f"{text!r} is out of range")
    return ms, seq


def successor(offset: str) -> str:
    """The smallest stream ID after ``offset``: reading from it continues right after ``offset``."""
    ms, seq = (int(part) for part in offset.split("-"))
    return f"{ms}-{seq + 1}" if seq < MAX_SEQ else f"{ms + 1}-0"


def predecessor(offset: str) -> str | None:
    """The largest stream ID before ``offset``, or None for ``0-0`` (nothing precedes it)."""
    ms, seq = (int(part) for part in offset.split("-"))
    if seq > 0:
        return f"{ms}-{seq - 1}"
    if ms > 0:
        return f"{ms - 1}-{MAX_SEQ}"
    return None
