"""The store's tree of Redis errors: a node's refusal by its code (MOVED, NOSCRIPT...) or a failed
connection, told apart by class for the retries (``storage.cluster``); never seen above storage."""

from __future__ import annotations

from typing import Any

from storage.wire.resp import ReplyError


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
