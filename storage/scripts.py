"""The Lua append script and the argument layout it expects.

One call appends a whole batch to one partition, so a partition's batch is atomic and the idempotency check
(GET of the dedup key) and the XADD cannot interleave with another writer.

KEYS[1]  = the partition's stream; KEYS[2..] = dedup keys of the records that carry an idempotency key.
ARGV[1]  = approximate max length (0 = unbounded); ARGV[2] = dedup TTL in ms;
then per record: dedup index (0 = none, i means KEYS[i + 1]), field count, fields...
Reply: a flat array ``[offset, dupflag, offset, dupflag, ...]`` in record order.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from storage.codec import encode_fields
from storage.keys import dedup_key, log_key
from storage.models import AppendOptions, AppendResult, Record, ValueFormat
from storage.resp import encode_command

APPEND_LUA = """
local log = KEYS[1]
local maxlen = tonumber(ARGV[1])
local ttl = ARGV[2]
local out = {}
local i = 3
local n = #ARGV
while i <= n do
  local d = tonumber(ARGV[i])
  local last = i + 1 + tonumber(ARGV[i + 1])
  local found = false
  if d > 0 then
    found = redis.call('GET', KEYS[d + 1])
  end
  if found then
    -- A replicated write on the duplicate path, so a following WAIT on this connection also covers the
    -- original entry (replication is in order); a bare GET would let acks=all confirm an unreplicated write.
    redis.call('SET', KEYS[d + 1], found, 'KEEPTTL')
    out[#out + 1] = found
    out[#out + 1] = 1
  else
    local id
    if maxlen > 0 then
      id = redis.call('XADD', log, 'MAXLEN', '~', maxlen, '*', unpack(ARGV, i + 2, last))
    else
      id = redis.call('XADD', log, '*', unpack(ARGV, i + 2, last))
    end
    if d > 0 then
      redis.call('SET', KEYS[d + 1], id, 'PX', ttl, 'NX')
    end
    out[#out + 1] = id
    out[#out + 1] = 0
  end
  i = last + 1
end
return out
"""



@dataclass(frozen=True, slots=True)
class LuaScript:
    """A Lua script's text and the SHA1 that EVALSHA names it by."""

    lua: str
    sha: str

    @classmethod
    def of(cls, lua: str) -> LuaScript:
        """The script with its SHA computed from the text."""
        return cls(lua, hashlib.sha1(lua.encode()).hexdigest())


APPEND_SCRIPT = LuaScript.of(APPEND_LUA)
APPEND_SHA = APPEND_SCRIPT.sha


class PartitionCall(Protocol):
    """One script call on one partition, as the appender sends it."""

    @property
    def partition(self) -> int: ...

    @property
    def script(self) -> LuaScript: ...

    def evalsha_command(self) -> tuple[Any, ...]:
        """The command as values (for a redis-py pipeline)."""
        ...

    def evalsha_wire(self) -> bytes:
        """The command as RESP bytes (for the lean connections)."""
        ...


@dataclass(frozen=True, slots=True)
class ScriptCall:
    """Keys and arguments of one script call on one partition (the append script unless told otherwise)."""

    partition: int
    keys: list[str]
    args: list[Any]
    script: LuaScript = APPEND_SCRIPT

    def evalsha_command(self) -> tuple[Any, ...]:
        """The raw ``EVALSHA`` command (script SHA, key count, keys, args)."""
        return ("EVALSHA", self.script.sha, len(self.keys), *self.keys, *self.args)

    def evalsha_wire(self) -> bytes:
        """The same command as RESP bytes (what the lean connections send)."""
        return encode_command(self.evalsha_command())


@dataclass(frozen=True, slots=True)
class PreparedCall:
    """A script call encoded once, for a command sent again and again (the promoter's, every tick)."""

    partition: int
    script: LuaScript
    command: tuple[Any, ...]
    wire: bytes

    @classmethod
    def of(cls, call: ScriptCall) -> PreparedCall:
        """``call`` with its command and RESP bytes computed now."""
        command = call.evalsha_command()
        return cls(call.partition, call.script, command, encode_command(command))

    def evalsha_command(self) -> tuple[Any, ...]:
        """The command as values."""
        return self.command

    def evalsha_wire(self) -> bytes:
        """The command as RESP bytes."""
        return self.wire


class AppendCall:
    """One partition's records for the append script: encoded straight to RESP for the lean connections.

    ``evalsha_wire`` is the append hot path: one %-format per record instead of one encode step per argument
    (the generic ``encode_command`` of ``evalsha_command``, byte for byte; tests pin the equality).
    ``args`` and ``evalsha_command`` lay out the same call as values for redis-py and tests.
    """

    __slots__ = ("_dedup_indexes", "keys", "options", "partition", "records")
    script = APPEND_SCRIPT

    def __init__(self, topic: str, partition: int, records: Sequence[Record], options: AppendOptions) -> None:
        self.partition = partition
        self.records = records
        self.options = options
        self.keys = [log_key(topic, partition)]
        self._dedup_indexes: list[int] = []
        for record in records:
            if record.idempotency_key is None:
                self._dedup_indexes.append(0)
            else:
                self.keys.append(dedup_key(topic, partition, record.idempotency_key))
                self._dedup_indexes.append(len(self.keys) - 1)

    @property
    def args(self) -> list[Any]:
        """ARGV as values: max length, dedup TTL, then per record its dedup index, field count and fields."""
        args: list[Any] = [self.options.max_length or 0, self.options.dedup_ttl_ms]
        for record, dedup_index in zip(self.records, self._dedup_indexes, strict=True):
            fields = encode_fields(record)
            args += (dedup_index, len(fields), *fields)
        return args

    def evalsha_command(self) -> tuple[Any, ...]:
        """The raw ``EVALSHA`` command (script SHA, key count, keys, args)."""
        return ("EVALSHA", self.script.sha, len(self.keys), *self.keys, *self.args)

    def evalsha_wire(self) -> bytes:
        """The command as RESP bytes, identical to ``encode_command(self.evalsha_command())``."""
        options = self.options
        head: tuple[str | int, ...] = ("EVALSHA", self.script.sha, len(self.keys), *self.keys, options.max_length or 0,
                options.dedup_ttl_ms)
        chunks = [b"", _without_array_header(encode_command(head), len(head))]  # chunks[0]: the header, below
        count = len(head)
        encode_record = _encode_record
        for record, dedup_index in zip(self.records, self._dedup_indexes, strict=True):
            wire, fields = encode_record(record, dedup_index)
            chunks.append(wire)
            count += 2 + fields
        chunks[0] = b"*%d\r\n" % count
        return b"".join(chunks)


def _without_array_header(command: bytes, count: int) -> bytes:
    """The bulk strings of an encoded command, without its ``*<count>`` array header."""
    return command[len(b"*%d\r\n" % count):]


_FORMAT_WIRE = {fmt: b"$1\r\nf\r\n$%d\r\n%b\r\n" % (len(fmt.value), fmt.value.encode()) for fmt in ValueFormat}
_INDEX_WIRE = [b"$%d\r\n%d\r\n" % (len(str(i)), i) for i in range(1024)]


def _encode_record(record: Record, dedup_index: int) -> tuple[bytes, int]:
    """One record's ARGV part (dedup index, field count, fields) as RESP, and its field count."""
    value, key, headers = record.value, record.key, record.headers
    index = _INDEX_WIRE[dedup_index] if dedup_index < 1024 else b"$%d\r\n%d\r\n" % (len(str(dedup_index)),
                                                                                     dedup_index)
    fmt = _FORMAT_WIRE[record.value_format]
    if key is not None and not headers:
        return (b"%b$1\r\n6\r\n$1\r\nv\r\n$%d\r\n%b\r\n%b$1\r\nk\r\n$%d\r\n%b\r\n"
                % (index, len(value), value, fmt, len(key), key), 6)
    if key is None and not headers:
        return b"%b$1\r\n4\r\n$1\r\nv\r\n$%d\r\n%b\r\n%b" % (index, len(value), value, fmt), 4
    fields = encode_fields(record)
    return index + b"".join([b"$%d\r\n%b\r\n" % (len(f), f) for f in [b"%d" % len(fields), *fields]]), \
        len(fields)


def build_append_call(topic: str, partition: int, records: Sequence[Record], options: AppendOptions) -> AppendCall:
    """Lay out one partition's records as the script's KEYS and ARGV."""
    return AppendCall(topic, partition, records, options)


def parse_append_reply(partition: int, reply: Sequence[Any]) -> list[AppendResult]:
    """Turn the script's flat ``[offset, dupflag, ...]`` reply into results in record order."""
    new, set_partition, set_offset, set_duplicate = _new_result, *_RESULT_SETTERS
    results: list[AppendResult] = []
    for offset, flag in zip(reply[0::2], reply[1::2], strict=True):
        result = new(AppendResult)  # filled through its slots: the frozen dataclass __init__ costs twice as much
        set_partition(result, partition)
        set_offset(result, offset.decode() if isinstance(offset, bytes) else offset)
        set_duplicate(result, bool(int(flag)))
        results.append(result)
    return results


_new_result = object.__new__
_RESULT_SETTERS = tuple(getattr(AppendResult, name).__set__ for name in ("partition", "offset", "duplicate"))
