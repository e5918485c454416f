"""The source's row schema, and a page's column buffers (``pipeline.pages``) as an Arrow record
batch.

The timestamp is the ms part of the ID; Spark reads Arrow timestamps in microseconds. Headers are a
JSON object of strings (absent, empty or not an object: null); only rows that have them cost a
Python object.
"""

from __future__ import annotations

import orjson
import pyarrow as pa

from pipeline.pages import PageColumns

SCHEMA_DDL = (
    "topic STRING, partition INT, offset STRING, key BINARY, value BINARY, value_str STRING, "
    "headers MAP<STRING, STRING>, timestamp TIMESTAMP"
)

HEADERS_TYPE = pa.map_(pa.string(), pa.string())
ARROW_SCHEMA = pa.schema([
    ("topic", pa.string()),
    ("partition", pa.int32()),
    ("offset", pa.string()),
    ("key", pa.binary()),
    ("value", pa.binary()),
    ("value_str", pa.string()),
    ("headers", HEADERS_TYPE),
    ("timestamp", pa.timestamp("us", tz="UTC")),
])


def record_batch(topic: str, partition: int, page: PageColumns) -> pa.RecordBatch:
    """One Arrow batch holding a page of entries, in ID order, over the page's own buffers."""
    rows, value_buffers = page.rows, [pa.py_buffer(page.value_offsets),
                                      pa.py_buffer(page.value_data)]
    columns = [
        pa.repeat(pa.scalar(topic, pa.string()), rows),
        pa.repeat(pa.scalar(partition, pa.int32()), rows),
        pa.Array.from_buffers(pa.string(), rows, [None, pa.py_buffer(page.id_offsets),
                                                  pa.py_buffer(page.id_data)]),
        pa.Array.from_buffers(pa.binary(), rows, [_bitmap(page.key_validity),
                                                  pa.py_buffer(page.key_offsets),
                                                  pa.py_buffer(page.key_data)], page.key_nulls),
        pa.Array.from_buffers(pa.binary(), rows, [None, *value_buffers]),
        pa.Array.from_buffers(pa.string(), rows, [_bitmap(page.text_validity), *value_buffers],
                              page.text_nulls),
        _headers(page),
        pa.Array.from_buffers(ARROW_SCHEMA.field("timestamp").type, rows,
                              [None, pa.py_buffer(page.timestamps_us)]),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA)


def _bitmap(validity: bytes | None) -> pa.Buffer | None:
    return None if validity is None else pa.py_buffer(validity)


def _headers(page: PageColumns) -> pa.Array:
    if page.header_nulls == page.rows:
        return pa.nulls(page.rows, HEADERS_TYPE)
    raw = pa.Array.from_buffers(pa.binary(), page.rows, [
        _bitmap(page.header_validity), pa.py_buffer(page.header_offsets),
        pa.py_buffer(page.header_data)], page.header_nulls)
    return pa.array([None if doc is None else _header_pairs(doc) for doc in raw.to_pylist()],
                    HEADERS_TYPE)


def _header_pairs(raw: bytes) -> list[tuple[str, str]] | None:
    doc = orjson.loads(raw)
    if not isinstance(doc, dict):
        return None
    return [(str(name), str(value)) for name, value in doc.items()]
