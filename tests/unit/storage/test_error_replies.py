"""Error replies become the exceptions redis-py would raise for them, with the same text."""

from __future__ import annotations

import pytest
from redis import exceptions as rexc
from redis._parsers.base import (
    BaseParser,  # the reference (private to redis-py): only the test reads it
)

from storage.resp import ERROR_CLASSES, ReplyError, as_redis_error

REPLIES = ["MOVED 3999 127.0.0.1:7001", "ASK 3999 127.0.0.1:7002",
           "TRYAGAIN Multiple keys request during rehashing", "CLUSTERDOWN The cluster is down",
           "CROSSSLOT Keys in request don't hash to the same slot",
           "MASTERDOWN Link with MASTER is down",
           "READONLY You can't write against a read only replica.",
           "LOADING Redis is loading the dataset in memory", "NOSCRIPT No matching script.",
           "EXECABORT Transaction discarded because of previous errors.", "OOM command not allowed",
           "NOAUTH Authentication required.", "WRONGPASS invalid username-password pair",
           "NOPERM no permission", "ERR unknown command 'FOO'", "ERR max number of clients reached",
           "WRONGTYPE Operation against a key holding the wrong kind of value",
           "BUSYGROUP Consumer Group name already exists", "OOM", "ERR"]


@pytest.mark.parametrize("text", REPLIES)
def test_an_error_reply_becomes_the_exception_redis_py_raises_with_its_text(text: str) -> None:
    ours, theirs = as_redis_error(ReplyError(text)), BaseParser.parse_error(text)  # type: ignore[no-untyped-call]
    assert type(ours) is type(theirs)
    assert ours.args == theirs.args


def test_redirects_carry_the_slot_and_the_node() -> None:
    moved = as_redis_error(ReplyError("MOVED 3999 127.0.0.1:7001"))
    assert isinstance(moved, rexc.MovedError)
    assert (moved.slot_id, moved.host, moved.port) == (3999, "127.0.0.1", 7001)


def test_every_code_the_store_tells_apart_is_one_redis_py_knows() -> None:
    assert set(ERROR_CLASSES) <= set(BaseParser.EXCEPTION_CLASSES)
