"""Pipeline's compiled part or its Python reference (``pages_py``), chosen once at import under the
one switch ``STREAMGATE_NO_EXTENSIONS``, as aiohttp picks reader_c or reader_py: feature modules
import the chosen function from here, never the compiled module."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from pipeline.pages import PageColumns

__all__ = ["OFF", "page_columns"]

# Read at import, before settings exist; each package's _speedups reads it by the same rule
# (tests/unit/test_speedups.py keeps them in step) so that no package imports another's.
OFF = os.environ.get("STREAMGATE_NO_EXTENSIONS", "").strip().lower() not in ("", "0", "false", "no")

if TYPE_CHECKING or OFF:
    from pipeline._speedups.pages_py import page_columns
else:
    try:
        from pipeline._speedups._pages import page_columns as _compiled
    except ImportError:  # built without a C compiler: the reference, same columns
        from pipeline._speedups.pages_py import page_columns
    else:
        def page_columns(reply: bytes | bytearray | memoryview) -> PageColumns | str | None:
            """The columns of a whole XRANGE reply read in C (the fields of ``PageColumns``, in
            its order); None while it is incomplete; an error reply's text."""
            raw = _compiled(reply)
            return PageColumns(*raw) if isinstance(raw, tuple) else raw
