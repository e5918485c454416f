"""RESP2 on the wire for the lean connections: hiredis' encoder and reply reader, and clean
transactions' replies read straight from the bytes.

Error replies come back as ``ReplyError`` values, not raised, so a pipeline's other replies
survive; ``as_redis_error`` maps one to the exception class the retry logic knows.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import groupby
from typing import Any, Literal, Protocol, cast

import hiredis
from redis import exceptions as rexc

from storage.native import refuse_if_off

try:  # the compiled check (storage._wire, built by setup.py); the Python one is the same answer
    refuse_if_off()
    from storage._wire import has_instance
except ImportError:  # pragma: no cover - built without a C compiler
    def has_instance(items: list[Any], cls: type, /) -> bool:
        """Whether any item of ``items`` is an instance of ``cls``."""
        return any(isinstance(item, cls) for item in items)


TransactionsRead = tuple[list[list[Any]], int] | Literal[False] | None


def read_transactions_python(data: bytes, offset: int, sizes: list[int], /) -> TransactionsRead:
    """Clean plain transactions' replies read from ``data`` at ``offset``: per transaction of ``n``
    XADDs, ``+OK``, ``n`` x ``+QUEUED``, ``*n`` and ``n`` stream IDs. Their flat replies ``[offset,
    0, ...]`` (offsets as str, as ``fold_transaction`` gives them) and where they end; False when
    the bytes are clean so far but end before the last transaction does (the rest comes in a later
    read); None for anything else (an error reply, a nil or shorter EXEC...): hiredis then reads the
    same bytes. The reference of the compiled ``storage._wire.read_transactions``."""
    if not 0 <= offset <= len(data):
        raise ValueError("offset outside data")
    folded: list[list[Any]] = []
    at = offset
    for n in sizes:
        if n < 0:
            raise ValueError("a transaction has at least 0 commands")
        step: int | None = 0
        for literal in (b"+OK\r\n", *[b"+QUEUED\r\n"] * n):
            step = _literal_at(data, at, literal)
            if step is None or step < 0:
                return _unread(step)
            at = step
        header = _header_at(data, at, b"*")
        if header is None or header[0] < 0:
            return _unread(None if header is None else header[0])
        if header[1] != n:
            return None
        at = header[0]
        flat: list[Any] = [0] * (2 * n)
        for i in range(n):
            taken = _id_at(data, at)
            if taken is None or taken[0] < 0:
                return _unread(None if taken is None else taken[0])
            at, flat[2 * i] = taken
        folded.append(flat)
    return folded, at


_SHORT = -1  # what a step answers for bytes that end inside a piece they begin correctly


def _unread(step: int | None) -> Literal[False] | None:
    return False if step == _SHORT else None


def _literal_at(data: bytes, at: int, literal: bytes) -> int | None:
    """Where ``literal`` at ``at`` ends, _SHORT, or None (something else)."""
    rest = data[at:at + len(literal)]
    if len(rest) < len(literal):
        return _SHORT if literal.startswith(rest) else None
    return at + len(literal) if rest == literal else None


def _header_at(data: bytes, at: int, kind: bytes) -> tuple[int, int] | None:
    """``<kind><digits>\r\n`` (at most 9 digits) at ``at``: (where it ends, the number), (_SHORT, 0)
    or None."""
    if at >= len(data):
        return _SHORT, 0
    if data[at:at + 1] != kind:
        return None
    q = at + 1
    while q < len(data) and data[q:q + 1].isdigit() and q - at - 1 < 9:
        q += 1
    if q == len(data):
        return _SHORT, 0
    if q == at + 1 or data[q:q + 1] != b"\r":
        return None
    if q + 1 == len(data):
        return _SHORT, 0
    if data[q + 1:q + 2] != b"\n":
        return None
    return q + 2, int(data[at + 1:q])


def _id_at(data: bytes, at: int) -> tuple[int, str] | None:
    """A stream ID's bulk string at ``at``: (where it ends, the ID), (_SHORT, "") or None."""
    header = _header_at(data, at, b"$")
    if header is None or header[0] < 0:
        return None if header is None else (_SHORT, "")
    q, n = header
    if not 3 <= n <= 41:
        return None
    seen = data[q:q + n]
    digits_and_inner_dashes = all(
        48 <= c <= 57 or (c == 45 and 0 < i < n - 1) for i, c in enumerate(seen))
    if not digits_and_inner_dashes or seen.count(b"-") > 1:
        return None
    left = len(data) - q
    if ((left > n and data[q + n:q + n + 1] != b"\r")
            or (left > n + 1 and data[q + n + 1:q + n + 2] != b"\n")):
        return None
    if left < n + 2:
        return _SHORT, ""
    if seen.count(b"-") != 1:
        return None
    return q + n + 2, seen.decode()


try:  # the compiled reader (storage._wire); the Python one gives the same answers
    refuse_if_off()
    from storage._wire import read_transactions as read_transactions
except ImportError:  # pragma: no cover - built without a C compiler
    read_transactions = read_transactions_python

NOT_READY: Any = False  # what ``gets`` returns while a reply is incomplete (hiredis' convention)


class ReplyError(Exception):
    """An error reply (``-ERR ...``, ``-MOVED 3999 127.0.0.1:7001``), returned as a value."""


class ProtocolError(Exception):
    """The peer sent bytes that are not RESP2."""


class ReplyReader(Protocol):
    """Incremental reader: ``feed`` bytes as they arrive, ``gets`` one reply or NOT_READY;
    ``has_data`` whether fed bytes wait unread (a partial reply)."""

    def feed(self, data: bytes, /) -> None: ...

    def gets(self) -> Any: ...

    def has_data(self) -> bool: ...


def encode_command(args: Sequence[bytes | str | int | float]) -> bytes:
    """One command as a RESP array of bulk strings (str is UTF-8, numbers as their decimal text):
    hiredis' encoder. TypeError for anything else (bool and None included)."""
    packed: bytes = hiredis.pack_command(cast(Any, args if type(args) is tuple else tuple(args)))
    return packed


def encode_command_with_ids(head: Sequence[bytes | str | int | float], ids: Sequence[str]) -> bytes:
    """``encode_command([*head, *ids])`` for stream IDs (ASCII digits and a dash, as
    ``validate_offset`` checks): each run of IDs of one length is written by one join instead of one
    %-format per ID (an XACK carries hundreds). UnicodeEncodeError when an ID is not ASCII (its
    length in bytes would not be its length)."""
    head_wire = encode_command(head)
    chunks = []
    for size, run in groupby(ids, key=len):
        prefix = f"${size}\r\n"
        chunks.append(prefix + f"\r\n{prefix}".join(run) + "\r\n")
    return (b"*%d\r\n" % (len(head) + len(ids)) + head_wire[head_wire.index(b"\r\n") + 2:]
            + "".join(chunks).encode("ascii"))


def encode_commands(commands: Iterable[Sequence[bytes | str | int | float]]) -> bytes:
    """Several commands back to back (one pipeline write)."""
    return b"".join(encode_command(command) for command in commands)


def new_reply_reader() -> ReplyReader:
    """hiredis' reply reader, error replies as ReplyError values."""
    reader: ReplyReader = hiredis.Reader(protocolError=ProtocolError, replyError=ReplyError)
    return reader


# The error codes whose replies the store tells apart, as the exceptions redis-py raises for them
# (its own table is private); any other reply is a ResponseError with the whole text.
ERROR_CLASSES: dict[str, type[rexc.RedisError]] = {
    "MOVED": rexc.MovedError, "ASK": rexc.AskError, "TRYAGAIN": rexc.TryAgainError,
    "CLUSTERDOWN": rexc.ClusterDownError, "CROSSSLOT": rexc.ClusterCrossSlotError,
    "MASTERDOWN": rexc.MasterDownError, "READONLY": rexc.ReadOnlyError,
    "LOADING": rexc.BusyLoadingError, "NOSCRIPT": rexc.NoScriptError,
    "EXECABORT": rexc.ExecAbortError, "OOM": rexc.OutOfMemoryError,
    "NOAUTH": rexc.AuthenticationError, "WRONGPASS": rexc.AuthenticationError,
    "NOPERM": rexc.NoPermissionError, "ERR": rexc.ResponseError,
}
ERR_CLASSES: dict[str, type[rexc.RedisError]] = {
    "max number of clients reached": rexc.ConnectionError,
}


def as_redis_error(reply: ReplyError) -> rexc.RedisError:
    """The redis-py exception an error reply stands for (MOVED -> MovedError, NOSCRIPT ->
    NoScriptError...), holding the text after the code as redis-py's own parser does."""
    text = str(reply)
    code, _, rest = text.partition(" ")
    error_class = ERROR_CLASSES.get(code)
    if error_class is None:
        return rexc.ResponseError(text)
    return ERR_CLASSES.get(rest, error_class)(rest) if code == "ERR" else error_class(rest)


def with_redis_errors(replies: list[Any]) -> list[Any]:
    """Top-level error replies replaced by redis-py exception instances (what a redis-py pipeline
    returns)."""
    if not has_instance(replies, ReplyError):  # the common case: the same list, no copy
        return replies
    return [as_redis_error(r) if isinstance(r, ReplyError) else r for r in replies]
