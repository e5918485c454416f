"""Error replies become the store's own exceptions, with the text redis-py would give them and the
retry treatment (transient, slot map refresh) that redis-py's exception for them got."""

from __future__ import annotations

import pytest
from redis._parsers.base import (
    BaseParser,  # the reference (private to redis-py): only the test reads it
)

from storage.cluster import is_transient, needs_refresh
from storage.wire import errors
from storage.wire.errors import as_redis_error
from storage.wire.resp import ReplyError

REPLIES = {
    "MOVED 3999 127.0.0.1:7001": errors.MovedError, "ASK 3999 127.0.0.1:7002": errors.AskError,
    "TRYAGAIN Multiple keys request during rehashing": errors.TryAgainError,
    "CLUSTERDOWN The cluster is down": errors.ClusterDownError,
    "CROSSSLOT Keys in request don't hash to the same slot": errors.CrossSlotError,
    "MASTERDOWN Link with MASTER is down": errors.MasterDownError,
    "READONLY You can't write against a read only replica.": errors.ReadOnlyError,
    "LOADING Redis is loading the dataset in memory": errors.LoadingError,
    "NOSCRIPT No matching script.": errors.NoScriptError,
    "EXECABORT Transaction discarded because of previous errors.": errors.ExecAbortError,
    "OOM command not allowed": errors.OutOfMemoryError, "OOM": errors.OutOfMemoryError,
    "NOAUTH Authentication required.": errors.AuthenticationFailed,
    "WRONGPASS invalid username-password pair": errors.AuthenticationFailed,
    "NOPERM no permission": errors.NoPermissionError,
    "ERR unknown command 'FOO'": errors.ResponseError, "ERR": errors.ResponseError,
    "ERR max number of clients reached": errors.ConnectionLost,
    "WRONGTYPE Operation against a key holding the wrong kind of value": errors.ResponseError,
    "BUSYGROUP Consumer Group name already exists": errors.ResponseError,
    "MOVED nonsense": errors.ResponseError,
}


@pytest.mark.parametrize("text", REPLIES)
def test_error_reply_becomes_the_stores_exception_for_its_code(text: str) -> None:
    assert type(as_redis_error(ReplyError(text))) is REPLIES[text]


@pytest.mark.parametrize("text", [t for t in REPLIES if t != "MOVED nonsense"])
def test_error_reply_keeps_redis_pys_text_and_retry_treatment(text: str) -> None:
    ours, theirs = as_redis_error(ReplyError(text)), BaseParser.parse_error(text)  # type: ignore[no-untyped-call]
    assert ours.args == theirs.args
    assert (is_transient(ours), needs_refresh(ours)) == (is_transient(theirs),
                                                         needs_refresh(theirs))


def test_redirects_carry_the_slot_and_the_node() -> None:
    moved = as_redis_error(ReplyError("MOVED 3999 127.0.0.1:7001"))
    assert isinstance(moved, errors.MovedError)
    assert (moved.slot, moved.host, moved.port) == (3999, "127.0.0.1", 7001)
    asked = as_redis_error(ReplyError("ASK 12 ::1:7002"))
    assert isinstance(asked, errors.AskError)
    assert (asked.slot, asked.host, asked.port) == (12, "::1", 7002)


def test_every_code_the_store_tells_apart_is_one_redis_py_knows() -> None:
    assert set(errors.ERROR_CLASSES) <= set(BaseParser.EXCEPTION_CLASSES)
