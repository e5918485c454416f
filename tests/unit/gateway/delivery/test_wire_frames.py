"""Message frames are assembled from pieces: byte-for-byte what orjson gives for the same
document."""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway import _speedups
from gateway.delivery import wire
from gateway.delivery.wire import batched, message_frame, message_frames
from gateway.documents import entry_document
from storage.models import Delivery, StoredEntry, ValueFormat


def reference(topic: str, entry: StoredEntry, delivery_count: int) -> bytes:
    return orjson.dumps(
        {
            "type": "message", "topic": topic, **entry_document(entry),
            "delivery_count": delivery_count
        }
    )


ENTRIES = [
    StoredEntry(
        0, "1795418703164-0", b'{"total":42}', ValueFormat.JSON, b"alice", {}, 1795418703164
    ),
    StoredEntry(
        7, "1-12", b"[1,2,3]", ValueFormat.JSON, None, {"tenant": "a", 'quote"d': "back\\slash\n"},
        1
    ),
    StoredEntry(
        3, "1795418703164-99", b"\x00\xff binary", ValueFormat.BINARY, "ключ-é-🙂".encode(), {},
        1795418703164
    ),
    StoredEntry(2, "5-0", b'"text"', ValueFormat.JSON, b"\xff\xfe not utf-8", {"ü": "🙂"}, 5),
    StoredEntry(1, "6-0", b"", ValueFormat.BINARY, b"", {}, 6),
]


@pytest.mark.parametrize("entry", ENTRIES)
@pytest.mark.parametrize("topic", ["orders", 'we"ird\\topic-é'])
def test_message_frames_match_orjson_encoding(topic: str, entry: StoredEntry) -> None:
    for delivery_count in (1, 17):
        frame = message_frame(topic, entry, delivery_count)
        assert frame == reference(topic, entry, delivery_count)
        assert orjson.loads(frame)["type"] == "message"


# --- the compiled page framing (gateway._speedups._frames) ----------------------------------------
@pytest.fixture(scope="module")
def compiled(compiled_part: Callable[[str], ModuleType]) -> ModuleType:
    return compiled_part("gateway._speedups._frames")


def test_the_compiled_framing_is_chosen_unless_switched_off(compiled: ModuleType) -> None:
    chosen = (_speedups.message_frames_or_none, _speedups.text_frames_or_none)
    assert (chosen == (compiled.message_frames, compiled.text_frames)) is not _speedups.OFF


KEYS = st.one_of(st.none(), st.binary(max_size=12), st.text(max_size=8).map(str.encode),
                 st.sampled_from([b'"', b"\\", b"\x7f", b"\x1f", b"plain-key_1/~", b""]))
HEADERS = st.dictionaries(st.text(max_size=4), st.text(max_size=4), max_size=3)
OFFSETS = st.from_regex(r"\A[0-9]{1,20}-[0-9]{1,3}\Z")
STORED = st.builds(
    StoredEntry, partition=st.integers(0, 2**63 - 1), offset=OFFSETS,
    value=st.one_of(st.sampled_from([b"{}", b"[1]", b'"s"']), st.binary(max_size=16)),
    value_format=st.sampled_from(ValueFormat), key=KEYS, headers=HEADERS,
    timestamp_ms=st.integers(0, 2**63 - 1)
)
DELIVERIES = st.lists(
    st.builds(Delivery, entry=STORED, delivery_count=st.integers(1, 2**31)), max_size=12
)


@given(deliveries=DELIVERIES, topic=st.text(max_size=10))
def test_compiled_page_frames_are_the_references_bytes(
    compiled: ModuleType, deliveries: list[Delivery], topic: str
) -> None:
    expected = [reference(topic, d.entry, d.delivery_count) for d in deliveries]
    assert (
        compiled.message_frames(wire._frame_prefix(topic), deliveries, wire._FRAME_LAYOUT)
        == expected
    )
    assert message_frames(topic, deliveries) == expected


@pytest.mark.parametrize("odd", [
    StoredEntry(0, "1-0", "str value", ValueFormat.JSON, None, {}, 1),  # type: ignore[arg-type]
    StoredEntry(0, "1-0", b"{}", ValueFormat.JSON, "str key", {}, 1),  # type: ignore[arg-type]
    StoredEntry(0, "1-é", b"{}", ValueFormat.JSON, None, {}, 1),
    StoredEntry(True, "1-0", b"{}", ValueFormat.JSON, None, {}, 1),
    StoredEntry(0, "1-0", b"{}", ValueFormat.JSON, None, {}, 2**70),
])
def test_fields_of_unexpected_types_are_framed_by_the_reference(
    compiled: ModuleType, odd: StoredEntry
) -> None:
    deliveries = [Delivery(ENTRIES[0], 1), Delivery(odd, 1)]
    assert compiled.message_frames(wire._frame_prefix("t"), deliveries, wire._FRAME_LAYOUT) is None
    try:
        expected: object = [message_frame("t", d.entry, d.delivery_count) for d in deliveries]
    except Exception as exc:  # the reference's own error, raised by both
        expected = type(exc)
    try:
        got: object = message_frames("t", deliveries)
    except Exception as exc:
        got = type(exc)
    assert got == expected


@given(
    st.lists(
        st.sampled_from([0, 1, 125, 126, 127, 65_535, 65_536, 70_000]).map(lambda n: b"x" * n),
        max_size=6,
    )
)
def test_compiled_text_frames_match_the_reference_byte_for_byte(
    compiled: ModuleType, payloads: list[bytes]
) -> None:
    assert wire.text_frames(payloads) == _speedups.text_frames_python(payloads)
    assert compiled.text_frames(payloads) == _speedups.text_frames_python(payloads)


def test_text_frames_of_other_payload_types_take_the_reference(compiled: ModuleType) -> None:
    assert wire.text_frames((b"a", b"bc")) == _speedups.text_frames_python([b"a", b"bc"])
    assert wire.text_frames([b"a", bytearray(b"bc")]) == b"\x81\x01a\x81\x02bc"  # type: ignore[list-item]
    assert compiled.text_frames([b"a", bytearray(b"bc")]) is None
    assert compiled.text_frames((b"a",)) is None


def test_batched_frames_wrap_message_runs_around_controls() -> None:
    control = orjson.dumps({"type": "assignment", "generation": 1, "partitions": [0]})
    messages = [orjson.dumps({"type": "message", "partition": 0, "offset": f"{n}-0"})
                for n in range(3)]
    out = [orjson.loads(frame) for frame in batched([messages[0], control, *messages[1:]])]
    assert out == [{"type": "messages", "messages": [orjson.loads(messages[0])]},
                   orjson.loads(control),
                   {"type": "messages", "messages": [orjson.loads(m) for m in messages[1:]]}]
    assert batched([control]) == [control]
