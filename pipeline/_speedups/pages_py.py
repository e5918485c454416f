"""An XRANGE reply's columns in Python, the reference of the compiled ``_pages``: hiredis parses
the reply, ``pipeline.pages.columns_of_items`` builds the buffers (test_page_columns.py pins the two
together)."""

from __future__ import annotations

import hiredis

from pipeline.pages import PageColumns, columns_of_items

__all__ = ["page_columns"]


def page_columns(reply: bytes | bytearray | memoryview) -> PageColumns | str | None:
    """The columns of a whole XRANGE reply; None while it is incomplete; an error reply's text."""
    reader = hiredis.Reader()
    reader.feed(bytes(reply))
    try:
        items = reader.gets()
    except (hiredis.ProtocolError, TypeError) as exc:  # TypeError: a RESP3 map keyed by a list
        raise ValueError("not an XRANGE reply") from exc
    if items is False:
        return None
    if isinstance(items, hiredis.ReplyError):
        return str(items)
    if reader.has_data() or not isinstance(items, list):
        raise ValueError("not an XRANGE reply")
    return columns_of_items(items)
