"""RESP bytes of XADD commands from a batch's columns: heads, fields and headers, written the way
``encode_command`` would write them (tests pin it) without a command tuple per record."""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping, Sequence

import orjson

from storage.keys import log_key
from storage.models import Records, ValueFormat
from storage.wire.resp import encode_command


def without_array_header(command: bytes, count: int) -> bytes:
    """The bulk strings of an encoded command, without its ``*<count>`` array header."""
    return command[len(b"*%d\r\n" % count):]


MULTI_WIRE = encode_command(("MULTI",))
EXEC_WIRE = encode_command(("EXEC",))
# The f field as RESP: JSON values carry none (storage.codec), binary ones ``f`` ``b``.
FORMAT_WIRE = {ValueFormat.JSON: b"", ValueFormat.BINARY: b"$1\r\nf\r\n$1\r\nb\r\n"}
FORMAT_FIELD_COUNT = {ValueFormat.JSON: 0, ValueFormat.BINARY: 2}
INDEX_WIRE = [b"$%d\r\n%d\r\n" % (len(str(i)), i) for i in range(1024)]
# K and the key, the value, f (formatted, maybe none)
_KEYED_FIELDS = b"$%d\r\nK%b\r\n$%d\r\n%b\r\n%b"
KEYED_XADD = b"%b" + _KEYED_FIELDS  # the same after its XADD's header


def small_int_wire(number: int) -> bytes:
    """A non-negative integer as a RESP bulk string (the common small ones precomputed)."""
    return INDEX_WIRE[number] if number < 1024 else b"$%d\r\n%d\r\n" % (len(str(number)),
                                                                          number)


def shared_headers(column: Sequence[Mapping[str, str]] | None) -> Mapping[str, str] | None:
    """The one non-empty headers object every record of the column has, else None."""
    if not column or not column[0]:
        return None
    first = column[0]
    return first if column.count(first) == len(column) else None


def records_fields_wire(records: Records) -> Iterator[tuple[bytes, int]]:
    """Each record's XADD fields as RESP, and how many there are (names and values); headers that
    are one object for several records (a request's trace context) are encoded once."""
    last_headers: Mapping[str, str] | None = None
    last_wire = b""
    for value, fmt, key, headers in record_columns(records):
        fields, count = _value_fields_wire(value, fmt, key)
        if not headers:
            yield fields, count
            continue
        if headers is not last_headers:
            last_headers, last_wire = headers, headers_field_wire(headers)
        yield fields + last_wire, count + 2


def _value_fields_wire(value: bytes, fmt: ValueFormat, key: bytes | None) -> tuple[bytes, int]:
    """A record's fields before its headers (the value under its key, the format) as RESP."""
    fmt_wire, count = FORMAT_WIRE[fmt], 2 + FORMAT_FIELD_COUNT[fmt]
    if key is not None:
        return _KEYED_FIELDS % (len(key) + 1, key, len(value), value, fmt_wire), count
    return b"$1\r\nv\r\n$%d\r\n%b\r\n%b" % (len(value), value, fmt_wire), count


def headers_field_wire(headers: Mapping[str, str]) -> bytes:
    """The ``h`` field (headers as an orjson map) as RESP, as ``encode_fields`` writes it."""
    encoded = orjson.dumps(dict(headers))
    return b"$1\r\nh\r\n$%d\r\n%b\r\n" % (len(encoded), encoded)


def record_columns(
    records: Records,
) -> Iterator[tuple[bytes, ValueFormat, bytes | None, Mapping[str, str]]]:
    """Each record's value, format, key and headers."""
    count = len(records.values)
    return zip(records.values, records.format_column(), records.keys,
               records.headers or [{}] * count, strict=True)



def xadd_head(stream: str, max_length: int | None) -> tuple[bytes, int]:
    """An XADD's bulk strings before its fields (name, stream, trim, ``*``), without the array
    header, and how many there are."""
    if max_length:
        return without_array_header(
            encode_command(("XADD", stream, "MAXLEN", "~", max_length, "*")), 6), 6
    return without_array_header(encode_command(("XADD", stream, "*")), 3), 3


@functools.lru_cache(maxsize=4096)
def xadd_heads(topic: str, partition: int, max_length: int | None,
                value_format: ValueFormat, more_fields: int = 0) -> tuple[bytes, bytes]:
    """The start of a keyed and of a keyless plain record's XADD: array header, name, stream, trim,
    ``*`` (the same bytes: either has one name and value, then the format's, then
    ``more_fields``)."""
    bulk, base = xadd_head(log_key(topic, partition), max_length)
    # K+key or v, the value; f and the format where there is one
    fields = 2 + FORMAT_FIELD_COUNT[value_format] + more_fields
    head = b"*%d\r\n%b" % (base + fields, bulk)
    return head, head
