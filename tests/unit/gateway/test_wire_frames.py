"""Message frames are assembled from pieces: byte-for-byte what orjson gives for the same document."""

from __future__ import annotations

import orjson
import pytest

from gateway.delivery.wire import message_frame
from gateway.documents import entry_document
from storage.models import StoredEntry, ValueFormat


def reference(topic: str, entry: StoredEntry, delivery_count: int) -> bytes:
    return orjson.dumps({"type": "message", "topic": topic, **entry_document(entry), "delivery_count": delivery_count})


ENTRIES = [
    StoredEntry(0, "1795418703164-0", b'{"total":42}', ValueFormat.JSON, b"alice", {}, 1795418703164),
    StoredEntry(7, "1-12", b"[1,2,3]", ValueFormat.JSON, None, {"tenant": "a", 'quote"d': "back\\slash\n"}, 1),
    StoredEntry(3, "1795418703164-99", b"\x00\xff binary", ValueFormat.BINARY, "ключ-é-🙂".encode(), {}, 1795418703164),
    StoredEntry(2, "5-0", b'"text"', ValueFormat.JSON, b"\xff\xfe not utf-8", {"ü": "🙂"}, 5),
    StoredEntry(1, "6-0", b"", ValueFormat.BINARY, b"", {}, 6),
]


@pytest.mark.parametrize("entry", ENTRIES)
@pytest.mark.parametrize("topic", ["orders", 'we"ird\\topic-é'])
def test_message_frames_match_the_orjson_encoding_of_the_document(topic: str, entry: StoredEntry) -> None:
    for delivery_count in (1, 17):
        frame = message_frame(topic, entry, delivery_count)
        assert frame == reference(topic, entry, delivery_count)
        assert orjson.loads(frame)["type"] == "message"
