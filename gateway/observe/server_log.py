"""aiohttp's server log with a request head it refused (too long, malformed) as one line: the
client has its 400 already, and the head's bytes (a bearer token, say) never reach the log."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from aiohttp.http_exceptions import HttpProcessingError, LineTooLong

# a refused head is the client's doing (or a scanner's): worth a line, not an error
REFUSED_LEVEL = logging.INFO


class ServerLog(logging.LoggerAdapter):  # type: ignore[type-arg]
    """The ``logger`` aiohttp's request handler writes to (``handler_args``): every record as is,
    save a refused request head, logged as one line naming the refusal, without a traceback and
    without a byte of the head."""

    def log(self, level: int, msg: object, *args: object, exc_info: Any = None,
            stack_info: bool = False, stacklevel: int = 1,
            extra: Mapping[str, object] | None = None, **kwargs: object) -> None:
        if isinstance(exc_info, HttpProcessingError):
            self.logger.log(min(level, REFUSED_LEVEL), "refused a request from %s: %s",
                            args[0] if args else "?", refusal(exc_info))
            return
        super().log(level, msg, *args, exc_info=exc_info, stack_info=stack_info,
                    stacklevel=stacklevel, extra=extra, **kwargs)


def refusal(exc: HttpProcessingError) -> str:
    """What was wrong with a request head, in words that quote none of it."""
    if isinstance(exc, LineTooLong):
        return f"{exc.code} a request line or header over {exc.args[1]} bytes"
    return f"{exc.code} {type(exc).__name__}"


def server_log() -> ServerLog:
    """The adapter over aiohttp's own server logger (its name, level and handlers)."""
    return ServerLog(logging.getLogger("aiohttp.server"), {})
