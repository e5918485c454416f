"""The lean goal-5 consumer (bench/group_drain.py): it must find every message the gateway frames,
whatever the chunking of the byte stream, and send ack frames the gateway's own parser reads
back."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import orjson
from hypothesis import given
from hypothesis import strategies as st

from gateway.delivery.wire import message_frame, text_frames
from gateway.delivery.ws_frames import parse_frame
from storage.models import StoredEntry, ValueFormat

ROOT = Path(__file__).resolve().parents[2]


def _group_drain() -> ModuleType:
    spec = importlib.util.spec_from_file_location("group_drain", ROOT / "bench" / "group_drain.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("group_drain", module)
    spec.loader.exec_module(module)
    return module


group_drain = _group_drain()


def _entry(partition: int, offset: str, value: bytes, key: bytes | None) -> StoredEntry:
    return StoredEntry(partition=partition, offset=offset, value=value,
                       value_format=ValueFormat.JSON, key=key, headers={"h": "1"},
                       timestamp_ms=int(offset.split("-")[0]))


ENTRIES = st.lists(st.tuples(st.integers(0, 63), st.integers(1, 2**41), st.integers(0, 99),
                             st.sampled_from([b'{"a":1}', b'"x\\"partition\\":1"',
                                              b"[" + b"7," * 300 + b"7]"]),
                             st.one_of(st.none(), st.binary(max_size=20))), min_size=1, max_size=30)


@given(entries=ENTRIES, topic=st.text(min_size=1, max_size=40),
       cuts=st.lists(st.integers(1, 400), max_size=20))
def test_scanner_finds_each_frame_once_however_stream_is_cut(
        entries: list[tuple[int, int, int, bytes, bytes | None]], topic: str,
        cuts: list[int]) -> None:
    stored = [_entry(p, f"{ms}-{seq}", value, key) for p, ms, seq, value, key in entries]
    stream = text_frames([orjson.dumps({"type": "assignment", "partitions": [0]})]
                         + [message_frame(topic, entry, 1) for entry in stored])
    scanner, found, at = group_drain.Scanner(), [], 0
    for cut in [*cuts, len(stream)]:
        found += scanner.feed(stream[at:at + cut])
        at += cut
    found += scanner.feed(stream[at:])
    assert [orjson.loads(item) for item in found] == [{"partition": e.partition, "offset": e.offset}
                                                      for e in stored]


@given(count=st.integers(1, 1200), batch=st.integers(1, 500))
def test_ack_frames_are_masked_and_read_back_in_batches(count: int, batch: int) -> None:
    items = [b'{"partition":%d,"offset":"%d-0"}' % (i % 8, i) for i in range(count)]
    wire, at, acked = b"".join(group_drain.ack_frames(items, batch)), 0, []
    while at < len(wire):
        parsed = parse_frame(wire, at, 1 << 24)
        assert parsed is not None
        first, payload, at = parsed
        assert first == 0x81
        frame = orjson.loads(payload)
        assert frame["type"] == "ack"
        assert 1 <= len(frame["messages"]) <= batch
        acked += frame["messages"]
    assert acked == [orjson.loads(item) for item in items]
