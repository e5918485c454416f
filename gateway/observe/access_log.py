"""The access log line, with credentials a client put in a query string (``?token=``, ``?api_key=``)
as ``***``.

The gateway reads credentials only from headers, but a client that cannot set headers (a browser
WebSocket) may still send them in the URL, and an access log must not keep them.
"""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import unquote_plus

from aiohttp.web_log import AccessLogger
from aiohttp.web_request import BaseRequest
from aiohttp.web_response import StreamResponse

MASK = "***"
SECRET_NAMES = frozenset({"key", "auth", "authorization", "bearer", "jwt", "sig", "signature",
                          "credential", "credentials", "pass", "pwd"})
SECRET_WORDS = ("token", "secret", "password", "passwd", "api_key", "apikey", "session")
SCRUBBED_FIELDS = frozenset({"first_request_line", ("request_header", "Referer")})


def is_secret_name(name: str) -> bool:
    """True for a query parameter name that usually carries a credential (any case, ``-`` or
    ``_``)."""
    normal = unquote_plus(name).strip().lower().replace("-", "_")
    return normal in SECRET_NAMES or any(word in normal for word in SECRET_WORDS)


def scrub_query(text: str) -> str:
    """``text`` (a request line, a path or a URL) with the value of every credential-like parameter
    masked."""
    head, sep, query = text.partition("?")
    if not sep:
        return text
    query, version, tail = query.rpartition(" HTTP/") if " HTTP/" in query else (query, "", "")
    query, hash_sign, fragment = query.partition("#")
    parts = [_scrub_pair(pair) for pair in query.split("&")]
    return f"{head}?{'&'.join(parts)}{hash_sign}{fragment}{version}{tail}"


def _scrub_pair(pair: str) -> str:
    name, equals, _value = pair.partition("=")
    return f"{name}={MASK}" if equals and is_secret_name(name) else pair


class ScrubbingAccessLogger(AccessLogger):
    """aiohttp's access logger (same format) with query-string credentials masked in the request
    line and the Referer."""

    def _format_line(self, request: BaseRequest, response: StreamResponse,
                     time: float) -> Iterable[tuple[str | tuple[str, str], str]]:
        return [(key, scrub_query(value) if key in SCRUBBED_FIELDS and isinstance(value, str)
                 else value)
                for key, value in super()._format_line(request, response, time)]
