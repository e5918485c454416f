"""The cache of decoded row groups: a row group asked for while it is being decoded is decoded
once, and a failed decode leaves nothing behind."""

from __future__ import annotations

import threading

import pyarrow as pa
import pytest

from storage.archive.row_groups import RowGroupCache

KEY = ("t/0/segment.parquet", 0, None)


def test_a_row_group_asked_for_while_being_decoded_is_decoded_once() -> None:
    cache, started, release = RowGroupCache(1 << 20), threading.Event(), threading.Event()
    decodes: list[str] = []

    def slow_decode() -> pa.Table:
        decodes.append("first")
        started.set()
        release.wait()
        return pa.table({"n": [1, 2, 3]})

    def second_decode() -> pa.Table:
        decodes.append("second")
        return pa.table({"n": [0]})

    got: dict[str, pa.Table] = {}
    first = threading.Thread(target=lambda: got.update(first=cache.get(KEY, slow_decode)))
    first.start()
    started.wait()
    assert KEY in cache  # being decoded: nothing to take yet
    assert cache.cached(KEY) is None
    second = threading.Thread(target=lambda: got.update(second=cache.get(KEY, second_decode)))
    second.start()
    release.set()
    first.join()
    second.join()
    assert decodes == ["first"]
    assert got["first"] is got["second"]
    assert cache.cached(KEY) is got["first"]


def test_a_failed_decode_raises_and_the_next_ask_decodes_again() -> None:
    cache = RowGroupCache(1 << 20)

    def broken() -> pa.Table:
        raise OSError("the file went away")

    with pytest.raises(OSError, match="went away"):
        cache.get(KEY, broken)
    assert KEY not in cache
    assert cache.get(KEY, lambda: pa.table({"n": [7]}))["n"].to_pylist() == [7]
