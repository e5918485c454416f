"""RESP2 for the node connections: commands encoded and replies read by hiredis; error replies are
values (``ReplyError``), so a pipeline's other replies survive."""

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
