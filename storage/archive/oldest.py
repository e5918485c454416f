"""The oldest entries of a partition's stream, read for a move: XRANGE pages decoded from the
reply's bytes into Arrow buffers (``storage._speedups``), the event loop free between pages."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Literal

from storage._speedups import page_columns
from storage.pages import PageColumns, columns_of_items

# A page's reply stays around this size whatever the entries weigh, so a move holds the event
# loop for one page's decoding at a time; the first page, of entries of unknown size, is small.
PAGE_BYTES = 1 << 20
FIRST_PAGE = MIN_PAGE = 16
MAX_PAGE = 10_000

Fetch = Callable[[str, int], Awaitable[PageColumns]]  # (XRANGE start, COUNT) -> a page


class PageShape:
    """One XRANGE reply read whole from the received bytes into a page's columns
    (``storage.wire.protocol.ReplyShape``); an error reply is raised."""

    replies = 1

    def read(self, data: bytes, offset: int, /) -> tuple[PageColumns, int] | Literal[False] | None:
        """The page and where its reply ends; False while it is cut; None for an error reply
        (hiredis reads it and ``fold`` raises it)."""
        read = page_columns(data, offset)
        if read is None:
            return False
        return None if isinstance(read, str) else read

    def fold(self, replies: list[Any], /) -> PageColumns:
        """The page of a reply hiredis read (an error reply raised)."""
        (reply,) = replies
        if isinstance(reply, BaseException):
            raise reply
        return columns_of_items(reply or [])


async def oldest_pages(fetch: Fetch, max_entries: int, max_bytes: int) -> list[PageColumns]:
    """The stream's oldest entries, page after page, up to ``max_entries`` and about
    ``max_bytes`` of keys, values and headers (the page that reaches it is the last)."""
    pages: list[PageColumns] = []
    start, entries, size, count = "-", 0, 0, FIRST_PAGE
    while entries < max_entries and size < max_bytes:
        asked = min(count, max_entries - entries)
        page = await fetch(start, asked)
        if page.rows:
            pages.append(page)
            entries, size = entries + page.rows, size + page.value_bytes()
        if page.rows < asked:
            break
        start = "(" + page.last_id()
        count = max(MIN_PAGE, min(MAX_PAGE, PAGE_BYTES * page.rows // max(1, page.value_bytes())))
    return pages
