"""Reading request bodies: a size limit and a deadline, ``Content-Encoding`` (gzip, zstd) inflated
with a bound, typed fields.

aiohttp's own request decompression is switched off (``gateway.app.build_app``) so that every body
goes through here: the limit applies to the *decompressed* size, and inflating stops one byte past
it, so a zip bomb costs at most ``max_bytes`` of output before it is refused with 413. A body that
does not decode is 400; an encoding we do not speak is 415 with an ``Accept-Encoding`` hint (RFC
9110 section 15.5.16). A body still arriving after ``body_read_timeout_s`` is 408 and its connection
is closed: a client trickling bytes holds nothing for long.
"""

from __future__ import annotations

import asyncio
import sys
import zlib
from typing import Any, Protocol

from aiohttp import web

if sys.version_info >= (3, 14):
    from compression.zstd import DecompressionParameter, ZstdDecompressor, ZstdError
else:  # the standard library's zstd module (PEP 784), backported
    from backports.zstd import DecompressionParameter, ZstdDecompressor, ZstdError

from gateway.errors import (
    body_timeout,
    invalid_field,
    too_large,
    undecodable_body,
    unsupported_encoding,
)
from gateway.publish.validation import decode_json_object
from gateway.services import services_of

ADMIN_BODY_MAX_BYTES = 64 * 1024
CONTENT_CODINGS = ("gzip", "zstd")
ACCEPT_ENCODING = ", ".join(CONTENT_CODINGS)
IDENTITY_CODINGS = frozenset({"", "identity"})
# 16 MiB: every level up to 19 fits; --long/--ultra frames are refused (memory bound)
ZSTD_WINDOW_LOG_MAX = 24
INFLATE_IN_THREAD_BYTES = 64 * 1024  # larger compressed bodies are inflated off the event loop


class _Inflater(Protocol):
    """What zlib's and zstd's streaming decompressors have in common."""

    @property
    def eof(self) -> bool: ...

    @property
    def unused_data(self) -> bytes: ...

    def decompress(self, data: bytes, max_length: int = ...) -> bytes: ...


def content_coding(request: web.Request) -> str | None:
    """The body's content coding (``gzip`` or ``zstd``), None for identity; 415 for anything
    else."""
    raw = request.headers.get("Content-Encoding", "")
    coding = raw.strip().lower()
    if coding in IDENTITY_CODINGS:
        return None
    if coding not in CONTENT_CODINGS:
        raise unsupported_encoding(raw, ACCEPT_ENCODING)
    return coding


async def read_body(request: web.Request, max_bytes: int) -> bytes:
    """The request body, decoded, at most ``max_bytes`` after decoding (413 past it, 400
    undecodable, 415), received within ``body_read_timeout_s`` (408)."""
    coding = content_coding(request)
    if coding is None:
        return await _read_in_time(request, max_bytes)
    compressed = await _read_in_time(request, max_bytes)
    if len(compressed) <= INFLATE_IN_THREAD_BYTES:
        return inflate(compressed, coding, max_bytes)
    return await asyncio.to_thread(inflate, compressed, coding, max_bytes)


async def _read_in_time(request: web.Request, max_bytes: int) -> bytes:
    """The raw body within the deadline; no timer for a body already received whole (a publish,
    usually)."""
    if request.content.is_eof():
        return await _read_limited(request, max_bytes)
    timeout_s = services_of(request).settings.body_read_timeout_s
    try:
        async with asyncio.timeout(timeout_s):
            return await _read_limited(request, max_bytes)
    except TimeoutError:
        raise body_timeout(f"the request body was not received within {timeout_s:g} s") from None


async def _read_limited(request: web.Request, max_bytes: int) -> bytes:
    length = request.content_length
    if length is not None:
        if length > max_bytes:
            raise too_large(f"body of {length} bytes is over the limit of {max_bytes}")
        return await request.read()  # bounded by the declared length (aiohttp reads no further)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.content.iter_any():
        size += len(chunk)
        if size > max_bytes:
            raise too_large(f"body is over the limit of {max_bytes} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def inflate(data: bytes, coding: str, max_bytes: int) -> bytes:
    """Decode a gzip or zstd body (concatenated members/frames allowed); never produces more than
    max_bytes + 1."""
    out: list[bytes] = []
    size = 0
    rest = data
    while True:
        inflater = _inflater(coding)
        try:
            chunk = inflater.decompress(rest, max_bytes + 1 - size)
        except (zlib.error, ZstdError) as exc:
            raise undecodable_body(f"the {coding} body does not decode: {exc}") from None
        size += len(chunk)
        if size > max_bytes:
            raise too_large(f"the {coding} body inflates past the limit of {max_bytes} bytes")
        out.append(chunk)
        if not inflater.eof:
            raise undecodable_body(f"the {coding} body is truncated")
        rest = inflater.unused_data
        if not rest:
            return b"".join(out)


def _inflater(coding: str) -> _Inflater:
    if coding == "gzip":
        return zlib.decompressobj(wbits=zlib.MAX_WBITS | 16)
    return ZstdDecompressor(options={DecompressionParameter.window_log_max: ZSTD_WINDOW_LOG_MAX})


async def read_json_object(request: web.Request,
                           max_bytes: int = ADMIN_BODY_MAX_BYTES) -> dict[str, Any]:
    """The request body as a JSON object, read (and decoded) with a limit before parsing (413 past
    ``max_bytes``)."""
    return decode_json_object(await read_body(request, max_bytes), max_bytes)


def optional_int(doc: dict[str, Any], name: str, *, minimum: int = 1) -> int | None:
    """An optional integer field (>= ``minimum``); 422 with a pointer otherwise."""
    value = doc.get(name)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise invalid_field(f"/{name}", f"'{name}' must be an integer >= {minimum}")
    return value


def bounded_int(doc: dict[str, Any], name: str, default: int, low: int, high: int) -> int:
    """An optional integer field between ``low`` and ``high`` (``default`` when absent); 422 with a
    pointer otherwise."""
    value = optional_int(doc, name, minimum=low)
    if value is None:
        return default
    if value > high:
        raise invalid_field(f"/{name}", f"'{name}' must be at most {high}")
    return value
