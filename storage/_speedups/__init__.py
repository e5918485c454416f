"""Storage's compiled parts or their Python references (``*_py``), chosen once at import under the
one switch ``STREAMGATE_NO_EXTENSIONS``, as aiohttp picks reader_c or reader_py: feature modules
import the chosen functions from here, never a compiled module."""

from __future__ import annotations

import contextlib
import os
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from storage._speedups.entries_py import decode_raw_entries as decode_raw_entries_python
from storage._speedups.entries_py import entries_of_columns as entries_of_columns_python
from storage._speedups.entries_py import items_of_columns
from storage._speedups.pages_py import id_texts as id_texts_python
from storage._speedups.wire_py import PartitionColumns, TransactionsRead
from storage._speedups.wire_py import fold_transaction as fold_transaction_python
from storage.entry_fields import FORMATS, decode_headers
from storage.models import StoredEntry, ValueFormat
from storage.pages import PageColumns

__all__ = ["ENTRY_LAYOUT", "OFF", "PartitionColumns", "TransactionsRead",
           "decode_raw_entries_or_none", "decode_raw_entries_python", "entries_of_columns",
           "entries_of_columns_python", "fold_transaction_or_none", "fold_transaction_python",
           "id_texts", "id_texts_python", "in_input_order", "items_of_columns", "page_columns",
           "read_transactions", "reply_offsets", "split_by_partition", "xadd_transaction"]

# Read at import, before settings exist; each package's _speedups reads it by the same rule
# (tests/unit/test_speedups.py keeps them in step) so that no package imports another's.
OFF = os.environ.get("STREAMGATE_NO_EXTENSIONS", "").strip().lower() not in ("", "0", "false", "no")

# An archived item table's column types the compiled part reads (others: the reference)
_BINARY, _FORMATS_TYPE = pa.binary(), pa.dictionary(pa.int32(), pa.string())
_UINT64 = pa.uint64()
_BINARY_FORMAT = ValueFormat.BINARY

# What the compiled entry decoder reads, in its order: the class, its slot descriptors in
# declaration order, the f values, JSON, binary, the headers decoder, the empty value.
ENTRY_LAYOUT = (StoredEntry, tuple(vars(StoredEntry)[name] for name in StoredEntry.__slots__),
                FORMATS, ValueFormat.JSON, ValueFormat.BINARY, decode_headers, b"")


def _declines(*_: Any) -> None:
    """A compiled part's stand-in: it answers nothing, the caller's reference answers it all."""
    return None


if TYPE_CHECKING or OFF:
    from storage._speedups.wire_py import (
        in_input_order,
        read_transactions,
        reply_offsets,
        split_by_partition,
        xadd_transaction,
    )
else:
    try:
        from storage._speedups._wire import (
            in_input_order,
            read_transactions,
            reply_offsets,
            split_by_partition,
            xadd_transaction,
        )
    except ImportError:  # built without a C compiler: the references, same bytes
        from storage._speedups.wire_py import (
            in_input_order,
            read_transactions,
            reply_offsets,
            split_by_partition,
            xadd_transaction,
        )

# The compiled fold and entry decoder decline (None) whatever they are not sure of; the references
# (fold_transaction_python, decode_raw_entries_python) then answer it.
if TYPE_CHECKING:
    from storage._speedups._entries import decode_raw_entries as decode_raw_entries_or_none
    from storage._speedups._wire import fold_transaction as fold_transaction_or_none
else:
    decode_raw_entries_or_none = fold_transaction_or_none = _declines
    if not OFF:
        with contextlib.suppress(ImportError):  # built without a C compiler: the references
            from storage._speedups._wire import fold_transaction as fold_transaction_or_none
        with contextlib.suppress(ImportError):
            from storage._speedups._entries import (
                decode_raw_entries as decode_raw_entries_or_none,
            )

if TYPE_CHECKING or OFF:
    from storage._speedups.pages_py import id_texts, page_columns
else:
    try:
        from storage._speedups._pages import id_texts as _compiled_ids
        from storage._speedups._pages import page_columns as _compiled_pages
    except ImportError:  # built without a C compiler: the reference, same columns
        from storage._speedups.pages_py import id_texts, page_columns
    else:
        def id_texts(ms: pa.Array, seq: pa.Array) -> pa.Array:
            """Stream IDs' text, ``<ms>-<seq>``, from their two uint64 columns, written in C."""
            if ms.type != _UINT64 or seq.type != _UINT64 or ms.null_count or seq.null_count:
                return id_texts_python(ms, seq)
            if len(ms) != len(seq):
                raise ValueError("an ID needs both its parts")
            offsets, data = _compiled_ids(ms.buffers()[1], ms.offset, seq.buffers()[1], seq.offset,
                                          len(ms))
            return pa.StringArray.from_buffers(len(ms), pa.py_buffer(offsets), pa.py_buffer(data))


        def page_columns(data: bytes | bytearray | memoryview,
                         offset: int = 0) -> tuple[PageColumns, int] | str | None:
            """The columns of the XRANGE reply at ``offset`` read in C and where it ends; None
            while it is incomplete; an error reply's text."""
            raw = _compiled_pages(data, offset)
            if isinstance(raw, tuple):
                return PageColumns(*raw[1:]), raw[0]
            return raw

if TYPE_CHECKING or OFF:
    from storage._speedups.entries_py import entries_of_columns
else:
    try:
        from storage._speedups._entries import entries_of_columns as _compiled_columns
    except ImportError:  # built without a C compiler: the reference, same entries
        from storage._speedups.entries_py import entries_of_columns
    else:
        def entries_of_columns(partition: int, ids: pa.Array, names: pa.Array, values: pa.Array,
                               formats: pa.Array, headers: pa.Array) -> list[StoredEntry]:
            """The entries of an item table's columns (one chunk each), built in C from their
            buffers; the reference builds those the compiled part is unsure of."""
            columns = ids, names, values, formats, headers
            buffers = _column_buffers(columns)
            entries = None if buffers is None else _compiled_columns(partition, len(ids), *buffers,
                                                                     ENTRY_LAYOUT)
            return entries if entries is not None else entries_of_columns_python(partition,
                                                                                 *columns)


def _column_buffers(columns: tuple[pa.Array, ...]) -> tuple[Any, ...] | None:
    """The item columns as the compiled part reads them (None for a column of nulls); None when
    one is not of the item table's types or lengths (the reference decides)."""
    ids, names, values, formats, headers = columns
    if not all(isinstance(column, pa.Array) and len(column) == len(ids) for column in columns) or (
            formats.type != _FORMATS_TYPE
            or any(column.type != _BINARY for column in (ids, names, values, headers))):
        return None
    return (_buffers(ids), _buffers(names), _buffers(values),
            None if formats.null_count == len(formats) else _format_buffers(formats),
            None if headers.null_count == len(headers) else _buffers(headers))


def _buffers(column: pa.Array) -> tuple[Any, ...]:
    """A binary column's validity, offsets and data buffers and its offset into them."""
    return (*column.buffers(), column.offset)


def _format_buffers(formats: pa.DictionaryArray) -> tuple[Any, ...]:
    """The formats' validity and indices, the format each dictionary entry stands for (its
    ``f`` field's, JSON for a null one) and the offset into them."""
    validity, indices = formats.buffers()
    known = tuple(ValueFormat.JSON if text is None else FORMATS.get(text.encode(), _BINARY_FORMAT)
                  for text in formats.dictionary.to_pylist())
    return validity, indices, known, formats.offset
