"""RESP2 on the wire, without a client library: command encoding and an incremental reply reader.

Used by the lean append path (``storage.lean``): redis-py spends ~150 us of CPU per command, the
encoding below and hiredis' reader a few. ``new_reply_reader`` returns hiredis' C reader when it is
installed and ``PythonReplyReader`` (same interface) otherwise. Error replies come back as ``ReplyError``
values, not raised, so a pipeline's other replies survive; ``as_redis_error`` maps one to the redis-py
exception class (MovedError, AskError, NoScriptError, ClusterDownError, ...) the retry logic knows.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from redis import exceptions as rexc
from redis._parsers.base import BaseParser

try:  # hiredis is a dependency through redis[hiredis]; the pure-Python reader is the fallback
    import hiredis
except ImportError:  # pragma: no cover - exercised by tests through PythonReplyReader directly
    hiredis = None  # type: ignore[assignment]

try:  # the compiled check (storage._wire, built by setup.py); the Python one is the same answer
    from storage._wire import has_instance
except ImportError:  # pragma: no cover - built without a C compiler
    def has_instance(items: list[Any], cls: type, /) -> bool:
        """Whether any item of ``items`` is an instance of ``cls``."""
        return any(isinstance(item, cls) for item in items)

NOT_READY: Any = False  # what ``gets`` returns while a reply is incomplete (hiredis' convention)
_CRLF = b"\r\n"


class ReplyError(Exception):
    """An error reply (``-ERR ...``, ``-MOVED 3999 127.0.0.1:7001``), returned as a value."""


class ProtocolError(Exception):
    """The peer sent bytes that are not RESP2."""


class ReplyReader(Protocol):
    """Incremental reader: ``feed`` bytes as they arrive, ``gets`` one reply or NOT_READY."""

    def feed(self, data: bytes, /) -> None: ...

    def gets(self) -> Any: ...


_SHORT_ARGS: dict[bytes | str | int, bytes] = {}  # encodings of short arguments (field names, counts, flags)
_SHORT_ARGS_MAX = 4096


def encode_command(args: Sequence[bytes | str | int | float]) -> bytes:
    """One command as a RESP array of bulk strings (str is UTF-8, numbers as their decimal text).

    The hot path of every append: short arguments (field names, indexes, counts) come from a cache,
    the rest take one %-format each.
    """
    out = [b"*%d\r\n" % len(args)]
    append, cache = out.append, _SHORT_ARGS
    for arg in args:
        if arg is True or arg is False:
            raise TypeError("cannot encode bool as a Redis argument")
        if (hit := cache.get(arg)) is not None:  # type: ignore[arg-type]  # floats and others just miss
            append(hit)
            continue
        kind = type(arg)
        if kind is bytes:
            raw: bytes = arg  # type: ignore[assignment]
        elif kind is str:
            raw = arg.encode()  # type: ignore[union-attr]
        elif isinstance(arg, int | float):
            raw = repr(arg).encode()
        else:
            raise TypeError(f"cannot encode {kind.__name__} as a Redis argument")
        encoded = b"$%d\r\n%s\r\n" % (len(raw), raw)
        if len(raw) <= 4 and kind is not float and len(cache) < _SHORT_ARGS_MAX:
            cache[arg] = encoded  # type: ignore[index]
        append(encoded)
    return b"".join(out)


def encode_commands(commands: Iterable[Sequence[bytes | str | int | float]]) -> bytes:
    """Several commands back to back (one pipeline write)."""
    return b"".join(encode_command(command) for command in commands)


class _Incomplete(Exception):
    """Internal: the buffer ends inside a reply."""


class PythonReplyReader:
    """A pure-Python RESP2 reply reader with hiredis' interface (bulk strings stay bytes)."""

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._pos = 0

    def feed(self, data: bytes, /) -> None:
        """Append received bytes."""
        self._buffer += data

    def gets(self) -> Any:
        """The next complete reply, or NOT_READY (the partial bytes are kept for the next ``feed``)."""
        start = self._pos
        try:
            reply = self._parse()
        except _Incomplete:
            self._pos = start
            return NOT_READY
        if self._pos > 65536 or self._pos == len(self._buffer):
            del self._buffer[: self._pos]
            self._pos = 0
        return reply

    def _line(self) -> bytes:
        end = self._buffer.find(_CRLF, self._pos)
        if end < 0:
            raise _Incomplete
        line = bytes(self._buffer[self._pos : end])
        self._pos = end + 2
        return line

    def _parse(self) -> Any:
        line = self._line()
        if not line:
            raise ProtocolError("empty reply line")
        kind, rest = line[:1], line[1:]
        if kind == b"+":
            return rest
        if kind == b"-":
            return ReplyError(rest.decode(errors="replace"))
        if kind == b":":
            return int(rest)
        if kind == b"$":
            return self._bulk(int(rest))
        if kind == b"*":
            size = int(rest)
            return None if size < 0 else [self._parse() for _ in range(size)]
        raise ProtocolError(f"unexpected reply type byte {kind!r}")

    def _bulk(self, size: int) -> bytes | None:
        if size < 0:
            return None
        end = self._pos + size
        if len(self._buffer) < end + 2:
            raise _Incomplete
        value = bytes(self._buffer[self._pos : end])
        self._pos = end + 2
        return value


def new_reply_reader() -> ReplyReader:
    """hiredis' reader when installed (errors as ReplyError values), else the pure-Python one."""
    if hiredis is not None:
        reader: ReplyReader = hiredis.Reader(protocolError=ProtocolError, replyError=ReplyError)
        return reader
    return PythonReplyReader()


def as_redis_error(reply: ReplyError) -> rexc.RedisError:
    """The redis-py exception an error reply stands for (MOVED -> MovedError, NOSCRIPT -> NoScriptError...)."""
    error: rexc.RedisError = BaseParser.parse_error(str(reply))  # type: ignore[no-untyped-call]
    return error


def with_redis_errors(replies: list[Any]) -> list[Any]:
    """Top-level error replies replaced by redis-py exception instances (what a redis-py pipeline returns)."""
    if not has_instance(replies, ReplyError):  # the common case: the same list, no copy
        return replies
    return [as_redis_error(r) if isinstance(r, ReplyError) else r for r in replies]
