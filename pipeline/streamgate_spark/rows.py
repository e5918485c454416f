"""The source's row schema, and a page's column buffers (``storage.pages``) or a segment file's
rows (the archive tier) as an Arrow record batch.

The timestamp is the ms part of the ID; Spark reads Arrow timestamps in microseconds. Headers are a
JSON object of strings (absent, empty or not an object: null); only rows that have them cost a
Python object.
"""

from __future__ import annotations

from collections.abc import Sequence

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from storage._speedups import id_texts
from storage.pages import PageColumns, is_utf8

# the source's columns and their Spark types (simpleString), in order
COLUMNS = {"topic": "string", "partition": "int", "offset": "string", "key": "binary",
           "value": "binary", "value_str": "string", "headers": "map<string,string>",
           "timestamp": "timestamp"}
SCHEMA_ERROR = "schema_error"  # reading at a schema version: why a value could not be converted
AT_VERSION_COLUMNS = {**COLUMNS, SCHEMA_ERROR: "string"}


def schema_ddl(columns: dict[str, str]) -> str:
    """The columns as Spark's DDL."""
    return ", ".join(f"{name} {kind.upper()}" for name, kind in columns.items())


SCHEMA_DDL = schema_ddl(COLUMNS)

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
    return headers_of(pa.Array.from_buffers(pa.binary(), page.rows, [
        _bitmap(page.header_validity), pa.py_buffer(page.header_offsets),
        pa.py_buffer(page.header_data)], page.header_nulls))


def headers_of(raw: pa.Array) -> pa.Array:
    """The headers column of the ``h`` fields as stored (null or empty: no headers)."""
    if raw.null_count == len(raw):
        return pa.nulls(len(raw), HEADERS_TYPE)
    return pa.array([_header_pairs(doc) if doc else None for doc in raw.to_pylist()],
                    HEADERS_TYPE)


def segment_batch(topic: str, partition: int, rows: pa.RecordBatch) -> pa.RecordBatch:
    """A segment file's rows (``SEGMENT_COLUMNS``) as the source's batch: Arrow compute over the
    columns, Python only for headers and for values that are not UTF-8."""
    count = rows.num_rows
    offsets = id_texts(rows["offset_ms"], rows["offset_seq"])
    stamps = pc.cast(pc.cast(rows["offset_ms"], pa.int64()), _MS)
    columns = [
        pa.repeat(pa.scalar(topic, pa.string()), count),
        pa.repeat(pa.scalar(partition, pa.int32()), count),
        offsets, rows["key"], rows["value"], utf8_text(rows["value"]),
        headers_of(rows["headers"]),
        pc.cast(stamps, ARROW_SCHEMA.field("timestamp").type),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA)


_MS = pa.timestamp("ms", tz="UTC")
# an entry's timestamp is its offset's ms part: the file's timestamp column is for other readers
SEGMENT_COLUMNS = ("offset_ms", "offset_seq", "key", "value", "headers")


def utf8_text(values: pa.Array) -> pa.Array:
    """The values as strings where they are UTF-8, null elsewhere (over the same buffers)."""
    text = values.view(pa.string())
    try:
        text.validate(full=True)
    except pa.ArrowInvalid:
        utf8 = pa.array([value is not None and is_utf8(value) for value in values.to_pylist()],
                        pa.bool_())
        return pc.if_else(utf8, text, pa.scalar(None, pa.string()))
    return text


def _header_pairs(raw: bytes) -> list[tuple[str, str]] | None:
    doc = orjson.loads(raw)
    if not isinstance(doc, dict):
        return None
    return [(str(name), str(value)) for name, value in doc.items()]


def projection(fields: Sequence[tuple[str, str]],
               columns: dict[str, str] = COLUMNS) -> tuple[str, ...] | None:
    """The columns a user-given schema asks for, as (name, simpleString) pairs: None for the
    whole schema (``columns``), else the names in their order; ValueError for a column the source
    has not (or not of that type)."""
    names = tuple(name for name, _ in fields)
    for name, kind in fields:
        if columns.get(name) != kind:
            raise ValueError(f"the streamgate source has no column {name} {kind}: its columns are "
                             f"{schema_ddl(columns)}")
    if len(set(names)) != len(names):
        raise ValueError("a column is named twice in the schema")
    return None if names == tuple(columns) else names
