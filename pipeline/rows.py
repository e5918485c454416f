"""The source's row schema and the conversion of XRANGE pages into Arrow record batches.

Entry fields follow storage.codec (``value_and_key``): the value under ``K`` + the key, or ``v``
without a key (earlier versions: ``v`` and ``k``), ``f`` format, ``h`` headers as a JSON object of
strings (absent = none). The timestamp is the ms part of the ID; Spark reads Arrow timestamps in
microseconds, so it is converted.
"""

from __future__ import annotations

from collections.abc import Sequence

import orjson
import pyarrow as pa

from pipeline.streams import Entry
from storage.codec import value_and_key

SCHEMA_DDL = (
    "topic STRING, partition INT, offset STRING, key BINARY, value BINARY, value_str STRING, "
    "headers MAP<STRING, STRING>, timestamp TIMESTAMP"
)

ARROW_SCHEMA = pa.schema([
    ("topic", pa.string()),
    ("partition", pa.int32()),
    ("offset", pa.string()),
    ("key", pa.binary()),
    ("value", pa.binary()),
    ("value_str", pa.string()),
    ("headers", pa.map_(pa.string(), pa.string())),
    ("timestamp", pa.timestamp("us", tz="UTC")),
])


def to_record_batch(topic: str, partition: int, page: Sequence[Entry]) -> pa.RecordBatch:
    """One Arrow batch holding a page of entries, in ID order."""
    offsets = [entry_id.decode() for entry_id, _ in page]
    pairs = [value_and_key(fields) for _, fields in page]
    values = [value for value, _ in pairs]
    columns = [
        pa.array([topic] * len(page), pa.string()),
        pa.array([partition] * len(page), pa.int32()),
        pa.array(offsets, pa.string()),
        pa.array([key for _, key in pairs], pa.binary()),
        pa.array(values, pa.binary()),
        pa.array([_utf8(value) for value in values], pa.string()),
        pa.array([_headers(fields.get(b"h")) for _, fields in page],
                 ARROW_SCHEMA.field("headers").type),
        pa.array([int(offset.partition("-")[0]) * 1000 for offset in offsets],
                 ARROW_SCHEMA.field("timestamp").type),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA)


def _utf8(value: bytes) -> str | None:
    try:
        return value.decode()
    except UnicodeDecodeError:
        return None


def _headers(raw: bytes | None) -> list[tuple[str, str]] | None:
    if not raw:
        return None
    doc = orjson.loads(raw)
    if not isinstance(doc, dict):
        return None
    return [(str(name), str(value)) for name, value in doc.items()]
