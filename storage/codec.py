"""Stream entry fields <-> storage values."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from storage._speedups import ENTRY_LAYOUT, decode_raw_entries_or_none, decode_raw_entries_python
from storage.entry_fields import FORMATS, KEYED, decode_headers
from storage.errors import InvalidOffset
from storage.models import Record, StoredEntry, ValueFormat

# An entry holds the value (bytes) under ``K`` + the record's key, or under ``v`` when it has no
# key; ``f`` (``b`` for a binary value; omitted for JSON text, the common case) and ``h`` (headers
# as an orjson map, omitted when empty). Offsets are stream IDs ``<ms>-<seq>`` as str.
#
# Entries of earlier versions read the same: a keyed record was ``v`` and ``k`` (the key as a
# value), and JSON values carried ``f`` ``j`` too. Each step spares Redis two arguments per entry to
# parse, store, replicate and answer, a measurable share of its CPU per XADD (docs/performance.md
# has the figures).


def encode_fields(record: Record) -> list[bytes]:
    """The flat field/value list passed to XADD for one record: the value under ``K`` + the key
    (``v`` without a key), then ``f`` and ``h`` where they apply."""
    fields = [b"v" if record.key is None else KEYED + record.key, record.value]
    if record.value_format is not ValueFormat.JSON:
        fields += (b"f", record.value_format.value.encode())
    if record.headers:
        fields += (b"h", orjson.dumps(dict(record.headers)))
    return fields


def value_and_key(fields: Mapping[bytes, bytes]) -> tuple[bytes, bytes | None]:
    """An entry's value and key from its field map: ``K<key>`` (the key in the field's name) or
    ``v`` without a key; entries of earlier versions hold ``v`` and ``k``."""
    value, key = b"", None
    for name, data in fields.items():
        # in the entry's order, the last one wins, as in decode_raw_entries
        if name == b"v":
            value = data
        elif name == b"k":
            key = data
        elif name[:1] == KEYED:
            key, value = bytes(name[1:]), data
    return value, key


def decode_entry(partition: int, entry_id: bytes | str,
                 fields: Mapping[bytes, bytes]) -> StoredEntry:
    """Build a StoredEntry from one XRANGE/XREVRANGE item (field map with bytes keys)."""
    offset = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
    raw_headers = fields.get(b"h")
    value, key = value_and_key(fields)
    return StoredEntry(
        partition=partition,
        offset=offset,
        value=value,
        value_format=_format(fields.get(b"f")),
        key=key,
        headers=decode_headers(raw_headers) if raw_headers else {},
        timestamp_ms=timestamp_ms(offset),
    )


def decode_raw_entries(partition: int, items: Sequence[Any]) -> list[StoredEntry]:
    """Decode the entries of a raw RESP2 stream reply (``[id, [field, value, ...]]`` items, nil
    items skipped).

    The read hot path (XREADGROUP, XREAD): the reply comes straight from hiredis without redis-py's
    pair-to-dict callbacks. The compiled decoder (``storage._speedups``) decodes it (faster)
    unless it is unsure, then its reference does.
    """
    if type(items) is list:
        decoded = decode_raw_entries_or_none(partition, items, ENTRY_LAYOUT)
        if decoded is not None:
            return decoded
    return decode_raw_entries_python(partition, items)


def decode_entries(partition: int, items: list[Any]) -> list[StoredEntry]:
    """Decode a whole XRANGE reply (a list of ``(id, {field: value})`` pairs)."""
    return [decode_entry(partition, entry_id, fields) for entry_id, fields in items]


def _format(raw: bytes | None) -> ValueFormat:
    """The value format an entry's ``f`` field says: none is JSON; an unknown one is treated as
    binary (base64 renders any bytes, where embedding them as JSON could not)."""
    return ValueFormat.JSON if raw is None else FORMATS.get(raw, ValueFormat.BINARY)


def validate_offset(offset: str) -> str:
    """Return ``offset`` unchanged if it is a stream ID, else raise InvalidOffset."""
    ms, dash, seq = offset.partition("-")
    # ASCII digits only: str.isdigit (and the regex \d) also accept other scripts' digits, which
    # Redis refuses.
    if not (dash and ms.isdigit() and seq.isdigit() and offset.isascii()):
        raise InvalidOffset(offset)
    return offset


_OFFSET_LINES = re.compile(r"[0-9]+-[0-9]+(?:\n[0-9]+-[0-9]+)*")


def validate_offsets(offsets: Sequence[str]) -> list[str]:
    """``[validate_offset(o) for o in offsets]``, checked in one regular-expression match over the
    offsets joined by newlines (an ack carries hundreds); the line count catches an offset that
    holds a newline itself. When the match fails, each is checked in turn, so InvalidOffset names
    the first bad one."""
    try:
        joined = "\n".join(offsets)
    except TypeError:
        joined = ""
    if joined and joined.count("\n") == len(offsets) - 1 and _OFFSET_LINES.fullmatch(joined):
        return list(offsets)
    return [validate_offset(o) for o in offsets]


def offset_key(offset: str) -> tuple[int, int]:
    """A stream ID ("<ms>-<seq>") as a comparable (ms, seq) pair."""
    ms, _, seq = offset.partition("-")
    return int(ms), int(seq or 0)


def timestamp_ms(offset: str) -> int:
    """The millisecond part of a stream ID (the time Redis assigned it)."""
    return int(offset.partition("-")[0])


def decode_offset(raw: bytes | str | None) -> str | None:
    """A stream ID from a reply (bytes with decode_responses=False), or None."""
    if raw is None:
        return None
    return raw.decode() if isinstance(raw, bytes) else raw
