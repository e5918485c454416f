"""Decoded row groups and parsed footers of segment files, kept by bounded LRUs: a replay pages
through a row group many times, and a segment never changes once written (its name is never reused
for other bytes)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

RowGroupKey = tuple[str, int, tuple[str, ...] | None]  # segment name, row group, columns
# a parsed footer: the Parquet metadata, the segment's summary, each row group's offset_ms bounds
Footer = tuple[pq.FileMetaData, Any, list[tuple[int, int]]]
FOOTERS = 4096


class RowGroupCache:
    """Up to ``max_bytes`` of decoded row groups, least recently used out first; safe from the
    store's I/O threads. A row group being decoded is decoded once: who asks for it meanwhile
    waits for that decode (a read ahead and the page that needs it)."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._tables: OrderedDict[RowGroupKey, pa.Table] = OrderedDict()
        self._decoding: dict[RowGroupKey, Future[pa.Table]] = {}
        self._bytes = 0
        self._footers: OrderedDict[str, Footer] = OrderedDict()
        self._lock = threading.Lock()

    def footer(self, name: str) -> Footer | None:
        """The segment's parsed footer, when kept."""
        with self._lock:
            footer = self._footers.get(name)
            if footer is not None:
                self._footers.move_to_end(name)
            return footer

    def keep_footer(self, name: str, footer: Footer) -> None:
        """Keep a parsed footer (the least recently used out past FOOTERS)."""
        with self._lock:
            self._footers[name] = footer
            while len(self._footers) > FOOTERS:
                self._footers.popitem(last=False)

    def __contains__(self, key: RowGroupKey) -> bool:
        """Whether the table is cached or being decoded."""
        with self._lock:
            return key in self._tables or key in self._decoding

    def cached(self, key: RowGroupKey) -> pa.Table | None:
        """The cached table, else None (never waits: safe on the event loop)."""
        with self._lock:
            table = self._tables.get(key)
            if table is not None:
                self._tables.move_to_end(key)
            return table

    def get(self, key: RowGroupKey, decode: Callable[[], pa.Table]) -> pa.Table:
        """The cached table, else the one another thread is decoding, else ``decode()``'s (kept
        when it fits)."""
        with self._lock:
            table = self._tables.get(key)
            if table is not None:
                self._tables.move_to_end(key)
                return table
            pending = self._decoding.get(key)
            if pending is None:
                self._decoding[key] = decoding = Future[pa.Table]()
        if pending is not None:  # decoding now, on another thread: never one queued behind us
            return pending.result()
        return self._decode_once(key, decode, decoding)

    def _decode_once(self, key: RowGroupKey, decode: Callable[[], pa.Table],
                     decoding: Future[pa.Table]) -> pa.Table:
        try:
            table = decode()
        except BaseException as exc:
            self._done(key)
            decoding.set_exception(exc)
            raise
        self._keep(key, table)
        self._done(key)  # kept first: whoever comes next finds it cached
        decoding.set_result(table)
        return table

    def _done(self, key: RowGroupKey) -> None:
        with self._lock:
            del self._decoding[key]

    def _keep(self, key: RowGroupKey, table: pa.Table) -> None:
        size = table.nbytes
        if size > self.max_bytes:
            return
        with self._lock:
            if key in self._tables:
                return
            self._tables[key] = table
            self._bytes += size
            while self._bytes > self.max_bytes:
                _, evicted = self._tables.popitem(last=False)
                self._bytes -= evicted.nbytes
