"""An XRANGE reply's columns in Python, the reference of the compiled ``_pages``: hiredis parses
the reply, ``storage.pages.columns_of_items`` builds the buffers (test_page_columns.py pins the two
together); IDs' text from their two numbers by Arrow compute."""

from __future__ import annotations

from typing import Any

import hiredis
import pyarrow as pa
import pyarrow.compute as pc

from storage.pages import PageColumns, columns_of_items

__all__ = ["id_texts", "page_columns"]


def page_columns(data: bytes | bytearray | memoryview,
                 offset: int = 0) -> tuple[PageColumns, int] | str | None:
    """The columns of the XRANGE reply at ``offset`` of ``data`` and where it ends; None while it
    is incomplete; an error reply's text."""
    if not 0 <= offset <= len(data):
        raise ValueError("offset outside the data")
    reader = hiredis.Reader()
    reader.feed(bytes(data[offset:]))
    try:
        items = reader.gets()
    except (hiredis.ProtocolError, TypeError) as exc:  # TypeError: a RESP3 map keyed by a list
        raise ValueError("not an XRANGE reply") from exc
    if items is False:
        return None
    if isinstance(items, hiredis.ReplyError):
        return str(items)
    if not isinstance(items, list):
        raise ValueError("not an XRANGE reply")
    columns = columns_of_items(items)
    return columns, offset + _encoded_size(items)


def _encoded_size(reply: Any) -> int:
    """The bytes of a parsed reply as Redis writes it (no leading zeros, so one way only)."""
    if reply is None:
        return 5  # $-1\r\n
    if isinstance(reply, list):
        return len(b"*%d\r\n" % len(reply)) + sum(_encoded_size(item) for item in reply)
    if isinstance(reply, bytes):
        return len(b"$%d\r\n" % len(reply)) + len(reply) + 2
    raise ValueError("not an XRANGE reply")


def id_texts(ms: pa.Array, seq: pa.Array) -> pa.Array:
    """Stream IDs' text, ``<ms>-<seq>``, from their two uint64 columns; ValueError unless both
    have a value for each ID."""
    if len(ms) != len(seq) or ms.null_count or seq.null_count:
        raise ValueError("an ID needs both its parts")
    return pc.binary_join_element_wise(pc.cast(ms, pa.string()), pc.cast(seq, pa.string()), "-")
