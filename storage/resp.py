"""RESP2 on the wire for the lean connections: hiredis' encoder and reply reader, and the store's
own error tree. Error replies come back as values (``ReplyError``), so a pipeline's other replies
survive; ``as_redis_error`` maps one to its class."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import groupby
from typing import Any, Protocol, cast

import hiredis

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


class RedisError(Exception):
    """A Redis node's refusal or a failed connection, told apart by class for the store's retries
    (``storage.cluster``); never seen above storage."""


class ConnectionLost(RedisError):
    """The connection failed, closed or never opened: whatever was sent on it is in doubt."""


class ReplyTimeout(RedisError):
    """No reply within the reply timeout (the connection is closed: later replies can't be
    trusted)."""


class AuthenticationFailed(ConnectionLost):
    """NOAUTH or WRONGPASS: the connection is of no use."""


class ResponseError(RedisError):
    """An error reply; the text after its code (``ERR``'s whole text after ``ERR``)."""


class Redirect(ResponseError):
    """MOVED or ASK: the slot is served by ``host``:``port``."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        slot, _, address = text.partition(" ")
        host, _, port = address.rpartition(":")
        self.slot, self.host, self.port = int(slot), host, int(port)


class MovedError(Redirect):
    """MOVED: the slot lives elsewhere for good (the slot map is stale)."""


class AskError(Redirect):
    """ASK: the slot is being migrated; ask that node, for the next command only."""


class TryAgainError(ResponseError):
    """TRYAGAIN: a multi-key command during a slot migration."""


class ClusterDownError(ResponseError):
    """CLUSTERDOWN: the cluster cannot serve the slot now."""


class MasterDownError(ClusterDownError):
    """MASTERDOWN: the node lost its primary."""


class CrossSlotError(ResponseError):
    """CROSSSLOT: the keys of one command are in different slots."""


class ReadOnlyError(ResponseError):
    """READONLY: the node is a replica now (a failover)."""


class LoadingError(ResponseError):
    """LOADING: the node is loading its data set."""


class NoScriptError(ResponseError):
    """NOSCRIPT: the node does not know the script's SHA1."""


class ExecAbortError(ResponseError):
    """EXECABORT: a command of the transaction was refused; nothing was written."""


class OutOfMemoryError(ResponseError):
    """OOM: the node is at maxmemory."""


class NoPermissionError(ResponseError):
    """NOPERM: the node's ACL refuses the command."""


# The error codes whose replies the store tells apart; any other reply is a ResponseError with the
# whole text.
ERROR_CLASSES: dict[str, type[RedisError]] = {
    "MOVED": MovedError, "ASK": AskError, "TRYAGAIN": TryAgainError,
    "CLUSTERDOWN": ClusterDownError, "CROSSSLOT": CrossSlotError,
    "MASTERDOWN": MasterDownError, "READONLY": ReadOnlyError,
    "LOADING": LoadingError, "NOSCRIPT": NoScriptError,
    "EXECABORT": ExecAbortError, "OOM": OutOfMemoryError,
    "NOAUTH": AuthenticationFailed, "WRONGPASS": AuthenticationFailed,
    "NOPERM": NoPermissionError, "ERR": ResponseError,
}
ERR_CLASSES: dict[str, type[RedisError]] = {
    "max number of clients reached": ConnectionLost,
}


def as_redis_error(reply: ReplyError) -> RedisError:
    """The exception an error reply stands for (MOVED -> MovedError, NOSCRIPT -> NoScriptError...),
    holding the text after the code."""
    text = str(reply)
    code, _, rest = text.partition(" ")
    error_class = ERROR_CLASSES.get(code)
    if error_class is None:
        return ResponseError(text)
    try:
        return ERR_CLASSES.get(rest, error_class)(rest) if code == "ERR" else error_class(rest)
    except ValueError:  # a redirect without a slot and an address
        return ResponseError(text)


def with_redis_errors(replies: list[Any]) -> list[Any]:
    """Top-level error replies replaced by the exceptions they stand for (``as_redis_error``)."""
    # the common case: the same list, no copy
    if not any(isinstance(reply, ReplyError) for reply in replies):
        return replies
    return [as_redis_error(r) if isinstance(r, ReplyError) else r for r in replies]
