"""XRANGE pages as Arrow column buffers: ``PageColumns``, what both page readers give (the compiled
one, ``storage._speedups``, reads a reply's raw RESP bytes without a Python object per entry), and
``columns_of_items``, the columns of already parsed entries.

Entry fields follow storage.codec (``value_and_key``): the value under ``K`` + the key, or ``v``
without a key (earlier versions: ``v`` and ``k``), headers' JSON under ``h``, a format under ``f``.
"""

from __future__ import annotations

import struct
from array import array
from collections.abc import Sequence
from typing import Any, NamedTuple

from storage.entry_fields import KEYED


class PageColumns(NamedTuple):
    """One page's columns as Arrow buffers: int32 offsets, data, LSB validity bitmaps (None when
    no row is null) and null counts."""

    rows: int
    id_offsets: bytes
    id_data: bytes
    timestamps_us: bytes  # int64 per row: the ID's ms part
    key_validity: bytes | None
    key_offsets: bytes
    key_data: bytes
    key_nulls: int
    value_offsets: bytes
    value_data: bytes
    text_validity: bytes | None  # the rows whose value is UTF-8
    text_nulls: int
    header_validity: bytes | None  # the rows with a non-empty ``h`` field
    header_offsets: bytes
    header_data: bytes
    header_nulls: int
    sequences: bytes  # uint64 per row: the ID's sequence part
    format_validity: bytes | None  # the rows with an ``f`` field (a value that is not JSON)
    format_offsets: bytes
    format_data: bytes
    format_nulls: int

    def value_bytes(self) -> int:
        """The bytes of the page's keys, values and headers."""
        return len(self.key_data) + len(self.value_data) + len(self.header_data)

    def first_id(self) -> str:
        """The ID of the page's first entry."""
        (end,) = struct.unpack_from("=i", self.id_offsets, 4)
        return self.id_data[:end].decode()

    def last_id(self) -> str:
        """The ID of the page's last entry."""
        (start,) = struct.unpack_from("=i", self.id_offsets, (self.rows - 1) * 4)
        return self.id_data[start:].decode()


Item = Sequence[Any]  # [id, [field, value, ...]] as hiredis parses it


def columns_of_items(items: Sequence[Item]) -> PageColumns:
    """The columns of parsed items (an XRANGE reply, or a snapshot's page)."""
    ids, keys, values, headers, formats = [], [], [], [], []
    for item in items:
        if not isinstance(item, list) or len(item) != 2 or not isinstance(item[0], bytes):
            raise ValueError("not an XRANGE reply")
        fields = item[1] or []
        if not isinstance(fields, list) or len(fields) % 2:
            raise ValueError("not an XRANGE reply")
        ids.append(item[0])
        key, value, header, fmt = _chosen(fields)
        keys.append(key)
        values.append(value)
        headers.append(header)
        formats.append(fmt)
    key_validity, key_nulls = _validity([key is not None for key in keys])
    text_validity, text_nulls = _validity([is_utf8(value) for value in values])
    header_validity, header_nulls = _validity([header is not None for header in headers])
    format_validity, format_nulls = _validity([fmt is not None for fmt in formats])
    stamps, sequences = zip(*[_split_id(entry_id) for entry_id in ids], strict=True) if ids \
        else ((), ())
    return PageColumns(
        len(ids), *_offsets_and_data(ids), array("q", stamps).tobytes(),
        key_validity, *_offsets_and_data(keys), key_nulls,
        *_offsets_and_data(values), text_validity, text_nulls,
        header_validity, *_offsets_and_data(headers), header_nulls, array("Q", sequences).tobytes(),
        format_validity, *_offsets_and_data(formats), format_nulls)


def _chosen(fields: Sequence[bytes]) -> tuple[bytes | None, bytes, bytes | None, bytes | None]:
    # in the entry's order, the last one wins, as in storage.codec
    key, value, header, fmt = None, b"", None, None
    for name, data in zip(fields[0::2], fields[1::2], strict=True):
        if not isinstance(name, bytes) or not isinstance(data, bytes):
            raise ValueError("not an XRANGE reply")
        if name[:1] == KEYED:
            key, value = name[1:], data
        elif name == b"v":
            value = data
        elif name == b"k":
            key = data
        elif name == b"h":
            header = data or None
        elif name == b"f":
            fmt = data
    return key, value, header, fmt


def _offsets_and_data(cells: Sequence[bytes | None]) -> tuple[bytes, bytes]:
    offsets, position = array("i", [0]), 0
    for cell in cells:
        position += len(cell or b"")
        offsets.append(position)
    return offsets.tobytes(), b"".join(cell or b"" for cell in cells)


def _validity(present: Sequence[bool]) -> tuple[bytes | None, int]:
    nulls = present.count(False)
    if not nulls:
        return None, 0
    bitmap = bytearray((len(present) + 7) // 8)
    for row, there in enumerate(present):
        if there:
            bitmap[row // 8] |= 1 << (row % 8)
    return bytes(bitmap), nulls


def is_utf8(value: bytes) -> bool:
    """Whether ``value`` is UTF-8 text (its ``value_str`` is not null)."""
    try:
        value.decode()
    except UnicodeDecodeError:
        return False
    return True


def _split_id(entry_id: bytes) -> tuple[int, int]:
    """The ID's ms part in microseconds and its sequence."""
    ms, dash, seq = entry_id.partition(b"-")
    if (not dash or not ms.isdigit() or len(ms) > 15 or not seq.isdigit()
            or int(seq) >= 1 << 64):
        raise ValueError("not a stream ID in an XRANGE reply")
    return int(ms) * 1000, int(seq)
