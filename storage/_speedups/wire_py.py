"""The Python references of ``storage._speedups._wire``: a batch's columns split by partition, a
partition's plain records as one MULTI/XADD.../EXEC, the replies folded or read from the bytes, and
the offsets put back in input order (same results, slower)."""

from __future__ import annotations

from typing import Any, Literal

from storage.append.encoding import EXEC_WIRE, KEYED_XADD, MULTI_WIRE
from storage.wire.errors import ResponseError, as_redis_error
from storage.wire.resp import ReplyError


def xadd_transaction(keyed_head: bytes, keyless_head: bytes, value_format: bytes,
                            values: list[bytes], keys: list[bytes | None]) -> bytes:
    """MULTI, one XADD per value (``keyed_head`` then ``K`` + the key as the field name, or
    ``keyless_head`` then ``v``; the value; ``value_format``'s ``f`` field, empty for JSON), EXEC,
    as RESP bytes. The reference of the compiled ``xadd_transaction``."""
    chunks = [MULTI_WIRE]
    append = chunks.append
    for value, key in zip(values, keys, strict=True):
        if key is None:
            append(b"%b$1\r\nv\r\n$%d\r\n%b\r\n%b" % (keyless_head, len(value), value,
                                                      value_format))
        else:
            append(KEYED_XADD % (keyed_head, len(key) + 1, key, len(value), value, value_format))
    append(EXEC_WIRE)
    return b"".join(chunks)


PartitionColumns = tuple[list[int], list[bytes], list[bytes | None]]  # indexes, values, keys


def split_by_partition(partitions: list[int], values: list[bytes],
                              keys: list[bytes | None]) -> dict[int, PartitionColumns]:
    """Plain records' columns grouped by partition, in order of first appearance: each partition's
    record indexes, values and keys. The reference of the compiled
    ``split_by_partition``."""
    groups: dict[int, PartitionColumns] = {}
    for index, (partition, value, key) in enumerate(zip(partitions, values, keys, strict=True)):
        group = groups.get(partition)
        if group is None:
            group = groups[partition] = ([], [], [])
        group[0].append(index)
        group[1].append(value)
        group[2].append(key)
    return groups


def reply_offsets(partition: int, reply: list[Any]) -> list[str]:
    """The offsets of the script's flat ``[offset, dupflag, ...]`` reply (or a folded
    transaction's). The reference of the compiled ``reply_offsets``."""
    return [offset.decode() if isinstance(offset, bytes) else offset for offset in reply[0::2]]


def in_input_order(count: int, groups: dict[int, PartitionColumns],
                          written: dict[int, list[str]]) -> list[str]:
    """A split batch's offsets back in input order: ``groups`` (``split_by_partition``) says where
    each partition's records were, ``written`` what they got. The reference of the compiled
    ``in_input_order``."""
    ordered = [""] * count
    for partition, (indexes, _, _) in groups.items():
        for index, offset in zip(indexes, written[partition], strict=True):
            ordered[index] = offset
    return ordered


def fold_transaction(replies: list[Any]) -> Any:
    """A transaction's replies (MULTI, QUEUED..., EXEC) as the script's flat ``[offset, 0, ...]``
    (offsets as str), or the error that stopped it. The reference of the compiled fold wherever
    that one answers."""
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


def read_transactions(data: bytes, offset: int, sizes: list[int], /) -> TransactionsRead:
    """Clean plain transactions' replies read from ``data`` at ``offset``: per transaction of ``n``
    XADDs, ``+OK``, ``n`` x ``+QUEUED``, ``*n`` and ``n`` stream IDs. Their flat replies ``[offset,
    0, ...]`` (offsets as str, as ``fold_transaction`` gives them) and where they end; False when
    the bytes are clean so far but end before the last transaction does (the rest comes in a later
    read); None for anything else (an error reply, a nil or shorter EXEC...): hiredis then reads the
    same bytes. The reference of the compiled ``read_transactions``."""
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
