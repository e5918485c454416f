"""The indexed append call's RESP bytes: the fast encoding of the common publish and the general
one both equal the plain encoding of the command they stand for."""

from __future__ import annotations

import pytest

from storage.append.indexed import IndexedAppendCall, conflict_of
from storage.models import AppendOptions, Conditions, Records, ValueFormat
from storage.wire.errors import as_redis_error
from storage.wire.resp import ReplyError, encode_command

VALUES = [b'{"n":%d}' % i for i in range(12)]
KEYS: list[bytes | None] = [b"k%d" % (i % 4) if i % 3 else None for i in range(12)]

SHAPES = {
    "plain": Records([0] * 12, VALUES, KEYS),
    "binary with a batch key": Records([0] * 12, VALUES, KEYS, ValueFormat.BINARY,
                                       batch_key="b-1"),
    "idempotency keys and headers": Records([0] * 12, VALUES, KEYS, ValueFormat.JSON,
                                            [{"h": "v"}] * 12, [None, "i"] * 6),
}


@pytest.mark.parametrize("records", SHAPES.values(), ids=SHAPES.keys())
@pytest.mark.parametrize("conditions", [None, Conditions("5-1", None),
                                        Conditions(None, [None, "7-0"] + [None] * 10)])
@pytest.mark.parametrize("options", [AppendOptions(key_index=True),
                                     AppendOptions(max_length=9), AppendOptions(key_index=True,
                                                                                max_length=9)])
def test_the_wire_is_the_command_encoded(records: Records, conditions: Conditions | None,
                                         options: AppendOptions) -> None:
    call = IndexedAppendCall("t", 3, records, options, conditions)
    assert call.wire() == encode_command(call.evalsha_command())


def test_each_key_is_indexed_once_per_call_keyless_never() -> None:
    call = IndexedAppendCall("t", 3, SHAPES["plain"], AppendOptions(key_index=True), None)
    command = call.evalsha_command()
    keys = command[3:3 + command[2]]
    assert keys == ("sg:{t/3}:log", "sg:{t/3}:keys", "sg:{t/3}:compact", "sg:{t/3}:segments",
                    b"sg:{t/3}:key:k1", b"sg:{t/3}:key:k2", b"sg:{t/3}:key:k0",
                    b"sg:{t/3}:key:k3")
    # then max length, dedup TTL, the expected last offset, the marker flag, and per record, packed:
    # dedup keys (none), key indexes' places, expected offsets (none); not a compacted topic
    assert command[3 + len(keys) + 7] == 0
    assert command[3 + len(keys) + 4:3 + len(keys) + 7] == ("", "0 5 6 0 7 5 0 8 7 0 6 8", "")


def test_a_conflict_reply_names_the_record_and_both_offsets() -> None:
    failed = conflict_of(3, as_redis_error(ReplyError("SG_CONFLICT 4 1-0 2-5")))
    assert failed is not None
    assert (failed.partition, failed.index, failed.expected, failed.current) == (3, 4, "1-0",
                                                                                  "2-5")
    whole = conflict_of(3, as_redis_error(ReplyError("SG_CONFLICT -1 none 9-0")))
    assert whole is not None
    assert whole.index is None
    assert conflict_of(3, as_redis_error(ReplyError("ERR something else"))) is None
