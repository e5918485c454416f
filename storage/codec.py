"""Stream entry fields <-> storage values.

An entry holds the value (bytes) under ``K`` + the record's key, or under ``v`` when it has no key;
``f`` (``b`` for a binary value; omitted for JSON text, the common case) and ``h`` (headers as an
orjson map, omitted when empty). Offsets are stream IDs ``<ms>-<seq>`` as str.

Entries of earlier versions read the same: a keyed record was ``v`` and ``k`` (the key as a value),
and JSON values carried ``f`` ``j`` too. Each step spares Redis two arguments per entry to parse,
store, replicate and answer, a measurable share of its CPU per XADD (docs/performance.md has the
figures).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from storage.errors import InvalidOffset
from storage.models import Record, StoredEntry, ValueFormat
from storage.native import refuse_if_off

_FORMATS = {fmt.value.encode(): fmt for fmt in ValueFormat}
KEYED = b"K"  # a keyed record's value is stored under K + its key


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
        headers=_decode_headers(raw_headers) if raw_headers else {},
        timestamp_ms=timestamp_ms(offset),
    )


_new_entry = object.__new__
_ENTRY_SETTERS = tuple(getattr(StoredEntry, name).__set__ for name in StoredEntry.__slots__)


def decode_raw_entries(partition: int, items: Sequence[Any]) -> list[StoredEntry]:
    """Decode the entries of a raw RESP2 stream reply (``[id, [field, value, ...]]`` items, nil
    items skipped).

    The read hot path (XREADGROUP, XREAD): the reply comes straight from hiredis without redis-py's
    pair-to-dict callbacks. The compiled ``storage._entries`` decodes it (faster) unless it is
    unsure, then ``decode_raw_entries_python`` does.
    """
    if ENTRIES_NATIVE and type(items) is list:
        decoded = _decode_compiled(partition, items, _LAYOUT)
        if decoded is not None:
            return decoded
    return decode_raw_entries_python(partition, items)


def decode_raw_entries_python(partition: int, items: Sequence[Any]) -> list[StoredEntry]:
    """``decode_raw_entries`` in Python, the reference of the compiled one: each StoredEntry is
    filled through its slots (the frozen dataclass __init__ costs twice as much; the instance is as
    immutable afterwards)."""
    (set_partition, set_offset, set_value, set_format, set_key, set_headers,
     set_timestamp) = _ENTRY_SETTERS
    formats, binary, json, new = _FORMATS, ValueFormat.BINARY, ValueFormat.JSON, _new_entry
    entries: list[StoredEntry] = []
    for item in items:
        if item is None or item[0] is None or item[1] is None:
            continue  # a deleted entry still pending in a group
        raw_id, fields = item
        offset = raw_id.decode() if isinstance(raw_id, bytes) else raw_id
        value, value_format, key, headers = b"", json, None, {}
        for i in range(0, len(fields) - 1, 2):
            name = fields[i]
            if name == b"v":
                value = fields[i + 1]
            elif name == b"f":
                value_format = formats.get(fields[i + 1], binary)
            elif name == b"k":
                key = fields[i + 1]
            elif isinstance(name, bytes | bytearray | memoryview) and name[:1] == KEYED:
                key, value = bytes(name[1:]), fields[i + 1]
            elif name == b"h" and fields[i + 1]:
                headers = _decode_headers(fields[i + 1])
        entry = new(StoredEntry)
        set_partition(entry, partition)
        set_offset(entry, offset)
        set_value(entry, value)
        set_format(entry, value_format)
        set_key(entry, key)
        set_headers(entry, headers)
        set_timestamp(entry, int(offset[:offset.index("-")]))
        entries.append(entry)
    return entries


try:
    # the compiled decoder (storage._entries, built by setup.py); the Python one gives the same
    # entries
    refuse_if_off()
    from storage._entries import decode_raw_entries as _decode_compiled
    ENTRIES_NATIVE = True
except ImportError:  # pragma: no cover - a build without a C compiler
    ENTRIES_NATIVE = False


def decode_entries(partition: int, items: list[Any]) -> list[StoredEntry]:
    """Decode a whole XRANGE reply (a list of ``(id, {field: value})`` pairs)."""
    return [decode_entry(partition, entry_id, fields) for entry_id, fields in items]


def _format(raw: bytes | None) -> ValueFormat:
    """The value format an entry's ``f`` field says: none is JSON; an unknown one is treated as
    binary (base64 renders any bytes, where embedding them as JSON could not)."""
    return ValueFormat.JSON if raw is None else _FORMATS.get(raw, ValueFormat.BINARY)


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


def _decode_headers(raw: bytes) -> dict[str, str]:
    headers = orjson.loads(raw)
    if not isinstance(headers, dict):
        return {}
    return {str(k): str(v) for k, v in headers.items()}


# What the compiled decoder needs, in its order (storage/_entries.c): the class, its slot
# descriptors, the f values, JSON, binary, the headers decoder, the empty value.
_LAYOUT = (StoredEntry,
           tuple(vars(StoredEntry)[name]
                 for name in ("partition", "offset", "value", "value_format", "key",
                              "headers", "timestamp_ms")),
           _FORMATS, ValueFormat.JSON, ValueFormat.BINARY, _decode_headers, b"")
