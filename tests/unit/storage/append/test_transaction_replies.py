"""Clean plain transactions' replies read straight from the received bytes (``read_transactions``),
and the connection's protocol answering a shaped request with its shape's reading, or, whenever
the replies are not clean or not whole in one read, with its fold of what hiredis read: the same
answer."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from types import ModuleType
from typing import Any, cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storage import _speedups
from storage._speedups.wire_py import read_transactions as read_transactions_python
from storage.append.appender import NodeReplies
from storage.append.calls import AppendCall, fold_transaction_replies
from storage.models import AppendOptions, Records
from storage.settings import RedisStoreSettings
from storage.wire import errors
from storage.wire.lanes import NodeLanes
from storage.wire.protocol import ReplyShape, Request, RespProtocol

_ids = st.builds(lambda ms, seq: f"{ms}-{seq}", st.integers(0, 2**64 - 1),
                 st.integers(0, 2**64 - 1))


def _transaction(ids: list[str]) -> bytes:
    """What Redis answers a clean MULTI, XADD x n, EXEC."""
    return (b"+OK\r\n" + b"+QUEUED\r\n" * len(ids) + b"*%d\r\n" % len(ids)
            + b"".join(b"$%d\r\n%b\r\n" % (len(i), i.encode()) for i in ids))


def _flat(ids: list[str]) -> list[Any]:
    return [x for i in ids for x in (i, 0)]


@pytest.fixture(scope="module")
def compiled(compiled_part: Callable[[str], ModuleType]) -> ModuleType:
    """The compiled reader's module itself, also when the extensions are switched off."""
    return compiled_part("storage._speedups._wire")


@pytest.fixture(scope="module", params=["compiled", "reference"])
def read(request: pytest.FixtureRequest) -> Any:
    if request.param == "reference":
        return read_transactions_python
    return request.getfixturevalue("compiled").read_transactions


def test_compiled_reader_is_installed_unless_switched_off(compiled: ModuleType) -> None:
    assert _speedups.read_transactions is (read_transactions_python if _speedups.OFF
                                           else compiled.read_transactions)


@settings(max_examples=200, deadline=None)
@given(transactions=st.lists(st.lists(_ids, max_size=6), max_size=4), lead=st.binary(max_size=6),
       tail=st.binary(max_size=6))
def test_clean_transactions_read_as_folds_and_their_end(read: Any,
                                                                   transactions: list[list[str]],
                                                                   lead: bytes,
                                                                   tail: bytes) -> None:
    body = b"".join(_transaction(ids) for ids in transactions)
    data = lead + body + tail
    assert read(data, len(lead), [len(ids) for ids in transactions]) == (
        [_flat(ids) for ids in transactions], len(lead) + len(body))


def test_read_cut_short_is_told_apart_from_unclean(read: Any) -> None:
    data = _transaction(["1-0", "1795418703164-12"]) + _transaction(["2-0"])
    for end in range(len(data)):
        # clean so far: the rest comes in a later read
        assert read(data[:end], 0, [2, 1]) is False, end
        # the same start, then what no clean transaction holds there
        broken = data[:end] + b"-ERR x\r\n"
        assert read(broken, 0, [2, 1]) is None, end
    assert read(data, 0, [2, 1]) is not None


@pytest.mark.parametrize("data", [
    b"-MOVED 3999 127.0.0.1:7001\r\n",  # MULTI refused
    b"+OK\r\n-MOVED 3999 127.0.0.1:7001\r\n-EXECABORT Transaction discarded\r\n",
    # EXEC nil (a WATCH'd key changed; never sent here, still not clean)
    b"+OK\r\n+QUEUED\r\n*-1\r\n",
    b"+OK\r\n+QUEUED\r\n*2\r\n$3\r\n1-0\r\n$3\r\n2-0\r\n",  # more IDs than XADDs
    b"+OK\r\n+QUEUED\r\n*1\r\n-ERR wrong type\r\n",  # a command failed while executing
    b"+OK\r\n+QUEUED\r\n*1\r\n$-1\r\n",
    b"+OK\r\n+QUEUED\r\n*1\r\n:1\r\n",
    b"+OK\r\n+QUEUED\r\n*1\r\n$3\r\n1-0\n\r",
    b"+OK\r\n+QUEUED\r\n*1\r\n$4\r\n1-0\r\n",
    b"+OK\r\n+QUEUED\r\n*1\r\n$3\r\n-10\r\n", b"+OK\r\n+QUEUED\r\n*1\r\n$3\r\n10-\r\n",
    b"+OK\r\n+QUEUED\r\n*1\r\n$3\r\n1-0-\r\n", b"+OK\r\n+QUEUED\r\n*1\r\n$3\r\n123\r\n",
    b"+OK\r\n+QUEUED\r\n*1\r\n$3\r\n1-a\r\n", b"+OK\r\n+QUEUED\r\n*1\r\n$2\r\n--\r\n",
    b"+OK\r\n+QUEUED\r\n*01x\r\n", b"+ok\r\n+QUEUED\r\n*1\r\n$3\r\n1-0\r\n",
    b"+OK\r\n+QUEUED \r\n*1\r\n$3\r\n1-0\r\n",
])
def test_anything_but_a_clean_transaction_is_left_to_hiredis(read: Any, data: bytes) -> None:
    assert read(data, 0, [1]) is None


def test_arguments_out_of_range_are_refused(read: Any) -> None:
    with pytest.raises(ValueError, match="offset"):
        read(b"+OK\r\n", 6, [0])
    with pytest.raises(ValueError, match="at least 0"):
        read(b"+OK\r\n*0\r\n", 0, [-1])
    assert read(b"+OK\r\n*0\r\n", 0, []) == ([], 0)


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=80), sizes=st.lists(st.integers(0, 3), max_size=3))
def test_compiled_reader_answers_any_bytes_as_the_reference(compiled: ModuleType, data: bytes,
                                                             sizes: list[int]) -> None:
    for prefix in (b"", b"+OK\r\n", b"+OK\r\n+QUEUED\r\n", b"+OK\r\n+QUEUED\r\n*1\r\n",
                   b"+OK\r\n+QUEUED\r\n*1\r\n$3\r\n", b"+OK\r\n+QUEUED\r\n*1\r\n$5\r\n1-"):
        for cut in (len(prefix + data), len(prefix + data) // 2):  # whole, and cut short
            chunk = (prefix + data)[:cut]
            assert (compiled.read_transactions(chunk, 0, sizes)
                    == read_transactions_python(chunk, 0, sizes))


# ---- the protocol ----

class _Transactions:
    """A request of plain transactions of these XADD counts, as the appender shapes it; it tells
    whether its answer was folded from hiredis' replies or read from the bytes."""

    def __init__(self, sizes: list[int]) -> None:
        self.sizes = sizes
        self.replies = sum(n + 2 for n in sizes)
        self.folded = False

    def read(self, data: bytes, offset: int) -> Any:
        return _speedups.read_transactions(data, offset, self.sizes)

    def fold(self, replies: list[Any]) -> list[Any]:
        self.folded = True
        answer, at = [], 0
        for n in self.sizes:
            answer.append(fold_transaction_replies(replies[at:at + n + 2]))
            at += n + 2
        return answer


def _protocol_with(loop: asyncio.AbstractEventLoop, requests: list[tuple[int, list[int] | None]],
                   ) -> tuple[RespProtocol, list[asyncio.Future[list[Any]]]]:
    protocol, futures = RespProtocol(), []
    for replies, sizes in requests:
        future: asyncio.Future[list[Any]] = loop.create_future()
        shapes: list[ReplyShape] | None = None if sizes is None else [_Transactions(sizes)]
        protocol.waiting.append(Request(future, replies, [], 0.0, shapes))
        protocol.sent += 1
        futures.append(future)
    return protocol, futures


def _shapes(protocol: RespProtocol) -> list[_Transactions]:
    """The shapes of the requests still waiting."""
    return [cast(_Transactions, r.shapes[0]) for r in protocol.waiting if r.shapes]


async def test_shaped_request_read_whole_is_answered_from_bytes() -> None:
    first, second = [["1-0", "1-1"], ["2-0"]], [["3-0"]]
    protocol, (one, two) = _protocol_with(asyncio.get_running_loop(), [(7, [2, 1]), (3, [1])])
    shapes = _shapes(protocol)
    protocol.data_received(b"".join(_transaction(ids) for ids in first + second))
    assert one.result() == [[_flat(ids) for ids in first]]
    assert two.result() == [[_flat(ids) for ids in second]]
    assert [shape.folded for shape in shapes] == [False, False]
    assert (protocol.sent, len(protocol.waiting), protocol.reader.has_data()) == (0, 0, False)


async def test_replies_split_at_any_byte_give_the_same_answers() -> None:
    requests: list[list[list[str]]] = [[["1-0", "1-1"], ["2-0"]], [["3-0"]], [[]],
                                       [["4-0", "4-1", "4-2"]]]
    data = b"".join(_transaction(ids) for request in requests for ids in request)
    sizes = [[len(ids) for ids in request] for request in requests]
    expected = [[[_flat(ids) for ids in request]] for request in requests]
    loop = asyncio.get_running_loop()
    for cut in range(len(data) + 1):
        for second_cut in (cut, min(cut + 7, len(data))):
            protocol, futures = _protocol_with(loop, [(sum(s) + 2 * len(s), s) for s in sizes])
            for chunk in (data[:cut], data[cut:second_cut], data[second_cut:]):
                if chunk:
                    protocol.data_received(chunk)
            assert [f.result() for f in futures] == expected, cut
            assert (protocol.sent, len(protocol.waiting), protocol.lost) == (0, 0, None)


async def test_aborted_transaction_is_answered_reply_by_reply() -> None:
    aborted = b"+OK\r\n-MOVED 3999 127.0.0.1:7001\r\n-EXECABORT Transaction discarded\r\n"
    protocol, (plain, other, clean) = _protocol_with(asyncio.get_running_loop(),
                                                     [(3, [1]), (1, None), (3, [1])])
    shapes = _shapes(protocol)
    protocol.data_received(aborted + b":7\r\n" + _transaction(["5-0"]))
    ((refusal,),) = plain.result()
    assert isinstance(refusal, errors.MovedError)  # the error that stopped it, for the appender
    assert other.result() == [7]  # raw, unshaped
    # after another request's reply: through hiredis, folded to the same answer
    assert clean.result() == [[_flat(["5-0"])]]
    assert [shape.folded for shape in shapes] == [True, True]


async def test_request_cut_inside_replies_is_read_once_all_arrive() -> None:
    protocol, (request,) = _protocol_with(asyncio.get_running_loop(), [(3, [1])])
    (shape,) = _shapes(protocol)
    # Redis answered the first commands it read: kept, not for hiredis
    protocol.data_received(b"+OK\r\n+QUE")
    assert (request.done(), protocol.reader.has_data(),
            protocol.waiting[0].replies) == (False, False, [])
    protocol.data_received(b"UED\r\n*1\r\n$3\r\n6-0\r\n")
    assert request.result() == [[_flat(["6-0"])]]
    assert not shape.folded


async def test_kept_replies_found_unclean_go_to_hiredis() -> None:
    protocol, (refused, after) = _protocol_with(asyncio.get_running_loop(), [(3, [1]), (1, None)])
    protocol.data_received(b"+OK\r\n")
    protocol.data_received(b"-MOVED 3999 127.0.0.1:7001\r\n-EXECABORT Transaction "
                           b"discarded\r\n:5\r\n")
    ((refusal,),) = refused.result()
    assert isinstance(refusal, errors.MovedError)
    assert after.result() == [5]
    assert (protocol.held, protocol.sent, protocol.reader.has_data()) == (b"", 0, False)


async def test_request_partly_read_by_hiredis_finishes_reply_by_reply() -> None:
    protocol, (other, request) = _protocol_with(asyncio.get_running_loop(), [(1, None), (3, [1])])
    (shape,) = _shapes(protocol)
    protocol.data_received(b"$5\r\nhel")  # another request's reply, cut: hiredis holds its start
    protocol.data_received(b"lo\r\n+OK\r\n+QUEUED\r\n*1\r\n$3\r\n6-0\r\n")
    assert other.result() == [b"hello"]
    assert request.result() == [[_flat(["6-0"])]]
    assert shape.folded


async def test_cancelled_callers_replies_are_dropped() -> None:
    protocol, (cancelled, waiting) = _protocol_with(asyncio.get_running_loop(),
                                                    [(3, [1]), (3, [1])])
    cancelled.cancel()
    protocol.data_received(_transaction(["7-0"]) + _transaction(["8-0"]))
    assert waiting.result() == [[_flat(["8-0"])]]
    assert protocol.sent == 0


async def test_request_cut_between_transactions_takes_no_next_reply() -> None:
    protocol, (two, one) = _protocol_with(asyncio.get_running_loop(), [(6, [1, 1]), (3, [1])])
    # the first request's first transaction only: kept
    protocol.data_received(_transaction(["1-0"]))
    # its second, then the next request's
    protocol.data_received(_transaction(["2-0"]) + _transaction(["3-0"]))
    assert two.result() == [[_flat(["1-0"]), _flat(["2-0"])]]
    assert one.result() == [[_flat(["3-0"])]]


async def test_a_group_commits_wait_reply_is_read_after_its_shapes() -> None:
    protocol, (request,) = _protocol_with(asyncio.get_running_loop(), [(3 + 4 + 1, [1, 2])])
    (shape,) = _shapes(protocol)
    protocol.data_received(_transaction(["1-0"]) + _transaction(["2-0", "2-1"]) + b":1\r\n")
    assert request.result() == [[_flat(["1-0"]), _flat(["2-0", "2-1"])], 1]
    assert not shape.folded


async def test_wait_reply_in_later_read_joins_earlier_answers() -> None:
    protocol, (request,) = _protocol_with(asyncio.get_running_loop(), [(3 + 4 + 1, [1, 2])])
    (shape,) = _shapes(protocol)
    # WAIT answers later
    protocol.data_received(_transaction(["1-0"]) + _transaction(["2-0", "2-1"]))
    assert not request.done()
    assert protocol.waiting[0].remaining == 1
    protocol.data_received(b":1\r\n")
    assert request.result() == [[_flat(["1-0"]), _flat(["2-0", "2-1"])], 1]
    assert not shape.folded


@pytest.mark.parametrize("wait_reply", [b"-NOREPLICAS not enough\r\n", b":x\r\n", b":1", b":1\r"])
async def test_non_integer_wait_reply_is_read_by_the_reader(wait_reply: bytes) -> None:
    protocol, (request,) = _protocol_with(asyncio.get_running_loop(), [(3 + 1, [1])])
    protocol.data_received(_transaction(["1-0"]) + wait_reply)
    if wait_reply.startswith(b"-"):  # the answer as read, the error as a redis exception
        assert request.result()[0] == [_flat(["1-0"])]
        assert isinstance(request.result()[1], errors.ResponseError)
    elif wait_reply == b":x\r\n":  # not RESP: the connection fails, as it did before
        assert protocol.lost is not None
    else:  # cut: the rest comes later, through the reader
        assert not request.done()
        protocol.data_received(b"\r\n"[len(wait_reply) - 2:])
        assert request.result() == [[_flat(["1-0"])], 1]


class _OneWriteServer:
    """Answers ``answer`` in one write once a WAIT has been received (replies whole in one read)."""

    def __init__(self, answer: bytes) -> None:
        self.answer = answer

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        received = b""
        while b"WAIT" not in received and (chunk := await reader.read(65536)):
            received += chunk
        writer.write(self.answer)
        await writer.drain()
        await reader.read()
        writer.close()


@pytest.mark.parametrize("wait_reply", [b":1\r\n", b"-ERR no (test)\r\n"])
@pytest.mark.parametrize("shaped", [True, False], ids=["all-shaped", "one-unshaped"])
async def test_group_commit_callers_get_own_answer_and_the_wait(
        wait_reply: bytes, shaped: bool) -> None:
    answer = (_transaction(["1-0", "1-1"]) + _transaction(["2-0"]) + _transaction(["3-0"])
              + wait_reply)
    server = _OneWriteServer(answer)
    listener = await asyncio.start_server(server.handle, "127.0.0.1", 0)
    address = ("127.0.0.1", listener.sockets[0].getsockname()[1])
    try:
        async with NodeLanes(RedisStoreSettings(client_name=None)) as lanes:
            first, second = await asyncio.gather(
                lanes.execute_replicated(address, b"a", 4, replicas=1, timeout_ms=50,
                                         shape=_Transactions([2])),
                lanes.execute_replicated(address, b"b", 6, replicas=1, timeout_ms=50,
                                         shape=_Transactions([1, 1]) if shaped else None))
    finally:
        listener.close()
        await listener.wait_closed()
    assert first[:-1] == [[_flat(["1-0", "1-1"])]]
    if shaped:
        assert second[:-1] == [[_flat(["2-0"]), _flat(["3-0"])]]
    else:  # its raw replies, error replies as exceptions
        assert second[:-1] == [b"OK", b"QUEUED", [b"2-0"], b"OK", b"QUEUED", [b"3-0"]]
    if wait_reply == b":1\r\n":
        assert first[-1] == second[-1] == 1
    else:  # WAIT's error, as a redis exception value, for each caller
        assert isinstance(first[-1], errors.ResponseError)
        assert second[-1] is first[-1]


async def test_group_commit_replies_split_anywhere_give_same_answer() -> None:
    data = _transaction(["1-0", "1-1"]) + _transaction(["2-0"]) + b":1\r\n"
    loop = asyncio.get_running_loop()
    for cut in range(len(data) + 1):
        protocol, (request,) = _protocol_with(loop, [(4 + 3 + 1, [2, 1])])
        for chunk in (data[:cut], data[cut:]):
            if chunk:
                protocol.data_received(chunk)
        assert request.result() == [[_flat(["1-0", "1-1"]), _flat(["2-0"])], 1], cut
        assert (protocol.sent, len(protocol.waiting), protocol.lost) == (0, 0, None)


async def test_request_expecting_more_than_shapes_reads_one_by_one() -> None:
    protocol, (request,) = _protocol_with(asyncio.get_running_loop(), [(3 + 2, [1])])
    (shape,) = _shapes(protocol)
    protocol.data_received(_transaction(["1-0"]) + b":1\r\n:2\r\n")
    assert request.result() == [[_flat(["1-0"])], 1, 2]
    assert shape.folded


def _node_calls() -> list[AppendCall]:
    plain = AppendCall("t", 0, Records([0, 0], [b"a", b"b"], [None, None]), AppendOptions())
    keyed = AppendCall("t", 1, Records([1], [b"c"], [None], idempotency_keys=["k"]),
                       AppendOptions())
    return [plain, keyed]


def test_nodes_transactions_are_read_from_bytes_in_call_order() -> None:
    plain = _node_calls()[0]
    shape = NodeReplies([plain, plain], [False, False])
    data = _transaction(["1-0", "1-1"]) + _transaction(["2-0", "2-1"])
    assert shape.replies == 8
    assert shape.read(data, 0) == ([_flat(["1-0", "1-1"]), _flat(["2-0", "2-1"])], len(data))


def test_script_call_or_asking_is_folded_per_call() -> None:
    plain, keyed = _node_calls()
    scripted = NodeReplies([plain, keyed], [False, False])
    assert scripted.read(_transaction(["1-0", "1-1"]) + b"*2\r\n$3\r\n3-0\r\n:1\r\n", 0) is None
    asked = NodeReplies([plain], [True])
    assert asked.replies == 5
    assert asked.read(b"+OK\r\n" + _transaction(["1-0", "1-1"]), 0) is None
    assert asked.fold([b"OK", b"OK", b"QUEUED", b"QUEUED", [b"1-0", b"1-1"]]) == [
        _flat(["1-0", "1-1"])]
    assert scripted.fold([b"OK", b"QUEUED", b"QUEUED", [b"1-0", b"1-1"], [b"3-0", 1]]) == [
        _flat(["1-0", "1-1"]), [b"3-0", 1]]
