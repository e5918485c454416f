"""Reading small JSON request bodies with a size limit and typed field access."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from gateway.errors import invalid_field, too_large
from gateway.validation import decode_json_object

ADMIN_BODY_MAX_BYTES = 64 * 1024


async def read_json_object(request: web.Request, max_bytes: int = ADMIN_BODY_MAX_BYTES) -> dict[str, Any]:
    """The request body as a JSON object, read with a limit before parsing (413 past ``max_bytes``)."""
    if request.content_length is not None and request.content_length > max_bytes:
        raise too_large(f"body of {request.content_length} bytes is over the limit of {max_bytes}")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.content.iter_any():
        size += len(chunk)
        if size > max_bytes:
            raise too_large(f"body is over the limit of {max_bytes} bytes")
        chunks.append(chunk)
    return decode_json_object(b"".join(chunks), max_bytes)


def optional_int(doc: dict[str, Any], name: str, *, minimum: int = 1) -> int | None:
    """An optional integer field (>= ``minimum``); 422 with a pointer otherwise."""
    value = doc.get(name)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise invalid_field(f"/{name}", f"'{name}' must be an integer >= {minimum}")
    return value
