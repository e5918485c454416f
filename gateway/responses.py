"""JSON responses through orjson."""

from __future__ import annotations

from typing import Any

import orjson
from aiohttp import web


def json_response(data: Any, status: int = 200,
                  headers: dict[str, str] | None = None) -> web.Response:
    """Serialise ``data`` with orjson as application/json."""
    return web.Response(body=orjson.dumps(data), status=status, content_type="application/json",
                        headers=headers)
