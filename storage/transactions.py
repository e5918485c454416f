"""MULTI/XADD.../EXEC replies in the script's reply shape, in one place: folded from the replies
hiredis read, read straight from the bytes when clean, and a node's calls' shape for the lean
connection (``storage.lean.ReplyShape``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal

from storage.native import refuse_if_off
from storage.resp import ReplyError, ResponseError, as_redis_error

if TYPE_CHECKING:
    from storage.scripts import PartitionCall


class NodeReplies:
    """One node's calls' replies as the appender reads them: one reply per call (its replies
    folded, an ASKING's dropped), read straight from the bytes when every call is a transaction
    whose replies are clean."""

    __slots__ = ("_asked", "_calls", "_sizes", "replies")

    def __init__(self, calls: Sequence[PartitionCall], asked: Sequence[bool]) -> None:
        self._calls, self._asked = calls, asked
        self.replies = sum(asked) + sum([call.wire_replies for call in calls])
        sizes = [call.transaction_size for call in calls]
        self._sizes: list[int] | None = (
            None if any(asked) or None in sizes else [n for n in sizes if n is not None])

    def read(self, data: bytes, offset: int, /) -> TransactionsRead:
        """Every call's flat reply from the bytes (``read_transactions``), or None when not every
        call is a transaction."""
        sizes = self._sizes
        return None if sizes is None else read_transactions(data, offset, sizes)

    def fold(self, replies: list[Any], /) -> list[Any]:
        """Every call's reply (or error) from the replies hiredis read."""
        folded: list[Any] = []
        pos = 0
        for call, asked in zip(self._calls, self._asked, strict=True):
            pos += asked
            end = pos + call.wire_replies
            folded.append(call.fold_replies(replies[pos:end]))
            pos = end
        return folded


def fold_transaction_replies(replies: list[Any]) -> Any:
    """MULTI, QUEUED..., EXEC replies as the script's flat ``[offset, 0, ...]``, or the error that
    stopped it.

    A refused command (MOVED, ASK, READONLY, CLUSTERDOWN, OOM...) aborts the whole transaction
    (EXECABORT): nothing was written and the refusal says why, so the appender redirects or retries
    as for the script. The compiled ``fold_transaction`` answers when every reply is fine (offsets
    as str); the rest is here.
    """
    folded = fold_transaction(replies)
    return fold_transaction_python(replies) if folded is None else folded


def fold_transaction_python(replies: list[Any]) -> Any:
    """``fold_transaction_replies`` in Python; the reference of the compiled fold wherever that
    one answers (offsets decoded to str, as it gives them)."""
    executed = replies[-1]
    if isinstance(executed, BaseException) or executed is None:
        return next((reply for reply in replies[:-1] if isinstance(reply, BaseException)),
                    executed if executed is not None else ResponseError("transaction aborted"))
    for reply in executed:
        if isinstance(reply, ReplyError):
            # a command failed while executing (not expected for XADD)
            return as_redis_error(reply)
    flat: list[Any] = [0] * (2 * len(executed))
    flat[0::2] = [offset.decode() if type(offset) is bytes else offset for offset in executed]
    return flat


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



def _no_compiled_fold(replies: list[Any]) -> list[Any] | None:
    """Without the compiled fold, the Python one decides every reply."""
    return None


try:  # the compiled parts (storage._wire); the Python ones give the same answers
    refuse_if_off()
    from storage import _wire
except ImportError:  # pragma: no cover - built without a C compiler
    fold_transaction: Callable[[list[Any]], list[Any] | None] = _no_compiled_fold
    read_transactions: Callable[[bytes, int, list[int]], TransactionsRead] = \
        read_transactions_python
else:
    fold_transaction = _wire.fold_transaction
    read_transactions = _wire.read_transactions
