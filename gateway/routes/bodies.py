"""Reading small JSON request bodies with a size limit and typed field access."""

from __future__ import annotations

from typing import Any

import orjson
from aiohttp import web

from gateway.errors import bad_request, invalid_field, too_large

ADMIN_BODY_MAX_BYTES = 64 * 1024


async def read_json_object(request: web.Request, max_bytes: int = ADMIN_BODY_MAX_BYTES) -> dict[str, Any]:
    """The request body as a JSON object; 413 over ``max_bytes``, 400 if not JSON, 422 if not an object."""
    if request.content_length is not None and request.content_length > max_bytes:
        raise too_large(f"body of {request.content_length} bytes is over the limit of {max_bytes}")
    body = await request.content.read(max_bytes + 1)
    if len(body) > max_bytes:
        raise too_large(f"body is over the limit of {max_bytes} bytes")
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise bad_request(f"body is not valid JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise invalid_field("", "body must be a JSON object")
    return doc


def optional_int(doc: dict[str, Any], name: str, *, minimum: int = 1) -> int | None:
    """An optional integer field (>= ``minimum``); 422 with a pointer otherwise."""
    value = doc.get(name)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise invalid_field(f"/{name}", f"'{name}' must be an integer >= {minimum}")
    return value


def reject_unknown_fields(doc: dict[str, Any], allowed: frozenset[str]) -> None:
    """422 naming the first field that is not in ``allowed``."""
    unknown = sorted(doc.keys() - allowed)
    if unknown:
        raise invalid_field(f"/{unknown[0]}", f"unknown field {unknown[0]!r}")
