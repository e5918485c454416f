"""What the archive's segments and store do, whatever the store: inherited by the tests on a local
path (tests/unit) and on an S3-compatible server (tests/integration), which give ``store``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import orjson
import pytest

from storage.archive.names import parse_segment_name, segment_name, topic_dir
from storage.archive.object_store import ArchiveStore
from storage.archive.segment_reader import (
    first_at_or_after_time,
    read_key,
    read_range,
    read_summary,
    read_table,
)
from storage.archive.segments import RawEntry, SegmentSettings, write_segment
from storage.codec import decode_entry
from storage.errors import ArchiveUnavailable
from storage.models import StoredEntry

BASE_MS = 1_700_000_000_000
SMALL_GROUPS = SegmentSettings(row_group_max_rows=7)  # many row groups from few entries

EVERY_KIND: list[RawEntry] = [
    (b"1700000000000-0", [b"v", b'{"keyless":1}']),
    (b"1700000000000-1", [b"Korder-7", b'{"keyed":2}']),
    (b"1700000000001-0", [b"K\x00\xff/\n%K\xc3", b"\x00\x01\xfe\xff", b"f", b"b"]),
    (b"1700000000002-5", {b"Kk": b"[]", b"h": orjson.dumps({"trace": "t-1", "\u00e9": "\u00fc"})}),
    (b"1700000000003-0", [b"v", b"", b"f", b"b", b"h", b'{"a":"1"}']),
    (b"1700000000004-0", [b"v", b'"old"', b"k", b"legacy-key", b"f", b"j"]),
    ("1700000000004-1", [b"K", b"0"]),
    (b"1700000000004-2", [b"h", b'{"only":"headers"}']),
]


def expected(partition: int, entries: Sequence[RawEntry]) -> list[StoredEntry]:
    """What the hot tier's decoder makes of the same entries."""
    return [decode_entry(partition, entry_id, _as_map(fields)) for entry_id, fields in entries]


def numbered(count: int, first: int = 0, per_ms: int = 3) -> list[RawEntry]:
    """``count`` keyless JSON entries, ``per_ms`` per millisecond, keyed ``k<i % 5>``."""
    return [(f"{BASE_MS + i // per_ms}-{i % per_ms}".encode(),
             [f"Kk{i % 5}".encode(), orjson.dumps({"n": i})]) for i in range(first, first + count)]


def offsets(entries: Sequence[StoredEntry]) -> list[str]:
    return [entry.offset for entry in entries]


def _as_map(fields: Sequence[bytes] | Mapping[bytes, bytes]) -> dict[bytes, bytes]:
    if isinstance(fields, Mapping):
        return dict(fields)
    return dict(zip(fields[::2], fields[1::2], strict=True))


class ArchiveBehaviours:
    """The behaviours; a subclass gives the ``store`` fixture."""

    async def test_segment_round_trips_every_column(self, store: ArchiveStore) -> None:
        info = await write_segment(store, "orders", 3, EVERY_KIND)
        assert await read_range(store, info.name) == expected(3, EVERY_KIND)

    async def test_segment_table_keeps_the_stored_fields(self, store: ArchiveStore) -> None:
        info = await write_segment(store, "orders", 0, EVERY_KIND)
        table = await read_table(store, info.name, ["key", "format", "headers"])
        assert table.column_names == ["key", "format", "headers"]
        assert table["key"].to_pylist()[:3] == [None, b"order-7", b"\x00\xff/\n%K\xc3"]
        assert table["format"].to_pylist()[2:6] == ["b", None, "b", "j"]
        assert table["headers"][4].as_py() == b'{"a":"1"}'

    async def test_summary_describes_the_segment(self, store: ArchiveStore) -> None:
        info = await write_segment(store, "orders", 2, EVERY_KIND)
        assert info.name == segment_name("orders", 2, "1700000000000-0")
        assert (info.first_offset, info.last_offset, info.count) == (
            "1700000000000-0", "1700000000004-2", len(EVERY_KIND))
        assert (info.min_timestamp_ms, info.max_timestamp_ms) == (BASE_MS, BASE_MS + 4)
        assert info.bytes == await store.size(info.name)
        assert await read_summary(store, info.name) == info

    async def test_range_is_exact_at_both_ends(self, store: ArchiveStore) -> None:
        entries = numbered(60)
        info = await write_segment(store, "t", 0, entries, SMALL_GROUPS)
        every = offsets(await read_range(store, info.name))
        assert every == [entry_id.decode() for entry_id, _ in entries]  # type: ignore[union-attr]
        assert offsets(await read_range(store, info.name, after=every[9], until=every[20])) == \
            every[10:21]
        assert offsets(await read_range(store, info.name, after=every[9], limit=4)) == every[10:14]
        # bounds that are no entry's offset: the millisecond's other sequence numbers
        between = await read_range(store, info.name, after=f"{BASE_MS + 3}-7",
                                   until=f"{BASE_MS + 5}-1")
        assert offsets(between) == [f"{BASE_MS + 4}-{s}" for s in range(3)] + [
            f"{BASE_MS + 5}-0", f"{BASE_MS + 5}-1"]
        assert await read_range(store, info.name, after=every[-1]) == []

    @pytest.mark.parametrize("page", [1, 4, 7, 10, 25])
    async def test_paging_through_a_segment_gives_every_entry_once(
            self, store: ArchiveStore, page: int) -> None:
        entries = numbered(60)
        info = await write_segment(store, "t", 2, entries, SMALL_GROUPS)
        for _ in range(2):  # decoded from the file, then again from the decoded row groups
            read: list[StoredEntry] = []
            while chunk := await read_range(store, info.name, after=read[-1].offset if read
                                            else None, limit=page):
                assert len(chunk) <= page
                read += chunk
            assert read == expected(2, entries)

    async def test_adjacent_segments_read_back_without_gap_or_duplicate(
            self, store: ArchiveStore) -> None:
        entries = numbered(50)
        first = await write_segment(store, "t", 1, entries[:23], SMALL_GROUPS)
        second = await write_segment(store, "t", 1, entries[23:], SMALL_GROUPS)
        assert await store.list_segments("t", 1) == [first.name, second.name]
        cut = first.last_offset
        read = [*await read_range(store, first.name, after=f"{BASE_MS}-1"),
                *await read_range(store, second.name, after=cut)]
        assert read == expected(1, entries[2:])

    async def test_time_lookup_finds_the_first_offset_at_or_after(
            self, store: ArchiveStore) -> None:
        entries = numbered(20, per_ms=1)[::2]  # one entry every other millisecond
        info = await write_segment(store, "t", 0, entries, SegmentSettings(row_group_max_rows=2))
        assert await first_at_or_after_time(store, info.name, 0) == f"{BASE_MS}-0"
        assert await first_at_or_after_time(store, info.name, BASE_MS + 6) == f"{BASE_MS + 6}-0"
        assert await first_at_or_after_time(store, info.name, BASE_MS + 7) == f"{BASE_MS + 8}-0"
        assert await first_at_or_after_time(store, info.name, BASE_MS + 19) is None

    async def test_key_lookup_returns_the_keys_entries_in_offset_order(
            self, store: ArchiveStore) -> None:
        entries = numbered(40)
        info = await write_segment(store, "t", 0, entries, SMALL_GROUPS)
        want = [entry for entry in expected(0, entries) if entry.key == b"k3"]
        assert await read_key(store, info.name, b"k3") == want
        assert await read_key(store, info.name, b"k3", after=want[1].offset, limit=3) == want[2:5]
        assert await read_key(store, info.name, b"absent") == []

    async def test_listing_is_in_offset_order(self, store: ArchiveStore) -> None:
        # 999 < 1000 as numbers, not as text: names are zero-padded
        for first in ("1000-0", "999-12", "999-3", "12000000000000-0"):
            await write_segment(store, "t", 4, [(first, [b"v", b"1"])])
        listed = await store.list_segments("t", 4)
        assert [parse_segment_name(name).first_offset for name in listed] == [
            "999-3", "999-12", "1000-0", "12000000000000-0"]
        assert await store.list_segments("t", 5) == []

    @pytest.mark.parametrize("topic", ["a/b", "a%2Fb", "with space", "\u00fcml\u00e4ut/\u6f22",
                                       ".hidden", "..", "100%"])
    async def test_topic_names_with_unsafe_characters_round_trip(
            self, store: ArchiveStore, topic: str) -> None:
        info = await write_segment(store, topic, 0, numbered(3))
        (listed,) = await store.list_segments(topic, 0)
        assert listed == info.name
        assert parse_segment_name(listed).topic == topic
        assert (await read_summary(store, listed)).topic == topic

    async def test_deleting_a_topic_leaves_the_others(self, store: ArchiveStore) -> None:
        kept = await write_segment(store, "a%2Fb", 0, numbered(3))
        await write_segment(store, "a/b", 0, numbered(3))
        await write_segment(store, "a/b", 1, numbered(3))
        await store.delete_prefix(topic_dir("a/b"))
        await store.delete_prefix(topic_dir("never-written"))
        assert await store.list_segments("a/b", 0) == []
        assert await store.list_segments("a/b", 1) == []
        assert await store.list_segments("a%2Fb", 0) == [kept.name]

    async def test_failed_write_leaves_no_visible_segment(self, store: ArchiveStore) -> None:
        out_of_order = [*numbered(5, first=5), *numbered(5)]
        with pytest.raises(ValueError, match="increasing offset order"):
            await write_segment(store, "t", 0, out_of_order)
        with pytest.raises(ValueError, match="stream ID"):
            await write_segment(store, "t", 0, [(b"not-an-id", [b"v", b"1"])])
        assert await store.list_segments("t", 0) == []

    async def test_deleting_a_segment_is_idempotent(self, store: ArchiveStore) -> None:
        info = await write_segment(store, "t", 0, numbered(3))
        await store.delete(info.name)
        await store.delete(info.name)
        assert await store.list_segments("t", 0) == []
        with pytest.raises(ArchiveUnavailable):
            await read_range(store, info.name)
        with pytest.raises(ArchiveUnavailable):
            await store.size(info.name)

    async def test_rewriting_a_segment_replaces_it_whole(self, store: ArchiveStore) -> None:
        await write_segment(store, "t", 0, numbered(30))
        info = await write_segment(store, "t", 0, numbered(4))
        assert await store.list_segments("t", 0) == [info.name]
        assert offsets(await read_range(store, info.name)) == [
            f"{BASE_MS}-0", f"{BASE_MS}-1", f"{BASE_MS}-2", f"{BASE_MS + 1}-0"]

    async def test_a_file_that_is_no_segment_is_archive_unavailable(
            self, store: ArchiveStore) -> None:
        name = segment_name("t", 0, "1-0")
        await store.put(name, b"PAR1 but not parquet")
        with pytest.raises(ArchiveUnavailable):
            await read_range(store, name)

    async def test_a_closed_store_refuses_calls(self, store: ArchiveStore) -> None:
        await store.check()
        await store.aclose()
        await store.aclose()
        with pytest.raises(ArchiveUnavailable, match="closed"):
            await store.list_segments("t", 0)
