"""Clean plain transactions' replies read straight from the received bytes (``read_transactions``), and the lean
protocol answering a transactions-only request with them folded, or, whenever they are not clean or not whole in
one read, exactly as it answered before (hiredis, one reply at a time)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storage import resp
from storage.lean import FoldedReplies, _Request, _RespProtocol
from storage.resp import ReplyError, read_transactions, read_transactions_python
from storage.scripts import _fold_transaction

READERS = [pytest.param(read_transactions, id="installed"), pytest.param(read_transactions_python, id="reference")]
_ids = st.builds(lambda ms, seq: f"{ms}-{seq}", st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1))


def _transaction(ids: list[str]) -> bytes:
    """What Redis answers a clean MULTI, XADD x n, EXEC."""
    return (b"+OK\r\n" + b"+QUEUED\r\n" * len(ids) + b"*%d\r\n" % len(ids)
            + b"".join(b"$%d\r\n%b\r\n" % (len(i), i.encode()) for i in ids))


def _flat(ids: list[str]) -> list[Any]:
    return [x for i in ids for x in (i, 0)]


def test_the_compiled_reader_is_installed() -> None:
    assert read_transactions is not read_transactions_python
    assert resp.read_transactions is read_transactions


@pytest.mark.parametrize("read", READERS)
@settings(max_examples=200, deadline=None)
@given(transactions=st.lists(st.lists(_ids, max_size=6), max_size=4), lead=st.binary(max_size=6),
       tail=st.binary(max_size=6))
def test_clean_transactions_read_as_their_folds_and_where_they_end(read: Any, transactions: list[list[str]],
                                                                    lead: bytes, tail: bytes) -> None:
    body = b"".join(_transaction(ids) for ids in transactions)
    data = lead + body + tail
    assert read(data, len(lead), [len(ids) for ids in transactions]) == (
        [_flat(ids) for ids in transactions], len(lead) + len(body))


@pytest.mark.parametrize("read", READERS)
def test_a_read_cut_short_anywhere_is_not_answered(read: Any) -> None:
    data = _transaction(["1-0", "1795418703164-12"]) + _transaction(["2-0"])
    for end in range(len(data)):
        assert read(data[:end], 0, [2, 1]) is None, end
    assert read(data, 0, [2, 1]) is not None


@pytest.mark.parametrize("read", READERS)
@pytest.mark.parametrize("data", [
    b"-MOVED 3999 127.0.0.1:7001\r\n",  # MULTI refused
    b"+OK\r\n-MOVED 3999 127.0.0.1:7001\r\n-EXECABORT Transaction discarded\r\n",
    b"+OK\r\n+QUEUED\r\n*-1\r\n",  # EXEC nil (a WATCH'd key changed; never sent here, still not clean)
    b"+OK\r\n+QUEUED\r\n*2\r\n$3\r\n1-0\r\n$3\r\n2-0\r\n",  # more IDs than XADDs
    b"+OK\r\n+QUEUED\r\n*1\r\n-ERR wrong type\r\n",  # a command failed while executing
    b"+OK\r\n+QUEUED\r\n*1\r\n$-1\r\n",
    b"+OK\r\n+QUEUED\r\n*1\r\n:1\r\n",
    b"+OK\r\n+QUEUED\r\n*1\r\n$3\r\n1-0\n\r",
    b"+OK\r\n+QUEUED\r\n*1\r\n$4\r\n1-0\r\n",
    b"+OK\r\n+QUEUED\r\n*1\r\n$3\r\n-10\r\n", b"+OK\r\n+QUEUED\r\n*1\r\n$3\r\n10-\r\n",
    b"+OK\r\n+QUEUED\r\n*1\r\n$3\r\n1-0-\r\n", b"+OK\r\n+QUEUED\r\n*1\r\n$3\r\n123\r\n",
    b"+OK\r\n+QUEUED\r\n*1\r\n$3\r\n1-a\r\n", b"+OK\r\n+QUEUED\r\n*1\r\n$2\r\n--\r\n",
    b"+OK\r\n+QUEUED\r\n*01x\r\n", b"+ok\r\n+QUEUED\r\n*1\r\n$3\r\n1-0\r\n", b"+OK\r\n+QUEUED \r\n*1\r\n$3\r\n1-0\r\n",
])
def test_anything_but_a_clean_transaction_is_left_to_hiredis(read: Any, data: bytes) -> None:
    assert read(data, 0, [1]) is None


@pytest.mark.parametrize("read", READERS)
def test_arguments_out_of_range_are_refused(read: Any) -> None:
    with pytest.raises(ValueError, match="offset"):
        read(b"+OK\r\n", 6, [0])
    with pytest.raises(ValueError, match="at least 0"):
        read(b"+OK\r\n*0\r\n", 0, [-1])
    assert read(b"+OK\r\n*0\r\n", 0, []) == ([], 0)


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=80), sizes=st.lists(st.integers(0, 3), max_size=3))
def test_compiled_reader_answers_any_bytes_as_the_reference(data: bytes, sizes: list[int]) -> None:
    for prefix in (b"", b"+OK\r\n", b"+OK\r\n+QUEUED\r\n", b"+OK\r\n+QUEUED\r\n*1\r\n"):
        assert read_transactions(prefix + data, 0, sizes) == read_transactions_python(prefix + data, 0, sizes)


# ---- the protocol ----

def _protocol_with(loop: asyncio.AbstractEventLoop, requests: list[tuple[int, list[int] | None]],
                   ) -> tuple[_RespProtocol, list[asyncio.Future[list[Any]]]]:
    protocol = _RespProtocol()
    futures: list[asyncio.Future[list[Any]]] = []
    for replies, transactions in requests:
        future: asyncio.Future[list[Any]] = loop.create_future()
        protocol.waiting.append(_Request(future, replies, [], 0.0, transactions))
        protocol.sent += 1
        futures.append(future)
    return protocol, futures


def _folded(result: list[Any], sizes: list[int]) -> list[Any]:
    """A request's answer as the appender folds it: as it is when read folded, else each transaction's replies."""
    if type(result) is FoldedReplies:
        return list(result)
    folded, at = [], 0
    for n in sizes:
        folded.append(_fold_transaction(result[at:at + n + 2]))
        at += n + 2
    return folded


async def test_a_transactions_request_read_in_one_piece_is_answered_folded() -> None:
    first, second = [["1-0", "1-1"], ["2-0"]], [["3-0"]]
    protocol, (one, two) = _protocol_with(asyncio.get_running_loop(), [(6, [2, 1]), (3, [1])])
    protocol.data_received(b"".join(_transaction(ids) for ids in first + second))
    assert type(one.result()) is FoldedReplies
    assert one.result() == [_flat(ids) for ids in first]
    assert two.result() == [_flat(ids) for ids in second]
    assert (protocol.sent, len(protocol.waiting), protocol.reader.has_data()) == (0, 0, False)


async def test_replies_split_at_any_byte_give_every_request_the_same_answer() -> None:
    transactions: list[list[list[str]]] = [[["1-0", "1-1"], ["2-0"]], [["3-0"]], [[]], [["4-0", "4-1", "4-2"]]]
    data = b"".join(_transaction(ids) for request in transactions for ids in request)
    sizes = [[len(ids) for ids in request] for request in transactions]
    expected = [[_flat(ids) for ids in request] for request in transactions]
    loop = asyncio.get_running_loop()
    for cut in range(len(data) + 1):
        for second_cut in (cut, min(cut + 7, len(data))):
            protocol, futures = _protocol_with(loop, [(sum(s) + 2 * len(s), s) for s in sizes])
            for chunk in (data[:cut], data[cut:second_cut], data[second_cut:]):
                if chunk:
                    protocol.data_received(chunk)
            assert [_folded(f.result(), s) for f, s in zip(futures, sizes, strict=True)] == expected, cut
            assert (protocol.sent, len(protocol.waiting), protocol.lost) == (0, 0, None)


async def test_an_aborted_transaction_and_other_requests_are_answered_reply_by_reply() -> None:
    aborted = b"+OK\r\n-MOVED 3999 127.0.0.1:7001\r\n-EXECABORT Transaction discarded\r\n"
    protocol, (plain, other, clean) = _protocol_with(asyncio.get_running_loop(),
                                                     [(3, [1]), (1, None), (3, [1])])
    protocol.data_received(aborted + b":7\r\n" + _transaction(["5-0"]))
    assert type(plain.result()) is list
    assert isinstance(plain.result()[1], ReplyError)
    assert other.result() == [7]
    assert _folded(clean.result(), [1]) == [_flat(["5-0"])]  # after another request's reply: through hiredis


async def test_a_request_already_partly_read_is_finished_reply_by_reply() -> None:
    protocol, (request,) = _protocol_with(asyncio.get_running_loop(), [(3, [1])])
    protocol.data_received(b"+OK\r\n")  # the first reply arrived alone: read by hiredis
    assert protocol.waiting[0].replies == [b"OK"]
    protocol.data_received(b"+QUEUED\r\n*1\r\n$3\r\n6-0\r\n")
    assert type(request.result()) is list
    assert _folded(request.result(), [1]) == [_flat(["6-0"])]


async def test_a_cancelled_callers_folded_replies_are_dropped_and_the_next_one_gets_its_own() -> None:
    protocol, (cancelled, waiting) = _protocol_with(asyncio.get_running_loop(), [(3, [1]), (3, [1])])
    cancelled.cancel()
    protocol.data_received(_transaction(["7-0"]) + _transaction(["8-0"]))
    assert waiting.result() == [_flat(["8-0"])]
    assert protocol.sent == 0


async def test_a_request_cut_between_its_transactions_does_not_take_the_next_requests_replies() -> None:
    protocol, (two, one) = _protocol_with(asyncio.get_running_loop(), [(6, [1, 1]), (3, [1])])
    protocol.data_received(_transaction(["1-0"]))  # the first request's first transaction only: through hiredis
    protocol.data_received(_transaction(["2-0"]) + _transaction(["3-0"]))  # its second, then the next request's
    assert _folded(two.result(), [1, 1]) == [_flat(["1-0"]), _flat(["2-0"])]
    assert _folded(one.result(), [1]) == [_flat(["3-0"])]
