"""RESP2 encoding and reply reading through hiredis, error replies as values."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storage.wire import errors
from storage.wire.errors import as_redis_error, with_redis_errors
from storage.wire.resp import (
    NOT_READY,
    ProtocolError,
    ReplyError,
    ReplyReader,
    encode_command,
    encode_command_with_ids,
    encode_commands,
    new_reply_reader,
)

REPLIES = (
    b"+OK\r\n"
    b":42\r\n"
    b"$5\r\nhello\r\n"
    b"$0\r\n\r\n"
    b"$-1\r\n"
    b"*2\r\n$15\r\n1700000000000-0\r\n:0\r\n"
    b"*-1\r\n"
    b"-MOVED 3999 127.0.0.1:7001\r\n"
    b"*3\r\n*1\r\n:1\r\n$4\r\na\r\nb\r\n-ERR inside\r\n"
)
EXPECTED: list[Any] = [b"OK", 42, b"hello", b"", None, [b"1700000000000-0", 0], None]


def _drain(reader: ReplyReader) -> list[Any]:
    replies = []
    while (reply := reader.gets()) is not NOT_READY:
        replies.append(reply)
    return replies


def test_commands_are_encoded_as_arrays_of_bulk_strings() -> None:
    assert encode_command(["SET", b"k\r\n", 7]) == b"*3\r\n$3\r\nSET\r\n$3\r\nk\r\n\r\n$1\r\n7\r\n"
    assert encode_command(["X", "é", -1,
                           0.5]) == b"*4\r\n$1\r\nX\r\n$2\r\n\xc3\xa9\r\n$2\r\n-1\r\n$3\r\n0.5\r\n"
    assert encode_commands([["PING"], ["WAIT", 1, 100]]) == (
        b"*1\r\n$4\r\nPING\r\n*3\r\n$4\r\nWAIT\r\n$1\r\n1\r\n$3\r\n100\r\n"
    )


def test_non_string_non_number_arguments_are_refused() -> None:
    with pytest.raises(TypeError):
        encode_command(["SET", None])  # type: ignore[list-item]
    with pytest.raises(TypeError):
        encode_command(["SET", True])


def test_every_reply_type_is_read_with_errors_as_values() -> None:
    reader = new_reply_reader()
    reader.feed(REPLIES)
    replies = _drain(reader)
    assert replies[:7] == EXPECTED
    assert isinstance(replies[7], ReplyError)
    assert str(replies[7]) == "MOVED 3999 127.0.0.1:7001"
    nested = replies[8]
    assert nested[:2] == [[1], b"a\r\nb"]
    assert isinstance(nested[2], ReplyError)
    assert str(nested[2]) == "ERR inside"
    assert reader.gets() is NOT_READY


def test_replies_split_at_every_byte_are_reassembled() -> None:
    reader = new_reply_reader()
    replies: list[Any] = []
    for index in range(len(REPLIES)):
        reader.feed(REPLIES[index : index + 1])
        replies += _drain(reader)
    assert replies[:7] == EXPECTED
    assert len(replies) == 9


def test_bytes_that_are_not_resp_raise_a_protocol_error() -> None:
    reader = new_reply_reader()
    reader.feed(b"?what\r\n")
    with pytest.raises(ProtocolError):
        reader.gets()


def test_error_replies_map_to_redis_exceptions_retry_knows() -> None:
    moved = as_redis_error(ReplyError("MOVED 3999 127.0.0.1:7001"))
    assert isinstance(moved, errors.MovedError)
    assert (moved.slot, moved.host, moved.port) == (3999, "127.0.0.1", 7001)
    ask = as_redis_error(ReplyError("ASK 12 127.0.0.1:7002"))
    assert isinstance(ask, errors.AskError)
    assert not isinstance(ask, errors.MovedError)
    assert ask.port == 7002
    assert isinstance(as_redis_error(ReplyError("NOSCRIPT No matching script")),
                      errors.NoScriptError)
    assert isinstance(as_redis_error(ReplyError("CLUSTERDOWN The cluster is down")),
                      errors.ClusterDownError)
    assert isinstance(as_redis_error(ReplyError("TRYAGAIN Multiple keys")), errors.TryAgainError)
    assert isinstance(as_redis_error(ReplyError("READONLY replica")), errors.ReadOnlyError)
    assert isinstance(as_redis_error(ReplyError("LOADING dataset")), errors.LoadingError)
    assert type(as_redis_error(ReplyError("ERR wrong type"))) is errors.ResponseError
    assert with_redis_errors([b"OK", 1]) == [b"OK", 1]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2**64 - 1),
                          st.integers(0, 2**64 - 1)).map(lambda p: f"{p[0]}-{p[1]}"),
                max_size=50))
def test_command_with_stream_ids_encodes_as_general_encoder(ids: list[str]) -> None:
    head = ("XACK", "sg:{orders/3}:log", "grüppe")
    assert encode_command_with_ids(head, ids) == encode_command([*head, *ids])


def test_non_ascii_stream_id_is_refused() -> None:
    with pytest.raises(UnicodeEncodeError):
        encode_command_with_ids(("XACK", "k", "g"), ["1-0", "\u0661-0"])
