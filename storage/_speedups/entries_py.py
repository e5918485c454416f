"""The Python reference of ``storage._speedups._entries``: a raw stream reply's entries, or an
archived item table's columns, decoded into StoredEntry objects (same entries, slower)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeAlias

from storage.entry_fields import FORMATS, KEYED, decode_headers
from storage.models import StoredEntry, ValueFormat

if TYPE_CHECKING:
    import pyarrow as pa

    Column: TypeAlias = pa.Array | pa.ChunkedArray

_new_entry = object.__new__
_ENTRY_SETTERS = tuple(getattr(StoredEntry, name).__set__ for name in StoredEntry.__slots__)


def decode_raw_entries(partition: int, items: Sequence[Any]) -> list[StoredEntry]:
    """The entries of a raw RESP2 stream reply (``[id, [field, value, ...]]`` items, nil items
    skipped), each StoredEntry filled through its slots (the frozen dataclass __init__ costs twice
    as much; the instance is as immutable afterwards)."""
    (set_partition, set_offset, set_value, set_format, set_key, set_headers,
     set_timestamp) = _ENTRY_SETTERS
    formats, binary, json, new = FORMATS, ValueFormat.BINARY, ValueFormat.JSON, _new_entry
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
                headers = decode_headers(fields[i + 1])
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


def entries_of_columns(partition: int, ids: Column, names: Column, values: Column,
                       formats: Column, headers: Column) -> list[StoredEntry]:
    """The entries of an item table's columns (see ``items_of_columns``)."""
    return decode_raw_entries(partition, items_of_columns(ids, names, values, formats, headers))


def items_of_columns(ids: Column, names: Column, values: Column, formats: Column,
                     headers: Column) -> list[list[Any]]:
    """An item table's columns (each row's ID, value field name, value, format's text and raw
    headers) as the ``[id, fields]`` items XRANGE would have returned."""
    columns = [ids.to_pylist(), names.to_pylist(), values.to_pylist()]
    count = len(ids)
    if formats.null_count == count and headers.null_count == count:
        return [[i, [name, value]] for i, name, value in zip(*columns, strict=True)]
    columns += [formats.to_pylist(), headers.to_pylist()]
    return [[i, _fields(name, value, fmt, raw_headers)]
            for i, name, value, fmt, raw_headers in zip(*columns, strict=True)]


def _fields(name: bytes, value: bytes, fmt: str | None, headers: bytes | None) -> list[bytes]:
    fields = [name, value]
    if fmt is not None:
        fields += (b"f", fmt.encode())
    if headers is not None:
        fields += (b"h", headers)
    return fields
