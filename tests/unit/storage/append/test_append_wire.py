"""An append call from the columns (``AppendCall``): the same transaction, script call and entries
whichever way its records are encoded, and the compiled parts byte for byte their Python
references."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from types import ModuleType
from typing import Any

import fakeredis
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storage import _speedups
from storage._speedups.wire_py import fold_transaction as fold_transaction_python
from storage._speedups.wire_py import in_input_order as in_input_order_python
from storage._speedups.wire_py import reply_offsets as reply_offsets_python
from storage._speedups.wire_py import split_by_partition as split_by_partition_python
from storage._speedups.wire_py import xadd_transaction as xadd_transaction_python
from storage.append.calls import AppendCall, fold_transaction_replies
from storage.append.lua import APPEND_LUA
from storage.keys import log_key
from storage.models import AppendOptions, Records, ValueFormat
from storage.wire.errors import as_redis_error, with_redis_errors
from storage.wire.resp import ReplyError, encode_command

_columns = st.lists(st.tuples(st.binary(max_size=300), st.none() | st.binary(max_size=40)),
                    max_size=12)


@pytest.fixture(scope="module")
def compiled(compiled_part: Callable[[str], ModuleType]) -> ModuleType:
    """The compiled parts' module itself, also when the extensions are switched off."""
    return compiled_part("storage._speedups._wire")


def test_compiled_encoder_is_installed_unless_switched_off(compiled: ModuleType) -> None:
    chosen = xadd_transaction_python if _speedups.OFF else compiled.xadd_transaction
    assert _speedups.xadd_transaction is chosen
    assert (_speedups.fold_transaction_or_none is compiled.fold_transaction) is not _speedups.OFF
    assert compiled.fold_transaction([b"OK", b"QUEUED", [b"1-0"]]) == ["1-0", 0]


@settings(max_examples=300, deadline=None)
@given(rows=_columns, keyed=st.binary(max_size=60), keyless=st.binary(max_size=60),
       fmt=st.binary(max_size=20))
def test_compiled_encoder_equals_the_reference(compiled: ModuleType,
                                               rows: list[tuple[bytes, bytes | None]], keyed: bytes,
                                               keyless: bytes, fmt: bytes) -> None:
    values, keys = [v for v, _ in rows], [k for _, k in rows]
    assert compiled.xadd_transaction(keyed, keyless, fmt, values, keys) == \
        xadd_transaction_python(keyed, keyless, fmt, values, keys)


@pytest.mark.parametrize("size", [0, 1, 9, 10, 99, 100, 999, 1000, 9_999, 10_000, 99_999, 100_000,
                                  1_048_576])
def test_compiled_encoder_writes_length_prefixes_as_reference(compiled: ModuleType,
                                                                      size: int) -> None:
    """The compiled encoder writes its ``$<length>`` digits itself: lengths either side of each
    added digit, for values, keys (whose field name is one byte longer) and keyless records."""
    values, keys = ([b"v" * size, b"w" * size, b"x" * size],
                    [b"k" * size, b"K" * max(size - 1, 0), None])
    wire = compiled.xadd_transaction(b"*5\r\n", b"*5\r\n", b"$1\r\nj\r\n", values, keys)
    assert wire == xadd_transaction_python(b"*5\r\n", b"*5\r\n", b"$1\r\nj\r\n", values, keys)
    assert f"${size}\r\n".encode() + b"v" * size in wire
    assert f"${size + 1}\r\nK".encode() + b"k" * size in wire


def test_compiled_encoder_refuses_mismatched_or_mistyped_columns(compiled: ModuleType) -> None:
    with pytest.raises(ValueError, match="differ in length"):
        compiled.xadd_transaction(b"", b"", b"", [b"a"], [])
    with pytest.raises(TypeError):
        compiled.xadd_transaction(b"", b"", b"", ["a"], [None])
    with pytest.raises(TypeError):
        compiled.xadd_transaction(b"", b"", b"", [b"a"], ["k"])


@settings(max_examples=300, deadline=None)
@given(rows=_columns, fmt=st.sampled_from(list(ValueFormat)),
       max_length=st.none() | st.integers(1, 10**9))
def test_columns_of_one_format_encode_as_record_by_record(rows: list[tuple[bytes, bytes | None]],
                                                          fmt: ValueFormat,
                                                          max_length: int | None) -> None:
    values, keys, options = ([v for v, _ in rows], [k for _, k in rows],
                             AppendOptions(max_length=max_length))
    call = AppendCall("topic/é", 3, Records([3] * len(rows), values, keys, fmt), options)
    one_by_one = AppendCall("topic/é", 3,
                            # a format per record and headers: encoded record by record
                            Records([3] * len(rows), values, keys, [fmt] * len(rows),
                                    [{}] * len(rows)), options)
    assert call.wire() == one_by_one.wire()
    assert call.wire() == b"".join(encode_command(command)
                                   for command in call.transaction_commands())
    assert call.evalsha_command() == one_by_one.evalsha_command()
    assert call.wire_replies == len(rows) + 2


@pytest.fixture
async def redis() -> AsyncIterator[Any]:
    client = fakeredis.FakeAsyncRedis()
    yield client
    await client.aclose()


async def test_the_script_form_appends_and_replies_offsets_in_order(redis: Any) -> None:
    call = AppendCall("t", 0, Records([0, 0], [b"a", b"b"], [b"k", None], ValueFormat.BINARY),
                      AppendOptions())
    _, _sha, key_count, *rest = call.evalsha_command()
    reply = await redis.eval(APPEND_LUA, key_count, *rest)
    offsets = _speedups.reply_offsets(0, reply)
    entries = await redis.xrange(log_key("t", 0))
    assert offsets == [e[0].decode() for e in entries]
    assert [e[1] for e in entries] == [{b"Kk": b"a", b"f": b"b"}, {b"v": b"b", b"f": b"b"}]


def test_an_executed_transaction_folds_into_offsets() -> None:
    call = AppendCall("t", 0, Records([0, 0], [b"a", b"b"], [None, None]), AppendOptions())
    folded = call.fold_replies([b"OK", b"QUEUED", b"QUEUED", [b"5-0", b"5-1"]])
    assert _speedups.reply_offsets(0, folded) == ["5-0", "5-1"]


@settings(max_examples=300, deadline=None)
@given(rows=st.lists(st.tuples(st.integers(0, 5), st.binary(max_size=8),
                               st.none() | st.binary(max_size=4)),
                     max_size=40))
def test_compiled_split_equals_reference_and_keeps_order(
        compiled: ModuleType, rows: list[tuple[int, bytes, bytes | None]]) -> None:
    partitions, values, keys = ([p for p, _, _ in rows], [v for _, v, _ in rows],
                                [k for _, _, k in rows])
    groups = compiled.split_by_partition(partitions, values, keys)
    assert groups == split_by_partition_python(partitions, values, keys)
    # partitions in order of first appearance
    assert list(groups) == list(dict.fromkeys(partitions))
    for partition, (indexes, group_values, group_keys) in groups.items():
        assert indexes == [i for i, p in enumerate(partitions) if p == partition]
        assert (group_values, group_keys) == ([values[i] for i in indexes],
                                              [keys[i] for i in indexes])


def test_compiled_split_refuses_columns_of_different_lengths(compiled: ModuleType) -> None:
    with pytest.raises(ValueError, match="differ in length"):
        compiled.split_by_partition([0, 1], [b"a"], [None, None])


_ids = st.lists(st.from_regex(rb"\A[0-9]{1,13}-[0-9]{1,4}\Z"), max_size=20)
_error = st.sampled_from([ReplyError("MOVED 3999 127.0.0.1:7001"),
                          ReplyError("EXECABORT Transaction discarded"),
                          as_redis_error(ReplyError("ASK 3999 127.0.0.1:7002")),
                          as_redis_error(ReplyError("OOM"))])


@settings(max_examples=300, deadline=None)
@given(ids=_ids, queued_error=st.none() | st.tuples(st.integers(0, 20), _error),
       executed=st.sampled_from(["list", "nil", "error", "error inside"]))
def test_compiled_fold_answers_clean_transactions_as_reference(
        compiled: ModuleType, ids: list[bytes], queued_error: tuple[int, BaseException] | None,
        executed: str) -> None:
    queued: list[Any] = [b"QUEUED"] * len(ids)
    if queued_error is not None and queued:
        queued[queued_error[0] % len(queued)] = queued_error[1]
    last: Any = {"list": ids, "nil": None,
                 "error": as_redis_error(ReplyError("EXECABORT Transaction discarded")),
                 "error inside": [*ids, ReplyError("WRONGTYPE Operation against a key")]}[executed]
    replies = [b"OK", *queued, last]
    clean = executed == "list" and (queued_error is None or not queued)
    folded = compiled.fold_transaction(replies)
    reference = fold_transaction_python(replies)
    if clean:
        assert folded == [part.decode() if isinstance(part, bytes) else part for part in reference]
        assert (compiled.reply_offsets(0, folded) == reply_offsets_python(0, reference)
                == [i.decode() for i in ids])
    else:
        assert folded is None
        outcome = fold_transaction_replies(replies)
        assert type(outcome) is type(reference)
        assert str(outcome) == str(reference)


@settings(max_examples=200, deadline=None)
@given(reply=st.lists(st.binary(max_size=8) | st.text(max_size=8) | st.integers(0, 1), max_size=30))
def test_compiled_offsets_of_a_flat_reply_equal_the_reference(compiled: ModuleType,
                                                              reply: list[Any]) -> None:
    try:
        expected: Any = reply_offsets_python(0, reply)
    except UnicodeDecodeError:
        expected = UnicodeDecodeError
    if expected is UnicodeDecodeError:
        with pytest.raises(UnicodeDecodeError):
            compiled.reply_offsets(0, reply)
    else:
        assert compiled.reply_offsets(0, reply) == expected


@settings(max_examples=300, deadline=None)
@given(partitions=st.lists(st.integers(0, 7), max_size=60))
def test_compiled_input_order_equals_the_reference(compiled: ModuleType,
                                                   partitions: list[int]) -> None:
    values = [b"v%d" % i for i in range(len(partitions))]
    groups = compiled.split_by_partition(partitions, values, [None] * len(partitions))
    written = {p: [f"{p}-{i}" for i in range(len(group[0]))] for p, group in groups.items()}
    ordered = compiled.in_input_order(len(partitions), groups, written)
    assert ordered == in_input_order_python(len(partitions), groups, written)
    assert [offset.split("-")[0] for offset in ordered] == [str(p) for p in partitions]


def test_compiled_input_order_refuses_mismatched_offsets(compiled: ModuleType) -> None:
    groups = compiled.split_by_partition([0, 1, 0], [b"a", b"b", b"c"], [None, None, None])
    with pytest.raises(ValueError, match="differ in length"):
        compiled.in_input_order(3, groups, {0: ["1-0"], 1: ["1-1"]})
    with pytest.raises(KeyError):
        compiled.in_input_order(3, groups, {0: ["1-0", "1-2"]})
    with pytest.raises(IndexError):
        compiled.in_input_order(2, groups, {0: ["1-0", "1-2"], 1: ["1-1"]})


def test_replies_pass_through_and_errors_become_redis_exceptions() -> None:
    clean: list[Any] = [b"OK", 1, [ReplyError("nested stays")]]
    assert with_redis_errors(clean) is clean
    converted = with_redis_errors([b"OK", ReplyError("MOVED 3999 127.0.0.1:7001")])
    assert converted[0] == b"OK"
    assert type(converted[1]).__name__ == "MovedError"
