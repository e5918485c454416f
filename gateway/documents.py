"""The public JSON form of stored messages, shared by replay, pull and WebSocket frames."""

from __future__ import annotations

import base64
from typing import Any

import orjson

from storage.models import StoredEntry, ValueFormat


def entry_document(entry: StoredEntry) -> dict[str, Any]:
    """A stored message as JSON; JSON values are embedded as they were published (no re-parse)."""
    doc: dict[str, Any] = {
        "partition": entry.partition,
        "offset": entry.offset,
        "key": None if entry.key is None else entry.key.decode(errors="replace"),
        "headers": entry.headers,
        "timestamp_ms": entry.timestamp_ms,
    }
    if entry.value_format is ValueFormat.JSON:
        doc["value"] = orjson.Fragment(entry.value)
    else:
        doc["value_b64"] = base64.b64encode(entry.value).decode()
    return doc
